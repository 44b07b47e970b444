"""A decode run's figures in words: the summary's rows and a comparison's columns (the terminal, the
lab, the notebook and the HTML page read these)."""

from __future__ import annotations

from tpulab.base import fmt
from tpulab.base.events import Decode, RunRecord


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
        ("MBU", f"{fmt.percent(d.mbu)} of {fmt.rate(d.bandwidth, 'B/s')} measured ({d.bandwidth_source or '-'})"),
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


def decode_columns(records: list[RunRecord]) -> list[tuple[str, list[str]]]:
    """A comparison's decode figures, one cell per run, when any of the runs decoded (its tokens/s is the
    throughput's row)."""
    found = [r.summary.decode or Decode() for r in records]
    if all(r.summary.decode is None for r in records):
        return []
    return [("TTFT", [fmt.seconds(d.ttft_s) for d in found]),
            ("ITL p50", [fmt.seconds(d.itl.p50) for d in found]),
            ("ITL p99", [fmt.seconds(d.itl.p99) for d in found]),
            ("MBU", [fmt.percent(d.mbu) for d in found])]
