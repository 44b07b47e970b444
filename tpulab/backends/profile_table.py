"""Where a traced step's time went: the op table, built from a neutral view of a trace (framework-free).

Each backend reads its `xplane.pb` into `TracePlane`s (planes -> lines -> events with a name, a start,
a duration and stats, as XProf lays them out); this module picks the lines that hold ops, finds the
steps (the events a step annotation left: a `step_num` stat), and gives the median step's table.

Time is never counted twice: on one line an op's time is its self time (an event enclosing others
keeps only what they leave), and ops running at once on several lines share the wall time they
overlap. So the op times plus the host gap (the step's time with no op running) make the step.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from tpulab.base.errors import TpulabError
from tpulab.base.events import OP_CATEGORIES, OTHER_OPS, OpRow, Profile

TOP_OPS = 20  # rows kept by time; the rest are summed in one `other` row
HOST_CPU = "/host:CPU"
XLA_OPS = "XLA Ops"  # a device plane's line of HLO ops (TPU; GPU once XProf derived it)
# A device plane's lines that sum or name others' events rather than run ops (XProf's derived lines).
DERIVED_LINES = frozenset({"XLA Modules", "Steps", "TensorFlow Ops", "TensorFlow Name Scope", "Framework Ops",
                           "Framework Name Scope", "Source code", "XLA TraceMe", "Launch Stats", "Host Threads"})
FRAMEWORK_OP = "framework_op"  # the stat of an event that is one op as its framework's own profiler named it (torch's)
PYTHON = "$"  # the Python tracer's events ("$api.py:2479 block_until_ready"): no op, no step; readers skip them
TF_KERNEL = re.compile(r"([^\s:]+):([A-Za-z_]\w*)")  # TensorFlow's kernel events: "dense/MatMul:MatMul"
# A called function's kernels carry the names of the calls that led to them (fit under a strategy wraps its step
# in one): left out, so an op is named alike however it was called.
CALLERS = re.compile(r"^(?:(?:Stateful)?PartitionedCall(?:_\d+)?/)+")
# A kernel TensorFlow (oneDNN) fused from a matmul or convolution and the nodes after it: it runs under the last
# one's name ("conv2d_1/Elu:_MklNativeFusedConv2D"), so it is named by what it fuses, never by that node alone.
FUSED_KERNEL = re.compile(r"_\w*?Fused(?!BatchNorm)(\w+)")

MATMUL, ELEMENTWISE, REDUCTION, MOVEMENT, COLLECTIVE, HOST_TO_DEVICE, OTHER = OP_CATEGORIES


@dataclass(slots=True)
class TraceEvent:
    name: str
    start_ns: float
    duration_ns: float
    stats: Mapping[str, Any] = field(default_factory=dict)

    @property
    def end_ns(self) -> float:
        return self.start_ns + self.duration_ns


@dataclass(slots=True)
class TraceLine:
    name: str
    events: list[TraceEvent]


@dataclass(slots=True)
class TracePlane:
    name: str
    lines: list[TraceLine]


@dataclass(frozen=True)
class OpInfo:
    """What a compiled program says of one op: its type, category, and per call its FLOPs and bytes."""

    type: str
    category: str
    flops: float | None = None
    bytes: float | None = None
    fuses: tuple[str, ...] = ()  # a fused kernel's nodes' types, first to last ("Conv2D", "BiasAdd", "Elu")


Programs = Mapping[tuple[str | None, str], OpInfo]  # (module or None, op name) -> what the program says
Lookup = Callable[[str | None, str, str], OpInfo | None]  # (module, name, type) as traced -> what a program says


def by_name(programs: Programs) -> Lookup:
    """An op looked up by its module and name, or by its name alone where one module has it."""
    names: dict[str, list[tuple[str | None, str]]] = defaultdict(list)
    for key in programs:
        names[key[1]].append(key)

    def lookup(module: str | None, name: str, kind: str) -> OpInfo | None:
        if module is not None:
            return programs.get((module, name)) or programs.get((None, name))
        keys = names.get(name, [])
        return programs[keys[0]] if len(keys) == 1 else None

    return lookup


# --- categories from names ------------------------------------------------------------------
# The words of an op's type (an HLO opcode or instruction name, a TensorFlow op), as `words` folds them,
# that put it in a category; checked in this order, a word containing one of `_CONTAINS` or equal to one
# of `_EXACT` (a fusion that computes anything is elementwise, one that only moves data is not).
_CONTAINS = ((COLLECTIVE, ("allreduce", "allgather", "reducescatter", "alltoall", "collective", "nccl")),
             (HOST_TO_DEVICE, ("infeed", "outfeed", "memcpyh2d", "memcpyhtod", "hosttodevice", "iteratorgetnext")),
             (MATMUL, ("dot", "gemm", "matmul", "convolution", "conv2d", "conv3d", "einsum", "cublas", "cudnn")),
             (REDUCTION, ("reduce", "argmax", "argmin", "softmax", "batchnorm", "layernorm", "l2loss", "pool",
                          "biasaddgrad")),
             (ELEMENTWISE, ("resourceapply", "grad")),
             (MOVEMENT, ("transpose", "copy", "gather", "scatter", "slice", "concat", "memcpy", "broadcast",
                         "bitcast", "reshape", "squeeze", "expanddims")))
_EXACT = {MATMUL: {"conv"},
          REDUCTION: {"sum", "mean", "max", "min", "prod", "all", "any"},
          ELEMENTWISE: {"add", "addn", "sub", "subtract", "mul", "multiply", "div", "divide", "realdiv", "exp",
                        "exponential", "expm1", "log", "log1p", "tanh", "sigmoid", "logistic", "relu", "relu6",
                        "elu", "selu", "gelu", "softplus", "sqrt", "rsqrt", "square", "squareddifference", "pow",
                        "power", "negate", "neg", "abs", "maximum", "minimum", "cast", "convert", "compare",
                        "greater", "greaterequal", "less", "lessequal", "equal", "notequal", "and", "or", "not",
                        "xor", "logicaland", "logicalor", "logicalnot", "select", "clamp", "floor", "ceil",
                        "round", "sign", "sin", "cos", "erf", "biasadd", "reciprocal", "floordiv", "floormod",
                        "remainder", "atan2", "loop"},
          MOVEMENT: {"pad", "tile", "pack", "unpack", "reverse", "identity", "fill", "onehot"}}
_DECORATION = {"", "fusion", "wrapped", "input", "output"}  # words XLA adds to a fusion's name


def words(name: str) -> list[str]:
    """An op's type or name as lower-case words without a framework's decoration: "_MklMatMul" -> ["matmul"],
    "wrapped_reduce-window" -> ["reducewindow"], "loop_multiply_fusion.3" -> ["loop", "multiply"]."""
    out = []
    for part in re.split(r"[_\s/]+", re.sub(r"\.\d+$", "", name).lower()):  # an HLO name's instance number
        word = re.sub(r"^(?:mkl|native|fused)+", "", part.replace("-", ""))  # oneDNN's, fused kernels' prefixes
        word = re.sub(r"v\d+$", "", word)  # versions: AddV2, FusedBatchNormV3
        if word not in _DECORATION:
            out.append(word)
    return out


def category(name: str) -> str:
    """The category an op's type (or, lacking one, its name) puts it in; "other" where no word says."""
    found = words(name)
    for cat, parts in _CONTAINS:
        if any(p in w for w in found for p in parts):
            return cat
        if any(w in _EXACT.get(cat, ()) for w in found):
            return cat
    return OTHER


