"""Energy meters, read in mpsup's own process (workers import only the standard library and torch): Apple
silicon's IOReport Energy Model, NVIDIA's board counter, Linux RAPL, or none, each behind `meter.Meter`."""
