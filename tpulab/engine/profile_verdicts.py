"""A profile judged against the machine's ceilings: each op's rates and its place under the roofline,
and what the step's profile says to do (`host-bound`, `one-op-dominates`, `memory-bound-ops`).

The ceilings are the measured ones kept from roofline runs where there are some (what this machine
was seen to do), else the vendor's spec (a bound no program reaches). The recorder puts the judged
profile into the summary; the judgement is made here only. Its advice names only the levers this
machine and framework have (`Levers`): bfloat16 where units compute in it, the framework's own compiler.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tpulab.backends import registry
from tpulab.base import fmt
from tpulab.base.ceilings import SPEC, Sourced
from tpulab.base.events import OTHER_OPS, Device, OpRow, Profile
from tpulab.base.timing import Flag
from tpulab.engine.ceilings import Ceilings
from tpulab.machine.detect import CpuInfo
from tpulab.machine.peaks import device_peak, spec_bandwidth

HOST_BOUND = 0.25  # a host gap of this share of the step or more: the device waits on the host
DOMINATES = 0.5  # one op with this share of the step or more: it is the step
MEMORY_BOUND = 0.3  # this share of the step or more in ops under the bandwidth line
NEAR_CEILING = 0.7  # an op at this fraction of its ceiling or more: only less work makes it faster
BF16_UNITS = ("avx512_bf16", "amx_bf16")  # CPU features (as `detect` names them) that compute in bfloat16


@dataclass(frozen=True)
class Levers:
    """What this machine and framework can use, so that advice names nothing else (None: no such lever)."""

    precision: str | None = None  # a lower one with units to run it: 'bfloat16', 'bfloat16 or float16'
    fusion: str | None = None  # the framework's fusing compiler: 'XLA', 'torch.compile'

    @classmethod
    def of(cls, backend: str, device: str, dtype: str, cpu: CpuInfo | None) -> Levers:
        """A run's levers: a lower precision on a TPU, a GPU or a CPU with bfloat16 units, unless the run is in
        one already; the backend's own fusing compiler (`Backend.fuser`: XLA, torch.compile; none declared, none)."""
        units = {"tpu": "bfloat16", "gpu": "bfloat16 or float16",
                 "cpu": "bfloat16" if cpu and any(f in cpu.features for f in BF16_UNITS) else None}.get(device)
        found = registry().get(backend)
        return cls(None if dtype.endswith("float16") else units, found.fuser if found else None)


@dataclass(frozen=True)
class Roof:
    """The two ceilings an op is set against: FLOP/s (for the run's dtype) and bytes/s, each with its source."""

    flops: Sourced | None = None
    bandwidth: Sourced | None = None

    def described(self) -> str | None:
        """The two ceilings and their sources, in words (None: neither is known)."""
        said = [f"{what} {fmt(c.value)} ({'spec: ' if c.kind == SPEC else ''}{c.source})"
                for what, c, fmt in (("compute", self.flops, lambda v: f"{v / 1e9:.1f} GFLOP/s"),
                                     ("memory", self.bandwidth, lambda v: f"{v / 1e9:.1f} GB/s")) if c and c.value]
        return "; ".join(said) or None

    def names(self) -> tuple[str, str]:
        """What an op's fraction is of, compute and memory: a measured ceiling, or the vendor's figure."""
        return ("the spec peak" if self.flops and self.flops.kind == SPEC else "the compute ceiling",
                "the spec bandwidth" if self.bandwidth and self.bandwidth.kind == SPEC else "the bandwidth ceiling")

    @property
    def ridge(self) -> float | None:
        """The intensity (FLOP per byte) above which an op is compute-bound."""
        return self.flops.value / self.bandwidth.value if self.flops and self.bandwidth else None


def roof(device: Device, dtype: str, ceilings: Ceilings, cpu: CpuInfo | None) -> Roof:
    """One device's ceilings for a run in `dtype` (the op table is one device's: the trace's first, and its
    program's FLOPs): each measured where a roofline kept one, else the spec's."""
    one = replace(device, replicas=1, hosts=1, machines=1)
    flops, bandwidth = ceilings.flops(one, dtype), ceilings.bandwidth(one)
    return Roof(flops.sourced() if flops else device_peak(one.kind, one.name, dtype, 1, cpu, 1),
                bandwidth.sourced() if bandwidth else spec_bandwidth(one.kind, one.name, 1))


