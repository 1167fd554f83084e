"""The MLX worker: stdlib + mlx + mlx_lm only, loaded by file location in an MLX environment; imports no mpsup."""
