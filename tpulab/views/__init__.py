"""What runs, sweeps and the runtime look like as Rich tables and text: shared by the command line and the lab."""

from tpulab.base import moved

moved.install(__name__, {"ops": "profile"})  # the op-level profile's view, under its one name: the old path warns
