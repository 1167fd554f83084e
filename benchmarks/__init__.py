"""The benchmark scripts, each run as `python benchmarks/NAME.py`; tests import them as `benchmarks.NAME`."""
