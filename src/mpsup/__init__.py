"""mpsup: measure whether a PyTorch upgrade helps your model on your Mac's GPU."""

from pathlib import Path

__version__ = "0.1.0"

# The shaders live in the checkout's top-level metal/ folder, which an install maps in as mpsup.metal.
# A checkout used as it is (PYTHONPATH=src, as on a machine where nothing can be installed) would not
# find them: let the package look in the checkout too. An installed mpsup never has both files there.
_checkout = Path(__file__).resolve().parents[2]
if (_checkout / "metal" / "manifest.json").is_file() and (_checkout / "pyproject.toml").is_file():
    __path__.append(str(_checkout))
