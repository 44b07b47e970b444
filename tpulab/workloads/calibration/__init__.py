"""A step of known work, for a noise floor and for tests of a verdict (`workload`); a runner per backend (`jax`,
`tf`, `torch`), each imported in the worker only."""

from tpulab.workloads.calibration.workload import CALIBRATION, Calibration

__all__ = ["CALIBRATION", "Calibration"]
