"""Which meter a run on this device reads, or why none: one call, the same for `bench` and `doctor`."""

from __future__ import annotations

from mpsup.energy.apple import open_apple
from mpsup.energy.meter import Choice
from mpsup.energy.nvml import open_nvml
from mpsup.energy.rapl import open_rapl


def choose_meter(device: str) -> Choice:
    """mps: Apple's Energy Model; cuda: the board's NVML counter; cpu: RAPL. Where the device's own meter is
    missing there is none: another device's counter would not measure the work."""
    if device == "mps":
        return open_apple()
    if device == "cuda":
        return open_nvml()
    if device == "cpu":
        apple = open_apple(main="cpu")
        # On a Mac the CPU rows are the Energy Model's: the same meter, its CPU part the one that matters.
        return apple if apple.meter is not None else open_rapl()
    return Choice(None, f"no meter for device {device!r}")