def xplane_file(folder: Path) -> Path:
    """The trace a profiler wrote into `folder` (`plugins/profile/<time>/<host>.xplane.pb`), the newest."""
    found = sorted(Path(folder).glob("**/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise TpulabError(f"no trace (*.xplane.pb) under {folder}: was anything traced into it?")
    return found[-1]


# --- which lines hold ops -------------------------------------------------------------------
def _ordinal(name: str) -> int:
    digits = re.search(r"(\d+)$", name)
    return int(digits.group(1)) if digits else 0


def op_events(planes: Iterable[TracePlane]) -> tuple[str, list[list[TraceEvent]]]:
    """Where the ops ran (a plane's name) and their events, one list per line.

    The first accelerator's plane where there is one (replicas run the same program): its "XLA Ops" line
    (a TPU's), else every line that runs work (a GPU's streams, kernels and copies). Without one, the host:
    XLA's ops (events with an `hlo_op` stat, of its first device), TensorFlow's kernels ("name:Type") and the ops
    a framework's own profiler names (a `framework_op` stat: torch's aten ops).
    """
    planes = list(planes)
    devices = sorted((p for p in planes if p.name.startswith("/device:") and "CUSTOM" not in p.name
                      and any(line.events for line in p.lines)), key=lambda p: (_ordinal(p.name), p.name))
    if devices:
        plane = devices[0]
        ops = [line for line in plane.lines if line.name == XLA_OPS] or \
            [line for line in plane.lines if line.name not in DERIVED_LINES]
        return plane.name, [list(line.events) for line in ops]
    host = next((p for p in planes if p.name == HOST_CPU), None)
    if host is None:
        return HOST_CPU, []
    lines = [[e for e in line.events if "hlo_op" in e.stats or FRAMEWORK_OP in e.stats or TF_KERNEL.fullmatch(e.name)]
             for line in host.lines]
    ordinals = {e.stats["device_ordinal"] for line in lines for e in line if "device_ordinal" in e.stats}
    if len(ordinals) > 1:
        first = min(ordinals)
        lines = [[e for e in line if e.stats.get("device_ordinal", first) == first] for line in lines]
    return HOST_CPU, [line for line in lines if line]


def steps(planes: Iterable[TracePlane]) -> list[tuple[float, float]]:
    """The traced steps' (start, end) in ns: the host's step annotations (a `step_num` stat), the outermost
    where a framework's own annotation (Keras's) sits inside the runner's."""
    found = sorted((e.start_ns, e.end_ns) for p in planes if p.name.startswith("/host:")
                   for line in p.lines for e in line.events if "step_num" in e.stats)
    outer: list[tuple[float, float]] = []
    for start, end in found:
        if outer and start < outer[-1][1]:
            continue  # inside the step before (its own annotation, or a nested one)
        outer.append((start, end))
    return outer


# --- time, never counted twice --------------------------------------------------------------
Key = tuple[str | None, str, str]  # (module, name, type)


def op_key(event: TraceEvent) -> Key:
    """An event's op: an HLO instruction (its `hlo_op`, in its `hlo_module`), a TensorFlow kernel ("name:Type"
    as its name or its `tf_op` stat, without its callers), else the event's own name (a GPU's copy)."""
    hlo = event.stats.get("hlo_op")
    if hlo:
        module = event.stats.get("hlo_module")
        return (str(module) if module else None), str(hlo), ""
    if FRAMEWORK_OP in event.stats:
        return None, str(event.stats[FRAMEWORK_OP]), ""
    kernel = TF_KERNEL.fullmatch(str(event.stats.get("tf_op") or event.name))
    if kernel:
        return None, CALLERS.sub("", kernel.group(1)), kernel.group(2)
    return None, event.name, ""


def self_segments(events: list[TraceEvent]) -> list[tuple[float, float, Key]]:
    """One line's events as (start, end, op) pieces in which that op, the innermost running, had the line."""
    out: list[tuple[float, float, Key]] = []
    stack: list[tuple[float, Key]] = []  # (end, op) of the events enclosing the cursor
    cursor = 0.0
    for event in sorted(events, key=lambda e: (e.start_ns, -e.duration_ns)):
        start = event.start_ns
        while stack and stack[-1][0] <= start:
            end, key = stack.pop()
            if end > cursor:
                out.append((cursor, end, key))
            cursor = max(cursor, end)
        if stack and start > cursor:
            out.append((cursor, start, stack[-1][1]))
        end = min(event.end_ns, stack[-1][0]) if stack else event.end_ns
        stack.append((end, op_key(event)))
        cursor = start
    while stack:
        end, key = stack.pop()
        if end > cursor:
            out.append((cursor, end, key))
        cursor = max(cursor, end)
    return out


def share_time(segments: list[tuple[float, float, Key]], start: float, end: float) -> dict[Key, float]:
    """Each op's ns within [start, end]; where several ran at once, each gets an equal part of that time."""
    edges: list[tuple[float, int, Key]] = []
    for s, e, key in segments:
        s, e = max(s, start), min(e, end)
        if e > s:
            edges += [(s, 1, key), (e, -1, key)]
    edges.sort(key=lambda edge: (edge[0], edge[1]))
    running: Counter[Key] = Counter()
    out: dict[Key, float] = defaultdict(float)
    last = start
    for t, change, key in edges:
        width = sum(running.values())
        if width and t > last:
            for op, n in running.items():
                out[op] += (t - last) * n / width
        last = t
        running[key] += change
        if not running[key]:
            del running[key]
    return out


# --- the table --------------------------------------------------------------------------------
def build(planes: Iterable[TracePlane], programs: Lookup | None = None, *, profiler: str = "",
          trace_path: str | None = None, no_flops: str | None = None, top: int = TOP_OPS) -> Profile:
    """The median traced step's op table. `programs`: what compiled programs say of the ops (type, category,
    FLOPs, bytes), None where none was given; `no_flops`: why FLOPs are unknown then."""
    planes = list(planes)
    where, lines = op_events(planes)
    windows = steps(planes)
    profile = Profile(steps=len(windows), profiler=profiler, where=where, trace_path=trace_path)
    if not windows:
        profile.no_flops = no_flops
        return profile
    start, end = sorted(windows, key=lambda w: w[1] - w[0])[(len(windows) - 1) // 2]
    step_ns = end - start
    ns = share_time([seg for line in lines for seg in self_segments(line)], start, end)
    calls = Counter(op_key(e) for line in lines for e in line if start <= e.start_ns < end)
    rows = _rows(ns, calls, step_ns, programs)
    busy = sum(ns.values())
    profile.step_seconds = step_ns / 1e9
    profile.host_gap = max(0.0, step_ns - busy) / 1e9
    profile.host_gap_share = profile.host_gap / profile.step_seconds if step_ns else None
    profile.ops = _top(rows, top)
    known = any(r.flops is not None for r in rows)
    profile.no_flops = None if known else (no_flops if not programs else
                                           "the compiled program given does not name the traced ops")
    return profile


def _rows(ns: Mapping[Key, float], calls: Mapping[Key, int], step_ns: float, programs: Lookup | None) \
        -> list[OpRow]:
    keys = set(ns) | set(calls)
    names = Counter(name for _, name, _ in keys)
    rows = []
    for key in keys:
        module, name, kind = key
        info = programs(module, name, kind) if programs else None
        if info and kind and words(info.type) != words(kind):
            info = None  # the framework rewrote the node the program names: another op ran under its name
        n = calls.get(key, 0)
        seconds = ns.get(key, 0.0) / 1e9
        rows.append(OpRow(
            name=fused_name(f"{module}/{name}" if names[name] > 1 and module else name, kind,
                            info.fuses if info else ()),
            type=kind or (info.type if info else ""),
            category=info.category if info else category(kind or name),
            calls=float(n), seconds=seconds, share=seconds * 1e9 / step_ns if step_ns else 0.0,
            flops=info.flops * n if info and info.flops is not None and n else None,  # (no call began in the
            bytes=info.bytes * n if info and info.bytes is not None and n else None))  # step: a part, unknown)
    return sorted(rows, key=lambda r: (-r.seconds, r.name))


def fused_name(name: str, kind: str, fuses: tuple[str, ...]) -> str:
    """A fused kernel's name: its layer and what it fuses ("sequential_1/conv2d_1: Conv2D+BiasAdd+Elu, fused"),
    from the graph's nodes where given, else from its type and its last node ("...: Conv2D…Elu, fused")."""
    fused = FUSED_KERNEL.fullmatch(kind)
    if not fused or category(kind) != MATMUL or len(fuses) == 1:
        return name
    scope, _, last = name.rpartition("/")
    what = "+".join(fuses) if fuses else f"{fused.group(1)}…{last}"
    return f"{scope or last}: {what}, fused"


def _top(rows: list[OpRow], top: int) -> list[OpRow]:
    """The `top` rows by time, then one `other` row summing the rest."""
    if len(rows) <= top:
        return rows
    rest = rows[top:]
    return [*rows[:top], OpRow(name=OTHER_OPS, category=OTHER, calls=sum(r.calls for r in rest),
                               seconds=sum(r.seconds for r in rest), share=sum(r.share for r in rest),
                               flops=_known_sum([r.flops for r in rest]), bytes=_known_sum([r.bytes for r in rest]))]


def _known_sum(values: list[float | None]) -> float | None:
    """The sum, where every value is known."""
    return None if None in values else sum(v for v in values if v is not None)
