"""The user's own model: `tpulab --run model --model FILE.py:FUNCTION` (or `module:function`), or one a library
builds from its name: `hf:NAME_OR_DIR`, `timm:NAME`, `keras_hub:PRESET_OR_DIR`.

Declaration only. The function returns a compiled Keras 3 model, or `(model, (x, y))` with its
data; tpulab builds it in the worker on the chosen backend and shards (precision policy set
first), times `fit` and `predict` like any Keras workload, on synthetic inputs and targets of
the model's shapes unless data is given (`--input-shape` gives the shape Keras cannot see, as
in a subclassed model). A torch `nn.Module` runs on PyTorch (user_model/torch.py). Its FLOPs
come from the compiler's cost analysis where the backend has one (XLA's, on JAX;
torch.utils.flop_counter on PyTorch); elsewhere they are unknown and no fraction of peak is
shown. What the user names is checked here, before a worker starts, without importing their
code or the library.
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
    BATCH_SIZE,
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
)
from tpulab.workloads.keras import KerasWorkload
from tpulab.workloads.keras_params import EPOCHS, PREDICT_STEPS, SEED, STEPS_PER_EPOCH
from tpulab.workloads.running import Runner, RunnerAt
from tpulab.workloads.shared.model_source import LIBRARIES, folder_or_name
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
WEIGHTS = ParamSpec("weights", str, "random", "a library model's weights: random, from its config; or pretrained, "
                    "from its files on disk (hf: only)", options=("random", "pretrained"), tunes=False)
SEQ_LEN = ParamSpec("seq_len", int, 128, "tokens in each example of a library's text model (hf:, keras_hub:)", 1,
                    65536, unit="tokens")
DEFAULT_BATCH = 32
COMPARED_STEPS = 10  # steady steps a side before eager and compiled are compared (fewer give no interval to trust)
PARAMS = (
    ParamSpec(MODEL, str, "", "the function that returns your compiled Keras model or your torch nn.Module "
              "(FILE.py:FUNCTION or module:function), or a library's model: hf:NAME_OR_DIR, timm:NAME, "
              "keras_hub:PRESET_OR_DIR", tunes=False, term="your model"),
    INPUT_SHAPE,
    WEIGHTS,
    SEQ_LEN,
    ParamSpec(BATCH_SIZE, int, 0, "examples per training step, split evenly across the shards (global batch); 0: "
              f"your example input's batch, else {DEFAULT_BATCH}", 0, 65536, unit="examples", term="batch"),
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
    at its top level (read with `ast`: nothing of the user's runs in this process); or a library's model."""
    source, sep, function = spec.strip().rpartition(":")
    if not spec.strip():
        raise ParamError(MODEL, "--model is required: FILE.py:FUNCTION or module:function (try "
                         "examples/models/mlp.py:build), or hf:DIR, timm:NAME, keras_hub:DIR")
    prefix, _, name = spec.strip().partition(":")
    if prefix in LIBRARIES:
        return library_target(prefix, name.strip())
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


def library_target(library: str, name: str) -> Target:
    """A library's model by name or folder: a folder must hold its config.json (a name is looked up in the local
    cache by the worker, which reaches no hub)."""
    source, config = folder_or_name(library, name, MODEL)
    return Target(source, "", config, library)


def owner(t: Target) -> Backend | None:
    """The backend whose framework the model is written in, as its imports say (nothing of it run): the one
    framework it imports, without Keras (a Keras model runs on any Keras backend); None where they do not say."""
    found = t.imports()
    if "keras" in found:
        return None
    owners = [b for b in registry().values() if found & set(b.distributions)]
    return owners[0] if len(owners) == 1 else None