def judge(profile: Profile, roof: Roof, levers: Levers = Levers()) -> Profile:
    """The profile with each op's rates against `roof`, and its verdicts, advising only `levers` (by default
    none: what is unknown is not advised)."""
    judged = replace(profile, ops=[op if op.name == OTHER_OPS else rated(op, roof) for op in profile.ops],
                     against=roof.described())  # (the row summing the rest is no op: it has no rate of its own)
    judged.verdicts = [*profile.verdicts, *verdicts(judged, levers)]
    return judged


def rated(op: OpRow, roof: Roof) -> OpRow:
    """An op's GFLOP/s, GB/s and intensity where its FLOPs and bytes are known; which side of the ridge
    that intensity puts it, and its fraction of that ceiling (of the compute ceiling where the ridge
    is unknown: the most it could do)."""
    if op.seconds <= 0:
        return op
    flops_per_s = op.flops / op.seconds if op.flops is not None else None
    bytes_per_s = op.bytes / op.seconds if op.bytes else None
    intensity = op.flops / op.bytes if op.flops is not None and op.bytes else None
    ridge = roof.ridge
    bound = None if intensity is None or ridge is None else "compute" if intensity >= ridge else "memory"
    fraction, of = None, None
    compute, memory = roof.names()
    if bound == "memory" and bytes_per_s and roof.bandwidth:
        fraction, of = bytes_per_s / roof.bandwidth.value, memory
    elif bound != "memory" and flops_per_s and roof.flops:
        fraction, of = flops_per_s / roof.flops.value, compute
    return replace(op, gflops_per_s=flops_per_s / 1e9 if flops_per_s is not None else None,
                   gbytes_per_s=bytes_per_s / 1e9 if bytes_per_s is not None else None,
                   intensity=intensity, bound=bound, ceiling_fraction=fraction, ceiling=of)


def verdicts(profile: Profile, levers: Levers) -> list[Flag]:
    """What the profile says of the step, each with its figures and the levers to pull."""
    return [f for f in (host_bound(profile), one_op_dominates(profile, levers), memory_bound_ops(profile, levers)) if f]


def either(options: list[str | None]) -> str:
    """'a, b or c': the options that apply."""
    said = [o for o in options if o]
    return ", ".join(said[:-1]) + " or " + said[-1] if len(said) > 1 else "".join(said)


def host_bound(profile: Profile) -> Flag | None:
    share = profile.host_gap_share
    if share is None or share < HOST_BOUND:
        return None
    return Flag("host-bound", f"the device waited on the host {share:.0%} of the step ({fmt.seconds(profile.host_gap)}"
                f" of {fmt.seconds(profile.step_seconds)}), on input, dispatch or Python: feed it faster or less often: the "
                "input pipeline (tf.data, prefetched, not a Python generator), more steps per execution, or a "
                "larger batch (more work per step for the same host time)")


def one_op_dominates(profile: Profile, levers: Levers) -> Flag | None:
    top = max((o for o in profile.ops if o.name != OTHER_OPS), key=lambda o: o.share, default=None)
    if top is None or top.share < DOMINATES:
        return None
    said = f"{top.name}{f' ({top.type})' if top.type else ''} takes {top.share:.0%} of the step"
    if top.ceiling_fraction is None:
        return Flag("one-op-dominates", f"{said}; its FLOPs or bytes are unknown, so is its distance to the "
                    "ceiling: the step is as fast as this op")
    said += f", at {top.ceiling_fraction:.0%} of {top.ceiling}"
    precision = f"a lower precision ({levers.precision})" if levers.precision else None
    if top.ceiling_fraction >= NEAR_CEILING:
        return Flag("one-op-dominates", f"{said}: it runs near the ceiling, so only less work makes the step "
                    f"faster: {either([precision, 'a smaller model'])}")
    return Flag("one-op-dominates", f"{said}: it is far from the ceiling: " + either([
        "a larger batch (more work per call)", precision,
        f"fusing it with its neighbours ({levers.fusion})" if levers.fusion else None]))


def memory_bound_ops(profile: Profile, levers: Levers) -> Flag | None:
    under = [o for o in profile.ops if o.bound == "memory"]
    share = sum(o.share for o in under)
    if share < MEMORY_BOUND:
        return None
    return Flag("memory-bound-ops", f"{len(under)} op(s) under the bandwidth line take {share:.0%} of the step: "
                "move fewer bytes: " + either([
                    f"a lower precision ({levers.precision} halves them)" if levers.precision else None,
                    f"fusion ({levers.fusion} keeps values on chip)" if levers.fusion else None,
                    "a larger batch (the weights read once for more examples)"]))
