"""The parameters Keras workloads share: declared once, reused by each (and read by the shared runner)."""

from __future__ import annotations

from tpulab.backends import registry
from tpulab.workloads.base import BACKEND, DEVICE, PRECISION, SHARDS, ParamSpec

EPOCHS = ParamSpec("epochs", int, 5, "passes of steps-per-epoch steps, each followed by validation", 1, 1000,
                   term="epoch")
STEPS_PER_EPOCH = ParamSpec("steps_per_epoch", int, 100, "training steps per epoch", 1, 100000)


def _compiles_when_asked() -> tuple[str, ...]:
    return tuple(name for name, b in registry().items() if not b.xla_always and not b.compiles)


def _always_compiles(backend: str) -> str:
    found = registry().get(backend)
    if found is not None and found.compiles:
        return f"{found.title} compiles its steps under --compile on"
    return f"{found.title if found else backend} always compiles with XLA"


XLA = ParamSpec("xla", bool, False, "compile the training step with XLA (jit_compile)", term="XLA",
                backends=_compiles_when_asked, why_not=_always_compiles)
VALIDATION = ParamSpec("validation", bool, True, "evaluate on the test set after each epoch", term="validation")


def _runs_several_steps() -> tuple[str, ...]:
    return tuple(name for name, b in registry().items() if not b.compiles)


def _one_step_per_call(backend: str) -> str:
    return "Keras on PyTorch runs one step per call (steps_per_execution must be 1 there)"


STEPS_PER_EXECUTION = ParamSpec("steps_per_execution", int, 1, "steps run per call into the device (helps TPUs; "
                                "timings stay per step)", 1, 1000, term="steps per execution",
                                backends=_runs_several_steps, why_not=_one_step_per_call)
SEED = ParamSpec("seed", int, 0, "seed of weights, shuffling and dropout", 0, 2**31 - 1,
                 advanced=True, tunes=False)
PIPELINE = "pipeline"  # a workload's choice of input pipeline, where it declares one
KERAS_COMPILES_ONCE = ("a Keras model compiles once per run: run it with --compile off, then --compile on, and "
                       "compare the two (tpulab results compare)")
# Keras's torch backend wraps the step in torch.compile under jit_compile=True, in known cases slower than eager.
KERAS_TORCH_COMPILE = ("Keras on PyTorch compiles the step with torch.compile (--compile on), which Keras runs slower "
                       "than eager in known cases (keras-team/keras#21851): compare with --compile off")


PREDICT_STEPS = ParamSpec("predict_steps", int, 10, "inference steps after training: `predict` over batches of the "
                          "same size, timed apart (0: none)", 0, 100000, term="inference")


# How a Keras model runs, after what it is: the tail every synthetic-data model's parameters end with.
HOW_IT_RUNS = (SHARDS, PRECISION, XLA, STEPS_PER_EXECUTION, DEVICE, BACKEND, SEED)
