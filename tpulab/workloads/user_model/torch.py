"""The user's own `nn.Module` on PyTorch, inside the worker: load it, feed it, train it, eager or compiled.

`build()` returns the module, or `(module, example_inputs)` (one batch, of any nesting: see `read`), or
`(module, (x, y))` (their data: `x` what the module takes, `y` its targets); or a library builds it
(`hf:`, `timm:`, torch_library.py) with random batches from its config. Random batches follow the example
inputs (or `--input-shape`), at the example's own batch unless a flag sets one. The loss is the module's own
where its output is one (a scalar, or a `loss` entry or attribute: a `transformers` `ModelOutput`; a causal
LM's labels are its input ids, as transformers trains it), else cross-entropy for a class per output column
or over the last dimension of named `logits`, else mean squared error; the record says which, and whose. It
trains with Adam; `--compile on` times `torch.compile(module)`, `both` times eager first, then compiled, from
the same starting weights. A Keras model (a file that imports Keras, or a KerasHub preset) runs through the
shared Keras runner instead, on Keras's torch backend.
"""

from __future__ import annotations

import copy
import inspect
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

import numpy as np

import torch
import torch.nn.functional as F
from torch import nn

from tpulab.backends.torch import captured_ops, synchronize
from tpulab.base.errors import TpulabError, UserCodeError, one_line, out_of_memory
from tpulab.base.events import PHASE_PREDICT, PHASE_TRAIN, Compiled, Epoch, Event, Log, Step
from tpulab.workloads.base import BATCH_SIZE, COMPILE, PHASE_COMPILED, PHASE_EAGER, variants
from tpulab.workloads.keras_params import EPOCHS, PREDICT_STEPS, SEED, STEPS_PER_EPOCH
from tpulab.workloads.running import CancelToken, Planned, Sink, place, profile_calls, started
from tpulab.workloads.torch_steps import can_compile, parameters
from tpulab.workloads.user_model.batch import Inputs, called, leaves, map_leaves, named_leaves
from tpulab.workloads.user_model.source import call, user_traceback
from tpulab.workloads.user_model.torch_library import Draw, build
from tpulab.workloads.user_model.workload import SEQ_LEN, WEIGHTS

if TYPE_CHECKING:
    from tpulab.backends import Runtime
    from tpulab.workloads.base import Params
    from tpulab.workloads.user_model.target import Target


class ModelHooks(Planned, Protocol):
    """What this runner reads of the model workload's declaration (`UserModel` has it)."""

    def target(self, p: Params) -> Target: ...
    def shape(self, p: Params) -> tuple[int, ...] | None: ...