def written_in(t: Target, b: Backend) -> str:
    """'hf:gpt2 is a PyTorch model', 'hf_causal_lm:build imports PyTorch and not Keras'."""
    return f"{t.label} is a {b.title} model" if t.library else f"{t.label} imports {b.title} and not Keras"


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
    summary = ("Your own model: --model FILE.py:FUNCTION (or module:function) returns a compiled Keras model or a "
               "torch nn.Module; or a library's, from its config: hf:NAME_OR_DIR, timm:NAME, keras_hub:PRESET_OR_DIR. "
               "tpulab times training and inference on synthetic inputs of its shapes (or your data).")
    params = PARAMS
    presets = {
        # the batch is the user's example input's (or a flag's): a preset never overrides it unsaid
        "smoke": {"epochs": 1, "steps_per_epoch": 3, "predict_steps": 2},
    }
    metrics = (Metric("loss", "loss", higher_is_better=False, headline=True),)  # every compiled model has one
    charts = (STEP_TIME, THROUGHPUT, GFLOPS, METRICS)
    how = ("precision", MODEL, INPUT_SHAPE.name, COMPILE.name)  # another model or shape is another configuration
    runners = {"torch": RunnerAt("tpulab.workloads.user_model.torch:run",  # an nn.Module, or Keras on torch
                                 one_process="your model runs in one process on PyTorch (DistributedDataParallel "
                                 "trains tpulab's own Keras workloads, as fashion-mnist)")}

    def runner(self, backend: Backend) -> Callable[[], Runner] | None:
        return self.runners.get(backend.name) or super().runner(backend)

    def backend_hint(self, p: Params) -> tuple[str, str] | None:
        """A file that imports one backend's framework and not Keras builds that framework's model (a torch
        nn.Module): it runs on that backend by itself."""
        t = target(p[MODEL])
        b = owner(t)
        return None if b is None else (b.name, f"{written_in(t, b)}: it runs on {b.title}")

    def batch_size(self, p: Params) -> int:
        """The batch as given; where none was (0), the worker's choice: a user's example input's own, else 32."""
        return int(p[BATCH_SIZE]) or DEFAULT_BATCH

    def work_words(self, p: Params, per_replica_batch: int) -> str:
        if not p[BATCH_SIZE] and not per_replica_batch:
            return "global batch: your example input's, else 32"
        return super().work_words(p, per_replica_batch)

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
        found = change(eager, compiled) if min(len(eager), len(compiled)) >= COMPARED_STEPS else None
        if stats and eager:
            said = f"eager {fmt.seconds(median(eager))} per step, compiled {fmt.seconds(stats.median)}: "
            flags = (Flag("eager-vs-compiled", said + (
                f"compiled against eager {found.words()}; the first calls, its compile among them, apart" if found
                else f"{min(len(eager), len(compiled))} steady steps a side, too few for a verdict: "
                     f"{COMPARED_STEPS} a side give one (--steps-per-epoch {COMPARED_STEPS + 1})")),)
        return SummaryPart(seconds=compiled, flops_per_step=flops,
                           flops_per_s=flops / stats.median if flops and stats and stats.median > 0 else None, flags=flags)

    def flops_per_step(self, p: Params) -> float | None:
        return None  # the compiler's count, measured in the worker where there is one

    def check_compile(self, p: Params) -> None:
        """An nn.Module takes --compile both; a Keras model in the file is refused it once the worker has loaded it."""

    def check(self, p: Params, limits: Limits) -> None:
        super().check(p, limits)
        t = target(p[MODEL])
        input_shape(p[INPUT_SHAPE.name])
        if p[WEIGHTS.name] == "pretrained" and t.library != "hf":
            raise ParamError(WEIGHTS.name, f"{WEIGHTS.flag} pretrained: only an hf: model takes pretrained weights "
                             "(from its files on disk); others run from their config with random weights")
        b = owner(t)  # known from its imports: refused here, in well under a second: no worker, no run kept
        if b is not None and b.name in self.runners and p.get(BACKEND.name, "auto") not in ("auto", b.name):
            raise ParamError(BACKEND.name, f"--model {written_in(t, b)}: run it with --backend {b.name} (or leave "
                             "--backend out)")

    def model_info(self, p: Params) -> dict[str, Any] | None:
        """The file (or module) and function, and a hash of the file: another model is never the same work."""
        t = target(p[MODEL])
        digest = hashlib.sha256(t.path.read_bytes()).hexdigest()[:16] if t.path else None
        if t.library:
            return {"name": t.label, "source": t.source, "library": LIBRARIES[t.library].module, "sha256": digest}
        return {"name": t.label, "source": t.source, "function": t.function, "sha256": digest}

    def describe_data(self, p: Params) -> str:
        return "synthetic inputs of the model's shapes (a library's: from its config), unless the function returns data"

    # --- in the worker ---------------------------------------------------------------------
    def build_model(self, p: Params) -> Any:
        from tpulab.workloads.user_model.keras import load

        return load(target(p[MODEL]), input_shape(p[INPUT_SHAPE.name]), p[SEQ_LEN.name], self.batch_size(p))

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

    def model_words(self, model: Any) -> dict[str, Any]:
        """Whose loss a Keras model trains: the user's (their compile); or what KerasHub built, and whose loss."""
        from tpulab.workloads.user_model.keras_hub import describe

        built = describe(model)
        return {"built": built} if built else {"loss_by": "your compile's"}


MODEL_WORKLOAD = UserModel()
