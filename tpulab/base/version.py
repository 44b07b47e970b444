"""tpulab's version, in the bottom layer so that any module can name it without the package root."""

__version__ = "0.1.0"
