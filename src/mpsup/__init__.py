"""mpsup: measure whether a PyTorch upgrade helps your model on your Mac's GPU."""

__version__ = "0.1.0"