OPTIMIZER = "Adam(lr=0.001)"
SYNTHETIC_BATCHES = 2
PROBE_ROWS = 2  # examples in the calls that learn the output's form and count a step's FLOPs (BatchNorm needs 2)
DEFAULT_BATCH = 32
AUTOCAST = {"mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}
INFERENCE = "torch.inference_mode, module.eval()"

def run(w: ModelHooks, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    """A Keras model (its file imports Keras) goes to the shared Keras runner; an `nn.Module` is timed here."""
    t = w.target(p)
    if "keras" in t.imports():
        from tpulab.workloads.keras_runner import run as keras_run

        keras_run(w, p, sink, cancel, runtime)  # type: ignore[arg-type]  # the model workload has both hooks
        return
    placement = place(w, p, runtime)
    device = placement.devices[0]
    modes = variants(p[COMPILE.name])
    can_compile(p[COMPILE.name], device)
    torch.manual_seed(p[SEED.name])
    loaded = load(t, w.shape(p), p)
    module = loaded.module.to(device)
    batch, batch_from = decided_batch(p[BATCH_SIZE], loaded)
    asked, p = p, {**p, BATCH_SIZE: batch}
    batches, few = feed(t, module, loaded, batch, p[SEED.name], device)
    loss, whose = loss_words(batches[0][0], *few)
    autocast = AUTOCAST.get(p["precision"])
    first = started(w, p, placement, runtime.versions(), loaded.said, synthetic=loaded.targets is None)
    first.decided = {BATCH_SIZE: batch} if batch != asked[BATCH_SIZE] else {}
    first.flops_per_step = step_flops(module, few, autocast, batch)
    first.model = {"parameters": parameters(module), "trainable_parameters": parameters(module, trainable=True),
                   "optimizer": OPTIMIZER, "loss": loss, "loss_by": whose, "batch_from": batch_from,
                   "example_read_as": loaded.read_as or None,
                   "inference": INFERENCE, "compile": p[COMPILE.name],
                   "float32_matmul_precision": torch.get_float32_matmul_precision(),
                   "autocast": str(autocast).removeprefix("torch.") if autocast else None}
    sink(first)
    synthetic = loaded.targets is None

    def events(e: Event) -> None:  # every event of a run on random inputs says so
        e.synthetic = synthetic
        sink(e)
    try:
        for compiled in modes:
            fresh = copy.deepcopy(module) if len(modes) > 1 else module  # both: each from the same weights
            if compiled:
                forget_compiles()
            step = Trainer(fresh, batches, autocast, compiled, device)
            phase = PHASE_EAGER if len(modes) > 1 and not compiled else PHASE_TRAIN
            named = PHASE_COMPILED if len(modes) > 1 and compiled else phase  # its compile, named beside eager's
            train(step, p, events, cancel, batch, phase, named, epochs=phase == PHASE_TRAIN)
            if compiled:
                sink(Log(text=graph_breaks()))
            if phase == PHASE_TRAIN:
                if p[PREDICT_STEPS.name] and not cancel.is_set():
                    predict(step, p[PREDICT_STEPS.name], events, cancel, batch)
                fresh.train()
                profile_calls(p, sink, cancel, runtime, step)
    except Exception as e:
        if out_of_memory(e):
            raise TpulabError(f"the model does not fit in the device's memory at --batch-size {batch}: try a "
                              f"smaller batch (--batch-size {max(1, batch // 2)})") from e
        raise


# --- the user's module and its data ------------------------------------------------------------
Batch = tuple[Inputs, Any]  # (inputs, targets or None)


@dataclass(frozen=True)
class Loaded:
    """The module and what feeds it: example inputs (one batch), the user's data (`targets` too), or random
    batches made without an example (`draw`: a library's, from the model's config; or of `--input-shape`); and
    how the example was read (`read_as`, for the summary)."""

    module: nn.Module
    inputs: Inputs
    said: str  # what the inputs are, for the record
    targets: Any = None
    draw: Draw | None = None
    read_as: str = ""

    @property
    def example_rows(self) -> int | None:
        """The batch of the user's example input (None for data, or a library's model)."""
        if self.targets is not None or self.draw is not None:
            return None
        first = first_input(self.inputs)
        return int(first.shape[0]) if first is not None else None


def decided_batch(asked: int, loaded: Loaded) -> tuple[int, str]:
    """The batch a run trains on and where it came from: a flag's (or a sweep's), else the example input's, else
    32 (data, a library's model, or a module alone)."""
    rows = loaded.example_rows
    if asked:
        return asked, "--batch-size" + (f" (your example input had {rows})" if rows and rows != asked else "")
    if rows:
        return rows, "your example input's"
    return DEFAULT_BATCH, "tpulab's default (--batch-size sets it)"


def forward(module: Callable[..., Any], x: Inputs) -> Any:
    """The module on one batch: `module(*args, **kwargs)`."""
    return module(*x.args, **x.kwargs)


def batched(v: Any) -> bool:
    """A leaf with a batch axis (its first): a tensor of one dimension or more; anything else passes as it is."""
    return torch.is_tensor(v) and v.dim() > 0


def first_input(x: Inputs) -> Any:
    """A batch's first tensor (by name or in order, at any depth): its first dimension is the batch's rows."""
    return next((v for v in leaves(x) if batched(v)), None)


def each(x: Inputs, f: Callable[[Any], Any]) -> Inputs:
    """`f` on every batched tensor, the batch's structure kept."""
    return map_leaves(lambda v: f(v) if batched(v) else v, x)


def load(t: Target, shape: tuple[int, ...] | None, p: Params) -> Loaded:
    """The module and what feeds it, from the user's function or a library."""
    if t.library:
        if shape is not None:
            raise TpulabError(f"--input-shape: {t.label} makes its inputs from its config: leave it out")
        built = build(t, p[WEIGHTS.name], p[SEQ_LEN.name])
        return Loaded(built.module, Inputs(), built.said, draw=built.draw)
    try:
        result = call(t)
    except Exception as e:  # noqa: BLE001 - the user's code failed: they get their own traceback
        raise UserCodeError(user_traceback(t, e)) from None
    module, rest = result if isinstance(result, tuple) and len(result) == 2 else (result, None)
    if not isinstance(module, nn.Module):
        raise TpulabError(f"{t.label} returned {type(module).__name__}, not a torch nn.Module: return the module, "
                          "(module, example_inputs) or (module, (x, y))")
    if rest is None:
        if shape is None:
            raise TpulabError(f"{t.label} returned a module alone: pass --input-shape with one example's shape "
                              "(e.g. --input-shape 64), or return (module, example_inputs)")
        return Loaded(module, Inputs(), f"synthetic inputs of --input-shape {shape}",
                      draw=lambda n, g: Inputs((torch.randn(n, *shape, generator=g),)),
                      read_as="one positional input, module(x), of --input-shape")
    if shape is not None:
        raise TpulabError(f"--input-shape: {t.label} returned its inputs, whose shape tpulab follows: leave it out")
    inputs, targets, read_as = read(t, module, map_leaves(tensor, rest, is_leaf=numbers))
    if first_input(inputs) is None:
        raise TpulabError(f"{t.label}: its example inputs hold no tensor with a batch axis (its first): return "
                          "(module, example_inputs) with one batch of tensors")
    if targets is None:
        return Loaded(module, inputs, "synthetic inputs like the example inputs", read_as=read_as)
    return Loaded(module, inputs, "the function's data", targets=targets, read_as=read_as)


def tensor(v: Any) -> Any:
    """A numpy array, or a list of numbers, as a tensor; any other leaf as it is."""
    return torch.as_tensor(v) if isinstance(v, np.ndarray) or numbers(v) else v


def numbers(v: Any) -> bool:
    """A list of numbers, at any depth: one tensor's values (a tokenizer's output without return_tensors)."""
    return isinstance(v, list) and bool(v) and all(isinstance(n, (int, float)) for n in leaves(v))


def read(t: Target, module: nn.Module, rest: Any) -> tuple[Inputs, Any, str]:
    """How `(module, rest)` is read (the rule docs/how-to/your-model.md states): a tuple (or list) is the forward's
    positional inputs, unless it is two items the forward cannot be called with, `(x, y)`: inputs and targets; a
    dict is its inputs by name where the forward's parameters take its keys, else its one positional input; anything
    else (a tensor, a dataclass, a named tuple) is its one positional input. Returns (inputs, targets or None, how
    it was read, for the summary)."""
    if type(rest) not in (tuple, list):
        inputs = named(t, module, rest) if isinstance(rest, Mapping) else Inputs((rest,))
        return inputs, None, called(inputs)
    items = Inputs(tuple(rest))
    if len(items.args) != 2:
        return items, None, called(items)
    refused = refusal(module, items)
    if refused is None:
        return items, None, (f"{called(items)}: your forward takes both (for inputs and targets, return (module, "
                             "((x,), y)))")
    x, y = items.args
    inputs = Inputs(tuple(x)) if type(x) in (tuple, list) else named(t, module, x) if isinstance(x, Mapping) \
        else Inputs((x,))
    try:
        y = torch.as_tensor(y)
    except (TypeError, ValueError, RuntimeError):
        raise TpulabError(f"{t.label}: its forward cannot take the two items as its inputs ({one_line(refused)}), "
                          f"and as (x, y), inputs and targets, y is a {type(y).__name__}: tpulab's loss takes one "
                          "tensor of targets") from None
    return inputs, y, f"inputs (x): {called(inputs)}; targets (y), as your forward cannot take both as inputs"


def named(t: Target, module: nn.Module, batch: Mapping[str, Any]) -> Inputs:
    """A dict batch: by name, `module(**batch)`, where the forward's parameters take its keys (a Hugging Face model
    does); else `module(batch)`, where the forward takes one argument; else one line on what it takes."""
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):  # no signature to read: by name, as most dict batches are meant
        return Inputs(kwargs=dict(batch))
    for inputs in (Inputs(kwargs=dict(batch)), Inputs((batch,))):
        try:
            signature.bind(*inputs.args, **inputs.kwargs)
        except TypeError:
            continue
        return inputs
    raise TpulabError(f"{t.label}: its forward{signature} takes neither the dict's keys ({', '.join(map(str, batch))}) "
                      "by name nor the dict as one argument: return (module, example_inputs) with what it takes (a "
                      "tuple in order, a dict by its parameters' names), or (module, (x, y)) for inputs and targets")


def refusal(module: nn.Module, inputs: Inputs) -> Exception | None:
    """Why the module does not take these as its inputs (called on their first rows), None where it does."""
    try:
        with torch.no_grad():
            forward(module, each(inputs, lambda v: v[:PROBE_ROWS]))
    except Exception as e:  # noqa: BLE001 - any failure: not its inputs
        return e
    return None


def feed(t: Target, module: nn.Module, loaded: Loaded, batch: int, seed: int, device: Any
         ) -> tuple[list[Batch], tuple[Any, Any]]:
    """The batches a run cycles through, on the device: slices of the user's data, or random batches (a causal
    language model's labels made from its input ids, as transformers' own training makes them); and the module's
    output on the first batch's first rows with their targets, which say what the output is (and its loss)."""
    if loaded.targets is not None:
        ys = loaded.targets
        if len(ys) < batch:
            raise TpulabError(f"--batch-size {batch} is more than the {len(ys)} examples your function returned")

        def part(k: int) -> Batch:
            rows = slice(k * batch, (k + 1) * batch)
            return each(loaded.inputs, lambda v: v[rows].to(device)), ys[rows].to(device)
        given = [part(k) for k in range(len(ys) // batch)]
        x, y = given[0]
        return given, (probe(t, module, x), y[:PROBE_ROWS])
    generator = torch.Generator().manual_seed(seed)
    drawn = [labelled(module, each(loaded.draw(batch, generator) if loaded.draw else
                                   each(loaded.inputs, lambda v: like(v, batch, generator)),
                                   lambda v: v.to(device)))
             for _ in range(SYNTHETIC_BATCHES)]
    out = probe(t, module, drawn[0])
    rows = min(batch, PROBE_ROWS)
    return [(x, targets(out, batch, rows, generator)) for x in drawn], (out, targets(out, rows, rows, generator))


def probe(t: Target, module: nn.Module, x: Inputs) -> tuple[Inputs, Any]:
    """The batch's first rows and the module's output on them (no gradients): the module's first call, on few
    rows so that it costs little beside a step. What it cannot take is said in one line, with what to pass."""
    few = each(x, lambda v: v[:PROBE_ROWS])
    try:
        with torch.no_grad():
            return few, forward(module, few)
    except Exception as e:  # noqa: BLE001 - whatever the module raised on inputs tpulab made, the user's fix is one
        if out_of_memory(e):
            raise
        raise TpulabError(f"{t.label}: tpulab cannot call its forward on {shapes(x)}: {one_line(e)}; return "
                          "(module, example_inputs) with what its forward takes, or (module, (x, y))") from None


def labelled(module: nn.Module, x: Inputs) -> Inputs:
    """A causal language model's batch with its labels: its input ids (the model shifts them itself), where the
    batch has none and its forward takes them."""
    if "labels" in x.kwargs or "input_ids" not in x.kwargs or not causal_lm(module):
        return x
    return x._replace(kwargs={**x.kwargs, "labels": x.kwargs["input_ids"]})


def made_labels(x: Inputs) -> bool:
    """A causal LM's labels that tpulab made: its input ids (`labelled`)."""
    return "labels" in x.kwargs and x.kwargs["labels"] is x.kwargs.get("input_ids")


def causal_lm(module: nn.Module) -> bool:
    """A transformers model of a causal-LM class, as transformers' own table of them names it."""
    if not type(module).__module__.startswith("transformers."):
        return False
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return type(module).__name__ in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()) and \
        "labels" in inspect.signature(module.forward).parameters


def like(example: Any, batch: int, generator: Any) -> Any:
    """A random batch of `batch` rows shaped and typed like one example row: indices below the largest seen."""
    shape = (batch, *example.shape[1:])
    if example.dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if not example.is_floating_point():
        return torch.randint(0, int(example.max()) + 1, shape, generator=generator, dtype=example.dtype)
    return torch.randn(shape, generator=generator, dtype=example.dtype)


def own_loss(out: Any) -> Any:
    """The loss the module returned itself: a scalar, a `loss` entry or attribute, or a scalar first output."""
    if isinstance(out, Mapping) and torch.is_tensor(out.get("loss")):
        return out["loss"]
    if torch.is_tensor(getattr(out, "loss", None)):
        return out.loss
    first = out[0] if isinstance(out, (tuple, list)) and out else out
    return first if torch.is_tensor(first) and first.dim() == 0 else None


def logits(out: Any) -> Any:
    """The output's named `logits` (a dict's entry, a `ModelOutput`'s attribute), or None."""
    found = out.get("logits") if isinstance(out, Mapping) else getattr(out, "logits", None)
    return found if torch.is_tensor(found) else None


def prediction(out: Any) -> Any:
    """What the module predicts: its `logits`, else its first tensor output."""
    named = logits(out)
    if named is not None:
        return named
    if isinstance(out, Mapping):
        return next(v for v in out.values() if torch.is_tensor(v))
    return out[0] if isinstance(out, (tuple, list)) else out


def classes(out: Any) -> bool:
    """Its prediction is a score per class: a 2-D output's columns, or named logits' last dimension."""
    pred = prediction(out)
    return pred.shape[-1] > 1 and (pred.dim() == 2 or logits(out) is not None)


def targets(probed: tuple[Inputs, Any], batch: int, rows: int, generator: Any) -> Any:
    """Random targets for `batch` examples as the output on `rows` of them asks: none for a module's own loss,
    class labels below a 2-D output's width (or named logits' last dimension), else floats of its shape."""
    _, out = probed
    if own_loss(out) is not None:
        return None
    pred = prediction(out)
    lead = pred.shape[0] * batch // min(rows, PROBE_ROWS)  # its first dimension grows with the batch
    if classes(out):
        return torch.randint(0, pred.shape[-1], (lead, *pred.shape[1:-1]), generator=generator).to(pred.device)
    return torch.randn((lead, *pred.shape[1:]), generator=generator).to(pred.device)


def loss_of(out: Any, y: Any) -> Any:
    own = own_loss(out)
    if own is not None:
        return own
    pred = prediction(out)
    if by_class(pred, y):
        return F.cross_entropy(pred.float().reshape(-1, pred.shape[-1]), y.reshape(-1))
    return F.mse_loss(pred.float(), y.float().reshape(pred.shape))


def by_class(pred: Any, y: Any) -> bool:
    """Targets that are a class for each score vector of the prediction (its last dimension)."""
    return not y.is_floating_point() and pred.dim() >= 2 and tuple(y.shape) == tuple(pred.shape[:-1])


def shapes(x: Inputs) -> str:
    """A batch in words: 'input_ids (4, 32) int64, attention_mask (4, 32) int64'."""
    return ", ".join(f"{k} {tuple(v.shape)} {str(v.dtype).removeprefix('torch.')}" for k, v in named_leaves(x)
                     if torch.is_tensor(v))


def loss_words(x: Inputs, probed: tuple[Inputs, Any], y: Any) -> tuple[str, str]:
    """The loss trained, and whose it is: the module's own (and where its labels came from), or tpulab's and why,
    from the module's output on a batch's first rows (`probed`) and their targets."""
    _, out = probed
    if own_loss(out) is not None:
        if "labels" in x.kwargs:
            return "the module's own", ("its labels: the input ids, shifted by the model, as a causal LM trains"
                                        if made_labels(x) else "its labels: the batch's")
        return "the module's own", "its output is its loss"
    pred = prediction(out)
    if not by_class(pred, y):
        return "mean squared error", "tpulab's: the output has no loss, and its targets are not classes"
    whose = "tpulab's: the output has no loss, and scores a class per " + ("token" if pred.dim() > 2 else "example")
    return ("cross-entropy over the logits' last dimension" if pred.dim() > 2 else "cross-entropy"), whose


# --- steps -------------------------------------------------------------------------------------
class Trainer:
    """One training step (Adam) of a module, eager or under torch.compile; each call returns once its work is
    done (the loss on the host)."""

    def __init__(self, module: nn.Module, batches: list[Batch], autocast: Any, compiled: bool, device: Any) -> None:
        self.module, self.batches, self.device = module, batches, device
        self.forward: Callable[..., Any] = torch.compile(module) if compiled else module
        self.optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)
        self.autocast = (lambda: torch.autocast(device.type, dtype=autocast)) if autocast else nullcontext
        self.calls = 0

    def __call__(self) -> float:
        x, y = self.batches[self.calls % len(self.batches)]
        self.calls += 1
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = loss_of(forward(self.forward, x), y)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def infer(self) -> float:
        x, _ = self.batches[self.calls % len(self.batches)]
        self.calls += 1
        if made_labels(x):  # inference needs none
            x = x._replace(kwargs={k: v for k, v in x.kwargs.items() if k != "labels"})
        with torch.inference_mode(), self.autocast():
            out = prediction(forward(self.forward, x))
        value = float(out.float().sum())
        synchronize(self.device)
        return value


def timed(f: Callable[[], float]) -> tuple[float, float]:
    t0 = time.perf_counter()
    value = f()
    return value, time.perf_counter() - t0


def train(step: Trainer, p: Params, events: Sink, cancel: CancelToken, batch: int,
          phase: str, first: str, epochs: bool) -> None:
    """Epochs of timed steps: the first call apart (its compile, said as `first`), then each step as it completes."""
    done = 0
    for epoch in range(p[EPOCHS.name]):
        start = time.perf_counter()
        loss = None
        for _ in range(p[STEPS_PER_EPOCH.name]):
            loss, seconds = timed(step)
            done += 1
            emit(events, phase, done, seconds, batch, {"loss": loss}, first=first)
            if cancel.is_set():
                return
        if epochs:
            events(Epoch(epoch=epoch + 1, seconds=time.perf_counter() - start,
                         metrics={"loss": loss} if loss is not None else {}))


def predict(step: Trainer, steps: int, events: Sink, cancel: CancelToken,
            batch: int) -> None:
    step.module.eval()
    for n in range(1, steps + 1):
        value, seconds = timed(step.infer)
        emit(events, PHASE_PREDICT, n, seconds, batch, {}, value)
        if cancel.is_set():
            return


def emit(events: Sink, phase: str, n: int, seconds: float, batch: int, metrics: dict[str, float],
         value: float | None = None, first: str = "") -> None:
    """Step `n` of `phase`; the first is the compile, of the phase `first` names (by default `phase`). Typed events,
    built as they are: no validation of what this runner made (its first costs 0.1 s, before the first step)."""
    if n == 1:
        events(Compiled(phase=first or phase, seconds=seconds, steps=1))
        return
    events(Step(step=n, phase=phase, steps=1, seconds=seconds, examples_per_s=batch / seconds, metrics=metrics,
                value=value))


def step_flops(module: nn.Module, few: tuple[tuple[Inputs, Any], Any], autocast: Any, batch: int) -> float | None:
    """FLOPs of one training step (forward and backward) as torch.utils.flop_counter counts them, None for none:
    counted on the first rows of a batch and scaled to the whole (the ops it counts, matmuls, convolutions and
    attention, each grow with the batch), so that counting costs little beside a step."""
    from torch.utils.flop_counter import FlopCounterMode

    (x, _), y = few
    first = first_input(x)
    counter = FlopCounterMode(display=False)
    with counter, (torch.autocast(first.device.type, dtype=autocast) if autocast else nullcontext()):
        loss_of(forward(module, x), y).backward()
    module.zero_grad(set_to_none=True)  # the count's gradients are no step's
    return float(counter.get_total_flops()) * batch / first.shape[0] or None


def forget_compiles() -> None:
    """Dynamo's counts of graphs and breaks start from this module's compile (they are the process's)."""
    from torch._dynamo.utils import clear_compilation_metrics, counters

    clear_compilation_metrics()
    counters.clear()


def graph_breaks() -> str:
    """What torch.compile made, in the op table's words: each forward graph that holds ops, with the ops dynamo
    captured in it (each has its backward, AOTAutograd's), then each graph break's reason (its first line: dynamo
    explains at length), as dynamo counts them."""
    from torch._dynamo.utils import counters

    ops = [n for n in captured_ops().values() if n]  # a frame a break left empty compiles no graph
    made = "torch.compile: compiled forward, " + ", ".join(f"graph {i} of {len(ops)} ({n} ops)"
                                                           for i, n in enumerate(ops, 1)) if ops else "torch.compile"
    breaks = counters["graph_break"]
    if not breaks:
        return f"{made}; no graph break (the module compiled whole)"
    said = "; ".join(f"{reason.strip().splitlines()[0]} (x{n})" for reason, n in breaks.most_common(5))
    return f"{made}; {sum(breaks.values())} graph break(s): {said}"
