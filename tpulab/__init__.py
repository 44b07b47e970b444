"""tpulab: how fast is this machine for deep learning, and why."""

__version__ = "0.1.0"
