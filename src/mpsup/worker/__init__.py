"""The measuring process. Standard library and torch only: it runs inside the environment being
measured, loaded by file location so that none of mpsup's own site-packages is importable."""
