"""A decode run's figures in words, for every front end's summary (`LLMDecode.figure_rows`): what a token costs,
and what MBU divides by, said so."""

from __future__ import annotations

from typing import Any, Mapping

from tpulab.base import fmt
from tpulab.base.ceilings import rerun
from tpulab.base.noise import MIN_SAMPLES
from tpulab.workloads.decode.figures import (FIGURES, KEPT, RUN, VERIFIED, VERIFIED_DIFFER, VERIFIED_LOGPROB,
                                             VERIFIED_SCALE, VERIFIED_TOKENS, VERIFIED_TOLERANCE, number)

SHOWN = {f.name: f for f in FIGURES}


def show(d: Mapping[str, Any], name: str) -> str:
    return SHOWN[name].show(number(d, name))


def rate(d: Mapping[str, Any], name: str, unit: str) -> str:
    return fmt.rate(number(d, name), unit)


def decode_rows(d: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(figure, value) of a decode run: time to first token, a sequence's tokens/s, the inter-token latency, one
    generation end to end, and what a step reads against the device's bandwidth. The run's throughput (the batch's
    tokens/s) is the summary's throughput row: a rate here says what it counts."""
    achieved = number(d, "gbytes_per_s")
    steps = number(d, "token_steps")
    rows = [
        ("time to first token", f"{show(d, 'ttft_s')} (the prefill: {rate(d, 'prompt_tokens_per_s', 'tokens/s')}"
                                " of prompt)"),
        ("tokens/s per sequence", f"{rate(d, 'decode_tokens_per_s_per_seq', 'tokens/s')}: what each sequence's "
                                  "reader sees (1 / TPOT)"),
        ("inter-token latency", f"p50 {show(d, 'itl_p50')}, p90 {show(d, 'itl_p90')}, p99 {show(d, 'itl_p99')};"
                                f" TPOT {show(d, 'tpot_s')}"),
        ("end to end", f"{show(d, 'e2e_s')}: one generation, the prefill and "
                       + (f"{steps:.0f} token steps (TTFT + {steps:.0f} x TPOT)" if steps else "the token steps")),
        ("KV cache", f"{show(d, 'kv_cache_bytes')}: {show(d, 'kv_cache_positions')} a sequence"),
        ("read per token step", f"{show(d, 'bytes_per_token_step')}: weights {show(d, 'weight_bytes_per_token_step')}"
                                f", cache {show(d, 'kv_cache_bytes')}; "
                                f"{fmt.rate(achieved * 1e9 if achieved else None, 'B/s')} achieved"),
        *bandwidth_rows(d),
    ]
    if number(d, "spec_bandwidth") is not None:
        rows.append(("of spec bandwidth", f"{show(d, 'spec_bandwidth_fraction')} of "
                                          f"{rate(d, 'spec_bandwidth', 'B/s')} ({d.get('spec_bandwidth_source')})"))
    rows.append(("prefill MFU", show(d, "prefill_mfu")))
    return rows + verified_rows(d)


def verified_rows(d: Mapping[str, Any]) -> list[tuple[str, str]]:
    """--verify's verdict, kept: what was set against what, how far apart, and the bound it was within (a run above
    its bound failed); none where the run did not verify."""
    scale, tolerance = number(d, VERIFIED_SCALE), number(d, VERIFIED_TOLERANCE)
    bound = (f", within the tolerance {tolerance * scale:.3g} ({tolerance:g} of the largest logit {scale:.3g})"
             if scale is not None and tolerance is not None else "")  # (a record from before the bound was kept: the difference alone)
    if (verified := number(d, VERIFIED)) is not None:
        return [("verified", f"cached against full-forward logits: largest difference {verified:.3g}{bound}")]
    if (apart := number(d, VERIFIED_LOGPROB)) is None:
        return []
    differ, tokens = number(d, VERIFIED_DIFFER), number(d, VERIFIED_TOKENS)
    greedy = (f"; {differ:.0f} of {tokens:.0f} greedy tokens differ, each a near tie" if differ else
              f"; all {tokens:.0f} greedy tokens the decoder's" if tokens else "")
    return [("verified", f"against the PyTorch decoder in float32 on the same weights: the chosen tokens' "
                         f"log-probabilities differ by at most {apart:.3g}{bound}{greedy}")]


def bandwidth_rows(d: Mapping[str, Any]) -> list[tuple[str, str]]:
    """MBU and what it divides by, said so: the kept ceiling (the run's copies check it), or, where none is kept, the
    best of this run's own copies (their interval; not comparable across runs; how to keep a ceiling)."""
    mbu = f"{show(d, 'mbu')} of {rate(d, 'bandwidth', 'B/s')}"
    source = d.get("bandwidth_source") or "-"
    if d.get("bandwidth_basis") == RUN:
        copy_mib = number(d, "copy_mib")
        return [("MBU", f"{mbu} measured by this run's own copies (their best; no ceiling is kept): not comparable "
                        "across runs, whose copies meet other load"),
                ("this run's copies", copies_words(d)),
                ("keep a ceiling", f"`{rerun(copy_mib=int(copy_mib) if copy_mib else None)}` on a quiet machine: "
                                   "then every run's MBU is against that one bandwidth")]
    if d.get("bandwidth_basis") == KEPT:
        return [("MBU", f"{mbu}, this machine's kept bandwidth ceiling ({source})"),
                *([("this run's copies", f"{copies_words(d)}: a check of the ceiling")]
                  if number(d, "copies_count") else [])]
    return [("MBU", f"{mbu} measured ({source})")]  # a record from before the basis was kept


def copies_words(d: Mapping[str, Any]) -> str:
    """'12 of 128 MiB, 11.2 GB/s to 13.4 GB/s; median 12.1 GB/s, 95% interval 11.8 GB/s to 12.5 GB/s'."""
    count = number(d, "copies_count")
    if not count:
        return "-"
    mib = number(d, "copy_mib")
    said = (f"{count:.0f} of {f'{mib:.0f}' if mib else '-'} MiB, {rate(d, 'copies_min', 'B/s')} to "
            f"{rate(d, 'copies_max', 'B/s')}; median {rate(d, 'copies_median', 'B/s')}")
    if number(d, "copies_low") is None or number(d, "copies_high") is None:
        return f"{said}; too few copies for an interval ({MIN_SAMPLES} at least)"
    return f"{said}, 95% interval {rate(d, 'copies_low', 'B/s')} to {rate(d, 'copies_high', 'B/s')}"
