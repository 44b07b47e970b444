"""The user's own model: `tpulab --run model --model FILE.py:FUNCTION` (or `module:function`).

Declaration only. The function returns a compiled Keras 3 model, or `(model, (x, y))` with its
data; tpulab builds it in the worker on the chosen backend and shards (precision policy set
first), times `fit` and `predict` like any Keras workload, on synthetic inputs and targets of
the model's shapes unless data is given (`--input-shape` gives the shape Keras cannot see, as
in a subclassed model). Its FLOPs come from the compiler's cost analysis where the backend
has one (XLA's, on JAX); elsewhere they are unknown and no fraction of peak is shown. What the
user names is checked here, before a worker starts, without importing their code.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from tpulab.base.charts import GFLOPS, METRICS, STEP_TIME, THROUGHPUT
from tpulab.base.events import PHASE_TRAIN
from tpulab.base import fmt
from tpulab.base.noise import change
from tpulab.base.timing import Flag, median, summarize
from tpulab.backends import registry
from tpulab.workloads.base import (
    BACKEND,
    COMPILE,
    DEVICE,
    PHASE_EAGER,
    PRECISION,
    SHARDS,
    Limits,
    Metric,
    ParamError,
    Params,
    ParamSpec,
    SummaryPart,
    batch_size,
)
from tpulab.workloads.keras import KerasWorkload
from tpulab.workloads.keras_params import EPOCHS, PREDICT_STEPS, SEED, STEPS_PER_EPOCH
from tpulab.workloads.running import Runner, RunnerAt
from tpulab.workloads.user_model.target import Target

if TYPE_CHECKING:
    from tpulab.backends import Backend
    from tpulab.base.ceilings import MeasuredCeilings
    from tpulab.base.ceilings import Sourced
    from tpulab.base.events import Started, Step
    from tpulab.workloads.data import Dataset

MODEL = "model"
INPUT_SHAPE = ParamSpec("input_shape", str, "", "one example's shape without the batch axis, for a model whose "
                        "input Keras cannot see (a subclassed model)", tunes=False,
                        form="sizes separated by commas, e.g. 20 or 32,32,3")
PARAMS = (
    ParamSpec(MODEL, str, "", "the function that returns your compiled Keras model or your torch nn.Module: "
              "FILE.py:FUNCTION or module:function", tunes=False, term="your model"),
    INPUT_SHAPE,
    batch_size(32, 65536, what="examples per training step"),
    EPOCHS,
    STEPS_PER_EPOCH,
    PREDICT_STEPS,
    SHARDS,
    PRECISION,
    DEVICE,
    BACKEND,
    SEED,
)


def target(spec: str) -> Target:
    """`FILE.py:FUNCTION` or `module:function`, checked: the file or module exists and defines the function
    at its top level (read with `ast`: nothing of the user's runs in this process)."""
    source, sep, function = spec.strip().rpartition(":")
    if not spec.strip():
        raise ParamError(MODEL, "--model is required: FILE.py:FUNCTION or module:function (try "
                         "examples/models/mlp.py:build)")
    if not sep or not source or not function.isidentifier():
        raise ParamError(MODEL, f"--model must be FILE.py:FUNCTION or module:function (got {spec!r})")
    t = Target(source, function, None)
    if t.is_file:
        path = Path(source).expanduser()
        if not path.is_file():
            raise ParamError(MODEL, f"--model {spec}: no file {source} (run from the folder it is relative to, or "
                             "give its full path)")
        t = Target(str(path.resolve()), function, path.resolve())
    else:
        try:
            found = importlib.util.find_spec(source)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise ParamError(MODEL, f"--model {spec}: no module {source} on the Python path (a file needs its .py)")
        origin = found.origin
        t = Target(source, function, Path(origin) if origin and origin.endswith(".py") else None)
    if t.path is not None and not _defines(t.path, function):
        raise ParamError(MODEL, f"--model {spec}: {t.path.name} has no top-level function {function!r}")
    return t


def input_shape(text: str) -> tuple[int, ...] | None:
    """`--input-shape` as a shape (None when not given): positive sizes, comma-separated."""
    if not text.strip():
        return None
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() and int(part) > 0 for part in parts):
        raise ParamError(INPUT_SHAPE.name, f"{INPUT_SHAPE.flag} must be one example's shape without the batch "
                         f"axis: {INPUT_SHAPE.form} (got {text!r})")
    return tuple(int(part) for part in parts)


def _defines(path: Path, name: str) -> bool:
    """Whether the file defines `name` at its top level (a def, or an assignment or import of that name)."""
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (SyntaxError, ValueError) as e:
        raise ParamError(MODEL, f"--model: {path.name} is not valid Python ({e})") from None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
    return False


