"""A decode run's figures, from its steps: what its summary's `figures` keep (no framework here).

The runner says one `Step` for the prefill (`PHASE_PREFILL`: it reads the prompt and yields the
first token) and one per later token (`PHASE_DECODE`, `step` = the token's index, `seconds` = its
latency), each timed until the token reached the host. From those, the field's figures, as vLLM
and llama-bench name them:

- time to first token (TTFT): the prefill, which makes the first token;
- inter-token latency (ITL): each decode step; TPOT is their mean, so that
  end-to-end = TTFT + TPOT x (tokens - 1);
- a decode step reads every weight it multiplies by and the whole preallocated KV cache (it reads
  the cache's static shape, masked): its bytes over its time is the achieved bandwidth, set against
  the device's measured copy (MBU) and the vendor's figure.

One bandwidth per machine: MBU divides by the kept bandwidth ceiling (a quiet roofline's), and the run's
own copies check it. Where none is kept, it divides by the best of those copies, and says so: that MBU
moves with whatever else used the machine during those 2 s, so it is not comparable across runs.
A figure above what the hardware can do is flagged, never shown as a win.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from tpulab.base import fmt
from tpulab.base.ceilings import BANDWIDTH_LOW, MEASURED, Sourced
from tpulab.base.events import Started, Step
from tpulab.base.figures import HIGHER, LOWER, Figure, FigureValue, is_number
from tpulab.base.schema import scalars
from tpulab.base.noise import NOISE
from tpulab.base.timing import Flag, Stats, median, percentile, summarize
from tpulab.machine.peaks import spec_bandwidth
from tpulab.workloads.base import SummaryPart
from tpulab.workloads.shared.kernels import best_copy, copies

if TYPE_CHECKING:
    from tpulab.base.ceilings import MeasuredCeilings


@dataclass(frozen=True)
class Shape:
    """What a decode run holds and reads, from its parameters (the workload knows its model's sizes)."""

    batch: int  # sequences, over all replicas
    prompt_len: int
    cache: int  # positions the cache holds (preallocated)
    weight_bytes: float  # every weight a token is multiplied by, in the dtype it is read in
    kv_bytes_per_position: float  # one sequence's keys and values at one position, every layer
    prefill_flops: float | None = None  # the prompt's forward pass, over the batch
    replicas: int = 1  # each replica reads every weight


PHASE_PREFILL, PHASE_DECODE = "prefill", "decode"  # a Step's phase: the prompt (token 0), then one token each
# --verify's metrics, on the timed prefill's step: what was set against what, its bound and what it came to
VERIFIED = "verified"  # the largest |difference| of the cached logits from a full forward pass's
VERIFIED_LOGPROB = "verified_logprob"  # llama.cpp's: its chosen tokens' log-probabilities against the PyTorch decoder's
VERIFIED_SCALE = "verified_scale"  # the largest |logit|, which the tolerance is a fraction of
VERIFIED_TOLERANCE = "verified_tolerance"  # the bound, as that fraction
VERIFIED_DIFFER = "verified_differ"  # llama.cpp's greedy tokens that are not the decoder's (each a near tie)
VERIFIED_TOKENS = "verified_tokens"  # the greedy tokens set against the decoder's
VERIFY_METRICS = (VERIFIED, VERIFIED_LOGPROB, VERIFIED_SCALE, VERIFIED_TOLERANCE, VERIFIED_DIFFER, VERIFIED_TOKENS)
KEPT, RUN = "kept", "run"  # what MBU divides by (`bandwidth_basis`): the kept ceiling, or this run's copies
BANDWIDTH_CHECK = "bandwidth-disagrees"  # the run's copies and the kept ceiling differ beyond their interval and noise


def decode_steps(steps: list[Step]) -> list[Step]:
    """The timed token steps, by token index."""
    return sorted((s for s in steps if s.phase == PHASE_DECODE and not s.warmup), key=lambda s: s.step)


def prefill_seconds(steps: list[Step]) -> float | None:
    return median([s.seconds for s in steps if s.phase == PHASE_PREFILL and not s.warmup])


def step_bytes(shape: Shape) -> float:
    """Bytes a decode step reads: the weights, and the whole preallocated cache of every sequence (the
    step reads its static shape, masked past the current position)."""
    return shape.weight_bytes * shape.replicas + cache_bytes(shape)


def cache_bytes(shape: Shape) -> float:
    """The whole preallocated cache, every sequence's."""
    return shape.batch * shape.cache * shape.kv_bytes_per_position


ITL = "inter-token latency"
FIGURES = (  # what comparisons and sweeps set beside a run's step time: TTFT, ITL p50, MBU
    Figure(name="ttft_s", label="TTFT", unit="s", better=LOWER, compare=True),
    Figure(name="prompt_tokens_per_s", label="prefill tokens/s", unit="tokens/s", better=HIGHER),
    Figure(name="decode_tokens_per_s", label="tokens/s", unit="tokens/s", better=HIGHER,
           throughput="over the batch: the tokens the decode steps made over their time (batch / TPOT, the mean "
                      "token step)"),
    Figure(name="decode_tokens_per_s_per_seq", label="tokens/s per sequence", unit="tokens/s", better=HIGHER),
    Figure(name="itl_p50", label="ITL p50", unit="s", better=LOWER, group=ITL, compare=True),
    Figure(name="itl_p90", label="ITL p90", unit="s", better=LOWER, group=ITL),
    Figure(name="itl_p99", label="ITL p99", unit="s", better=LOWER, group=ITL),
    Figure(name="tpot_s", label="TPOT", unit="s", better=LOWER, group=ITL),
    Figure(name="e2e_s", label="end to end", unit="s", better=LOWER),  # one generation: TTFT + token_steps x TPOT
    Figure(name="token_steps", label="token steps", unit="tokens"),  # the timed decode steps after the prefill
    Figure(name="kv_cache_bytes", label="KV cache", unit="B"),
    Figure(name="kv_cache_positions", label="KV cache positions", unit="tokens"),
    Figure(name="weight_bytes_per_token_step", label="weights read per token step", unit="B"),
    Figure(name="bytes_per_token_step", label="read per token step", unit="B"),
    Figure(name="gbytes_per_s", label="achieved GB/s", better=HIGHER),
    Figure(name="bandwidth", label="bandwidth MBU is of", unit="B/s"),
    Figure(name="mbu", label="MBU", unit="%", better=HIGHER, compare=True, aside="mbu_against"),
    Figure(name="spec_bandwidth_fraction", label="of spec bandwidth", unit="%", better=HIGHER),
    Figure(name="prefill_mfu", label="prefill MFU", unit="%", better=HIGHER),
    Figure(name=VERIFIED, label="largest logit difference, cached against full forward", better=LOWER),
    Figure(name=VERIFIED_LOGPROB, label="largest log-probability difference, against the PyTorch decoder",
           better=LOWER),
    Figure(name=VERIFIED_SCALE, label="largest logit", group="verify"),
    Figure(name=VERIFIED_TOLERANCE, label="tolerance, of the largest logit", group="verify"),
    Figure(name=VERIFIED_DIFFER, label="greedy tokens that differ", group="verify"),
    Figure(name=VERIFIED_TOKENS, label="greedy tokens set against the decoder's", group="verify"),
)


def figures(steps: list[Step], shape: Shape, bandwidth: Sourced | None, spec: Sourced | None = None,
            peak_flops: float | None = None) -> tuple[dict[str, FigureValue], list[Flag]]:
    """The decode figures of `steps`, and the flags of any above the hardware (`bandwidth`: the measured
    copy's; `spec`: the vendor's; `peak_flops`: the device's peak, for the prefill's MFU)."""
    tokens = decode_steps(steps)
    prefill = prefill_seconds(steps)
    itl = [s.seconds for s in tokens]
    tpot = sum(itl) / len(itl) if itl else None
    moved = step_bytes(shape)
    rates = sorted(moved / s.seconds for s in tokens if s.seconds > 0)
    achieved = percentile(rates, 0.5) if rates else None
    prefill_rate = shape.prefill_flops / prefill if shape.prefill_flops and prefill else None
    d: dict[str, FigureValue] = {
        "ttft_s": prefill,
        "prompt_tokens_per_s": shape.batch * shape.prompt_len / prefill if prefill else None,
        "decode_tokens_per_s": shape.batch / tpot if tpot else None,
        "decode_tokens_per_s_per_seq": 1 / tpot if tpot else None,
        **{f"itl_p{q}": percentile(sorted(itl), q / 100) if itl else None for q in (50, 90, 99)},
        "tpot_s": tpot,
        "e2e_s": prefill + sum(s.seconds for s in tokens) if prefill is not None and tokens else None,
        "token_steps": len(tokens) or None,
        "kv_cache_bytes": cache_bytes(shape),
        "kv_cache_positions": shape.cache,
        "weight_bytes_per_token_step": shape.weight_bytes * shape.replicas,
        "bytes_per_token_step": moved,
        "gbytes_per_s": achieved / 1e9 if achieved else None,
        "bandwidth": bandwidth.value if bandwidth else None,
        "bandwidth_source": bandwidth.source if bandwidth else None,
        "mbu": achieved / bandwidth.value if achieved and bandwidth else None,
        "spec_bandwidth": spec.value if spec else None,
        "spec_bandwidth_source": spec.source if spec else None,
        "spec_bandwidth_fraction": achieved / spec.value if achieved and spec else None,
        "prefill_mfu": prefill_rate / peak_flops if prefill_rate and peak_flops else None,
        **{name: next((s.metrics[name] for s in steps if s.phase == PHASE_PREFILL and name in s.metrics), None)
           for name in VERIFY_METRICS},
    }
    return d, beats(d, achieved, prefill_rate, peak_flops)


def number(d: Mapping[str, Any], name: str) -> float | None:
    """A figure that is a number (a record read from a file may hold anything JSON does)."""
    v = d.get(name)
    return v if is_number(v) else None


def beats(d: Mapping[str, FigureValue], achieved: float | None, prefill_rate: float | None,
          peak: float | None) -> list[Flag]:
    """Flags for the figures above the hardware: the value stays (a fraction above 1), and says so."""
    flags = []
    mbu, spec, mfu = number(d, "mbu"), number(d, "spec_bandwidth_fraction"), number(d, "prefill_mfu")
    if mbu is not None and mbu > 1 and achieved:
        flags.append(Flag(BANDWIDTH_LOW, f"a decode step read {fmt.rate(achieved, 'B/s')}, "
                          f"{mbu:.0%} of the measured bandwidth ({d.get('bandwidth_source')}): that bandwidth was "
                          "measured low, or the cache or the weights were read from a cache, or the bytes are "
                          "mis-counted; `tpulab --run roofline` on a quiet machine measures it again"))
    if spec is not None and spec > 1:
        flags.append(Flag("beats-spec-bandwidth", f"a decode step read {spec:.0%} of the "
                          "vendor's memory bandwidth, which the memory cannot do: do not trust this figure"))
    if mfu is not None and mfu > 1 and prefill_rate and peak:
        flags.append(Flag("beats-peak", f"the prefill ran at {mfu:.0%} of the device's peak "
                          f"({fmt.rate(prefill_rate, 'FLOP/s')} of {fmt.rate(peak, 'FLOP/s')}), which hardware "
                          "cannot do: the FLOP count or the peak is wrong"))
    return flags


def measured_copy(steps: list[Step]) -> Sourced | None:
    """The bandwidth the run measured itself before its prefill (`measure_bandwidth`): its copies' best."""
    found = best_copy(steps)
    return Sourced(found[0], f"measured by this run before its prefill: {found[1]}", MEASURED) if found else None


def check(kept: Sourced | None, own: Stats | None) -> list[Flag]:
    """Where a ceiling is kept, the run's copies check it (one device's, as the ceiling is): a flag where the ceiling
    lies outside their median's 95% interval widened by the noise threshold; none without an interval."""
    if kept is None or own is None or own.low is None or own.high is None:
        return []
    said = (f"this run's {own.count} copies read {fmt.rate(own.median, 'B/s')} (95% interval "
            f"{fmt.rate(own.low, 'B/s')} to {fmt.rate(own.high, 'B/s')}), the kept bandwidth ceiling "
            f"{fmt.rate(kept.value, 'B/s')} ({kept.source})")
    if own.high * (1 + NOISE) < kept.value:
        return [Flag(BANDWIDTH_CHECK, f"{said}: below it beyond the noise threshold ±{NOISE:.0%}: this run was "
                                      "disturbed, or the machine changed since the ceiling was kept; its MBU is "
                                      "against the ceiling")]
    if own.low > kept.value * (1 + NOISE):
        return [Flag(BANDWIDTH_CHECK, f"{said}: above it beyond the noise threshold ±{NOISE:.0%}: the ceiling was "
                                      "measured low, or the machine changed since; `tpulab --run roofline` on a "
                                      "quiet machine measures it again")]
    return []


MEAN_ABOVE_MEDIAN = "tokens-per-s-below-steady"


def apart(tokens: list[Step]) -> list[Flag]:
    """Why tokens/s (the batch over TPOT, the mean token step) says less than the steady step time (the median
    token): the slow tokens, named, where the mean is above the median by more than the noise threshold."""
    itl = [s.seconds for s in tokens]
    mid = median(itl)
    if not itl or not mid or sum(itl) / len(itl) <= mid * (1 + NOISE):
        return []
    slow = sorted((s for s in tokens if s.seconds > 2 * mid), key=lambda s: -s.seconds)
    named = ", ".join(f"token {s.step} {fmt.seconds(s.seconds)}" for s in slow[:3])
    return [Flag(MEAN_ABOVE_MEDIAN, f"tokens/s counts every token step (TPOT {fmt.seconds(sum(itl) / len(itl))}, "
                 f"the mean of {len(itl)}); the steady step time is their median ({fmt.seconds(mid)}): "
                 + (f"{len(slow)} token(s) took over twice the median ({named})" if slow else
                    "the slower half of the tokens spread further from it than the faster half"))]


def summary_part(steps: list[Step], started: Started, ceilings: MeasuredCeilings, shape: Shape,
                 peak: Sourced | None) -> SummaryPart:
    """A decode run's part of its summary: the step statistics are of the decode steps (the inter-token
    latencies; the prefill is not one), and the decode figures (`peak`: the device's, for the prefill's MFU).

    MBU divides by the device's kept bandwidth ceiling (a roofline's), else by the best copy this run measured, per
    replica times the replicas; the record says which (`bandwidth_basis`) and keeps the copies' spread and interval.
    """
    d = started.device
    spec = spec_bandwidth(d.kind, d.name, d.replicas)
    kept, own = ceilings.memory(d), copies(steps)
    found = kept or measured_copy(steps)
    decode, flags = figures(steps, shape, found.times(d.replicas) if found else None, spec,
                            peak.value if peak else None)
    stats = summarize(own[0]) if own else None
    decode |= {"bandwidth_basis": KEPT if kept else RUN if found else None, "copy_mib": own[1] if own else None,
               "mbu_against": None if kept or not found else "own copies",  # not comparable across runs: said so
               **scalars(Stats, stats, "copies_")}
    flags += check(kept, stats)
    flags += apart(decode_steps(steps))
    seconds = [s.seconds for s in decode_steps(steps)]
    flops = started.flops_per_step
    mid = median(seconds)
    rate = number(decode, "decode_tokens_per_s")  # over the batch, at the mean step (TPOT): the one tokens/s everywhere
    return SummaryPart(seconds, flops, flops / mid if flops and mid else None, figures=decode, flags=tuple(flags),
                       examples_per_s=rate)
