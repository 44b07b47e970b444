"""A decode run's figures in words: the summary's rows and a comparison's columns (the terminal, the
lab, the notebook and the HTML page read these)."""

from __future__ import annotations

from tpulab.base import fmt
from tpulab.base.events import Decode, RunRecord
from tpulab.base.noise import MIN_SAMPLES
from tpulab.engine.ceilings import rerun
from tpulab.workloads.decode.figures import KEPT, RUN


def size(n: float | None) -> str:
    """Bytes as `fmt.bytes_` says them, a small model's in KiB ('0 MiB' would say nothing)."""
    return f"{n / 1024:.1f} KiB" if n is not None and n < 2**20 else fmt.bytes_(n)


def decode_rows(d: Decode) -> list[tuple[str, str]]:
    """(figure, value) of a decode run: time to first token, tokens/s, the inter-token latency, and what a
    step reads against the device's bandwidth."""
    itl = d.itl
    rows = [
        ("time to first token", f"{fmt.seconds(d.ttft_s)} (the prefill: {fmt.rate(d.prompt_tokens_per_s, 'tokens/s')}"
                                " of prompt)"),
        ("decode tokens/s", f"{fmt.rate(d.decode_tokens_per_s, 'tokens/s')} over the batch, "
                            f"{fmt.rate(d.decode_tokens_per_s_per_seq, 'tokens/s')} per sequence (1 / TPOT)"),
        ("inter-token latency", f"p50 {fmt.seconds(itl.p50)}, p90 {fmt.seconds(itl.p90)}, p99 {fmt.seconds(itl.p99)};"
                                f" TPOT {fmt.seconds(d.tpot_s)}"),
        ("end to end", fmt.seconds(d.e2e_s)),
        ("KV cache", size(d.kv_cache_bytes)),
        ("read per token step", f"{size(d.bytes_per_token_step)} (weights and cache), "
                                f"{fmt.rate(d.gbytes_per_s * 1e9 if d.gbytes_per_s else None, 'B/s')} achieved"),
        *bandwidth_rows(d),
    ]
    if d.spec_bandwidth is not None:
        rows.append(("of spec bandwidth", f"{fmt.percent(d.spec_bandwidth_fraction)} of "
                                          f"{fmt.rate(d.spec_bandwidth, 'B/s')} ({d.spec_bandwidth_source})"))
    rows.append(("prefill MFU", fmt.percent(d.prefill_mfu)))
    if d.joules_per_token is not None:
        rows.append(("energy", f"{d.joules_per_token:.3g} J per token"))
    if d.verified is not None:
        rows.append(("verified", f"cached against full-forward logits: largest difference {d.verified:.3g}"))
    return rows


def bandwidth_rows(d: Decode) -> list[tuple[str, str]]:
    """MBU and what it divides by, said so: the kept ceiling (the run's copies check it), or, where none is kept, the
    best of this run's own copies (their interval; not comparable across runs; how to keep a ceiling)."""
    mbu = f"{fmt.percent(d.mbu)} of {fmt.rate(d.bandwidth, 'B/s')}"
    if d.bandwidth_basis == RUN:
        return [("MBU", f"{mbu} measured by this run's own copies (their best; no ceiling is kept): not comparable "
                        "across runs, whose copies meet other load"),
                ("this run's copies", copies_words(d)),
                ("keep a ceiling", f"`{rerun(copy_mib=d.copy_mib)}` on a quiet machine: then every run's MBU is "
                                   "against that one bandwidth")]
    if d.bandwidth_basis == KEPT:
        return [("MBU", f"{mbu}, this machine's kept bandwidth ceiling ({d.bandwidth_source or '-'})"),
                *([("this run's copies", f"{copies_words(d)}: a check of the ceiling")] if d.copies else [])]
    return [("MBU", f"{mbu} measured ({d.bandwidth_source or '-'})")]  # a record from before the basis was kept


def copies_words(d: Decode) -> str:
    """'12 of 128 MiB, 11.2 GB/s to 13.4 GB/s; median 12.1 GB/s, 95% interval 11.8 GB/s to 12.5 GB/s'."""
    c = d.copies
    if c is None:
        return "-"
    said = (f"{c.count} of {d.copy_mib or '-'} MiB, {fmt.rate(c.min, 'B/s')} to {fmt.rate(c.max, 'B/s')}; median "
            f"{fmt.rate(c.median, 'B/s')}")
    if c.low is None or c.high is None:
        return f"{said}; too few copies for an interval ({MIN_SAMPLES} at least)"
    return f"{said}, 95% interval {fmt.rate(c.low, 'B/s')} to {fmt.rate(c.high, 'B/s')}"


def decode_columns(records: list[RunRecord]) -> list[tuple[str, list[str]]]:
    """A comparison's decode figures, one cell per run, when any of the runs decoded (its tokens/s is the
    throughput's row)."""
    found = [r.summary.decode or Decode() for r in records]
    if all(r.summary.decode is None for r in records):
        return []
    return [("TTFT", [fmt.seconds(d.ttft_s) for d in found]),
            ("ITL p50", [fmt.seconds(d.itl.p50) for d in found]),
            ("ITL p99", [fmt.seconds(d.itl.p99) for d in found]),
            ("MBU", [fmt.percent(d.mbu) + (" own copies" if d.bandwidth_basis == RUN and d.mbu else "")
                     for d in found])]