class UserModel(KerasWorkload):
    name = "model"
    title = "Your model"
    summary = ("Your own Keras model: --model FILE.py:FUNCTION (or module:function) returns it compiled; "
               "tpulab times fit and predict on synthetic inputs of its shapes (or your data).")
    params = PARAMS
    presets = {
        "smoke": {"batch_size": 8, "epochs": 1, "steps_per_epoch": 3, "predict_steps": 2},
    }
    metrics = (Metric("loss", "loss", higher_is_better=False, headline=True),)  # every compiled model has one
    charts = (STEP_TIME, THROUGHPUT, GFLOPS, METRICS)
    how = ("precision", MODEL, INPUT_SHAPE.name, COMPILE.name)  # another model or shape is another configuration
    runners = {"torch": RunnerAt("tpulab.workloads.user_model.torch:run")}  # an nn.Module, or Keras on torch

    def runner(self, backend: Backend) -> Callable[[], Runner] | None:
        return self.runners.get(backend.name) or super().runner(backend)

    def backend_hint(self, p: Params) -> tuple[str, str] | None:
        """A file that imports a backend's framework and not Keras builds that framework's model (a torch
        nn.Module): it runs on that backend by itself."""
        t = target(p[MODEL])
        found = t.imports()
        if "keras" in found:
            return None
        b = next((b for b in registry().values() if found & set(b.distributions)), None)
        return (b.name, f"{t.label} imports {b.title} and not Keras: it runs on {b.title}") if b else None

    def target(self, p: Params) -> Target:
        """Where the user's function lives (what a runner of its own loads)."""
        return target(p[MODEL])

    def shape(self, p: Params) -> tuple[int, ...] | None:
        """`--input-shape`, as a shape (None when not given)."""
        return input_shape(p[INPUT_SHAPE.name])

    def total_steps(self, p: Params) -> int:
        """With --compile both, the eager training steps come first."""
        training = p[EPOCHS.name] * p[STEPS_PER_EPOCH.name]
        return super().total_steps(p) + (training if p.get(COMPILE.name) == "both" else 0)

    def timed_seconds(self, steps: Iterable[Step], phase: str = "") -> list[float]:
        """The run's own steps: with --compile both, the compiled ones (the eager ones are set against them)."""
        return super().timed_seconds([s for s in steps if s.phase != PHASE_EAGER], phase)

    def summary_part(self, steps: list[Step], started: Started, ceilings: MeasuredCeilings, p: Params,
                     peak: Sourced | None) -> SummaryPart | None:
        """With --compile both, the run's figures are the compiled steps', and the eager ones are set against them."""
        if p.get(COMPILE.name) != "both":
            return None
        compiled = [s.seconds for s in steps if s.phase == PHASE_TRAIN and not s.warmup]
        eager = [s.seconds for s in steps if s.phase == PHASE_EAGER and not s.warmup]
        stats = summarize(compiled)
        flops = started.flops_per_step
        flags: tuple[Flag, ...] = ()
        found = change(eager, compiled)
        if found is not None and stats:
            flags = (Flag("eager-vs-compiled", f"eager {fmt.seconds(median(eager))} per step, compiled "
                          f"{fmt.seconds(stats.median)}: compiled against eager {found.words()}; the first calls, "
                          "its compile among them, apart"),)
        return SummaryPart(seconds=compiled, flops_per_step=flops,
                           flops_per_s=flops / stats.median if flops and stats and stats.median > 0 else None, flags=flags)

    def flops_per_step(self, p: Params) -> float | None:
        return None  # the compiler's count, measured in the worker where there is one

    def check_compile(self, p: Params) -> None:
        """An nn.Module takes --compile both; a Keras model in the file is refused it once the worker has loaded it."""

    def check(self, p: Params, limits: Limits) -> None:
        super().check(p, limits)
        target(p[MODEL])
        input_shape(p[INPUT_SHAPE.name])

    def model_info(self, p: Params) -> dict[str, Any] | None:
        """The file (or module) and function, and a hash of the file: another model is never the same work."""
        t = target(p[MODEL])
        digest = hashlib.sha256(t.path.read_bytes()).hexdigest()[:16] if t.path else None
        return {"name": t.label, "source": t.source, "function": t.function, "sha256": digest}

    def describe_data(self, p: Params) -> str:
        return "synthetic inputs of the model's shapes, unless the function returns data"

    # --- in the worker ---------------------------------------------------------------------
    def build_model(self, p: Params) -> Any:
        from tpulab.workloads.user_model.keras import load

        return load(target(p[MODEL]), input_shape(p[INPUT_SHAPE.name]))

    def compile_model(self, model: Any, p: Params, jit_compile: bool | str) -> None:
        """The user compiled it: the optimizer, loss and metrics are theirs. A run that asks for a compiled step
        (--xla, --compile on) gets one, whatever their compile said (on PyTorch Keras's "auto" is eager)."""
        if jit_compile is True:
            model.jit_compile = True

    def data_for(self, model: Any, p: Params) -> Dataset:
        from tpulab.workloads.user_model.keras import data

        return data(model, input_shape(p[INPUT_SHAPE.name]), self.batch_size(p), p[SEED.name])

    def measured_flops(self, counted: float | None) -> float | None:
        return counted


MODEL_WORKLOAD = UserModel()
