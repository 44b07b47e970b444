"""The machine card's suite, declared as data: which workloads, at which sizes, and which figures are its headlines.

One declaration drives the bench on every backend: an entry names a workload and its parameters, never a
framework, so a backend registered later (a plugin's) runs every entry its workloads run on, with no change
here. `--quick` is the same suite at smaller sizes (the `quick` overrides); a figure is only ever compared with
the same entry of a card of the same suite version and variant as an equal (`tpulab.engine.card_compare`).
Bump `VERSION` whenever an entry's parameters or figures change: cards of another version then compare only on
the entries they share, and say so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

NAME = "tpulab-card"
VERSION = 2  # 2: decode on GPT-2 small (it was the tiny preset); 11 timed steps or more in every entry
REFERENCE_SHARE = 0.5  # of a backend's budget, for the reference engines' lines (each engine's, once per card), added
# to the card's: `tpulab bench` says the whole before it starts
QUICK_BUDGET_S = 180.0  # per backend, on a 2-core machine
FULL_BUDGET_S = 720.0
DRIFT_SHARE = 0.06  # of a backend's budget, for the drift probe at its start (and as much again at its end)
STABLE = 0.10  # an entry's spread is stable once (p90 - p10) / median is at most this
MIN_SAMPLES = 10  # ... over at least this many timed steps (a median of 5 moved 8% from one card to the next)
CEILINGS_SHARE = 0.15  # of the budget, for the roofline that measures the ceilings
SCALING = "-scaling"  # the name of an entry run across every device, after the one-device entry's


@dataclass(frozen=True)
class Headline:
    """One figure an entry reports on the card: a rate read from its run's summary (higher is better).

    `path` is the summary's field, dotted into a part ("figures.decode_tokens_per_s", a workload's own figure);
    `stats` the step-time statistics its spread follows (a rate is work over time: its p10 is the work over the p90
    time). `ceiling`: which measured ceiling bounds it, compute (the dtype's matmul) or memory (the copy's
    bandwidth); `fraction` and `spec` the summary's figures that say how much of that ceiling, and of the vendor's
    figure, the run reached (by the same dotted paths).
    """

    name: str  # the entry's name on the card: "resnet50-train"
    path: str
    unit: str | None = None  # None: the run's own throughput unit
    stats: str = "step_seconds"
    ceiling: str = "compute"
    fraction: str = "ceiling_fraction"
    spec: str = "peak_fraction"
    article: str | None = None  # the 2018 article's entry this one is comparable with
    reference: str | None = None  # a reference engine's line: the headline it stands beside ('decode-b1')
    variant: str | None = None  # ... and what sets that line apart: its weights' format ('q4_0')


@dataclass(frozen=True)
class Variant:
    """One way a reference engine runs an entry, beside the framework's: its label and its parameters over the
    entry's ('q4_0', {"weight_format": "q4_0"})."""

    label: str
    params: Mapping[str, Any]


@dataclass(frozen=True)
class Entry:
    """One workload run of the suite, giving one or more headline figures (a ResNet-50 run trains, then infers)."""

    workload: str
    params: Mapping[str, Any]  # the default variant's, over the workload's defaults
    quick: Mapping[str, Any]  # over `params`, for --quick
    headlines: tuple[Headline, ...]
    steps: tuple[str, ...]  # the parameters doubled when the spread is not yet stable
    weight: float = 1.0  # its share of the budget left after the ceilings, relative to the others
    reference: tuple[Variant, ...] = ()  # run again on each installed reference engine, once per variant

    def values(self, quick: bool) -> dict[str, Any]:
        """The same on every backend: an entry's figures on two backends are of the same work."""
        return {**self.params, **(self.quick if quick else {})}


@dataclass(frozen=True)
class Suite:
    name: str
    version: int
    ceilings: Entry  # the roofline: its matmul per dtype and its copy
    entries: tuple[Entry, ...]
    scaling: str | None = None  # the headline whose entry `--devices all` runs again across every device
    drift: Entry | None = None  # a short roofline at a backend's start and at its end: how far the machine moved
    repeats: int = 1  # alike runs of each entry, interleaved (A B, A B), where the budget allows

    def scales(self) -> Entry | None:
        """The entry of the `scaling` headline, on one device."""
        return next((e for e in self.entries for h in e.headlines if h.name == self.scaling), None)

    def scaled(self, devices: int, batch: int, quick: bool) -> Entry | None:
        """The `scaling` headline's entry across `devices` devices, each with the `batch` one device had (weak
        scaling: the same work per device), its headlines named NAME-scaling."""
        found = self.scales()
        if found is None:
            return None
        values = {**found.values(quick), "shards": devices, "batch_size": batch * devices}
        return replace(found, params=values, quick={}, headlines=tuple(
            replace(h, name=f"{h.name}{SCALING}", article=None) for h in found.headlines))

    def budget(self, quick: bool) -> float:
        return QUICK_BUDGET_S if quick else FULL_BUDGET_S

    def headlines(self) -> list[str]:
        return [h.name for e in self.entries for h in e.headlines]

    def referenced(self, engine: str) -> tuple[Entry, ...]:
        """The entries a reference engine runs, one per variant, each headline named for the engine and the variant
        ('decode-b1 llama.cpp q4_0') and pointing at the headline it stands beside."""
        return tuple(replace(e, params={**e.params, **v.params}, reference=(), headlines=tuple(
            replace(h, name=f"{h.name} {engine} {v.label}", article=None, reference=h.name, variant=v.label)
            for h in e.headlines)) for e in self.entries for v in e.reference)


PROFILED = {"profile": True, "profile_steps": 2}  # a short profile for the top ops and the host gap
# Decode is judged against the memory ceiling, so its weights must stream from memory: GPT-2 small's 0.5 GB (float32)
# outgrow any last-level cache, where the tiny preset's 20 MB fit a CPU's L3 or a GPU's L2, and its figure then
# followed the cache's other tenants (on a 2-core VM with 32 MB of shared L3, one process to the next: cv 6.8% for
# tiny, 2.6% for GPT-2 small). A short prompt keeps its prefill, which is compute-bound, within the quick budget.
DECODE = {"preset": "gpt2-small", "prompt_len": 16, "gen_len": 64, **PROFILED}
# What CPU users serve with, beside the framework's figure: the same shape and dtype (float32), and the quantized
# formats they run, whose weights a token reads in 8.5 and 4.5 bits a weight.
FORMATS = (Variant("f32", {"weight_format": "f32"}), Variant("q8_0", {"weight_format": "q8_0"}),
           Variant("q4_0", {"weight_format": "q4_0"}))
TOKENS: dict[str, Any] = {"path": "figures.decode_tokens_per_s", "unit": "tokens/s", "ceiling": "memory",
                          "fraction": "figures.mbu", "spec": "figures.spec_bandwidth_fraction"}
# The quick sizes fit the slowest backend's budget: Keras 3 on JAX runs these convolutions about 10x slower than
# TensorFlow on a 2-core CPU (a step of the CNN at batch 256: 3.8 s against 0.35 s).

SUITE = Suite(
    NAME, VERSION,
    ceilings=Entry("roofline", {},  # the roofline's defaults: the sizes docs/concepts/ceilings.md explains
                   {"max_size": 2048, "copy_mib": 128, "iterations": 3, "rounds": 2},
                   (), ()),
    entries=(
        Entry("conv", {"iterations": 10, "warmup": 2, **PROFILED},  # the article's convolution, as published
              {"batch_size": 32, "image_size": 128, "filters": 64, "iterations": 10, "warmup": 1},
              (Headline("conv", "gflops_per_s", "GFLOP/s", article="conv"),), ("iterations",)),
        Entry("fashion-mnist", {"dataset": "synthetic", "epochs": 1, "steps_per_epoch": 30, "validation": False,
                                **PROFILED},
              {"batch_size": 64, "steps_per_epoch": 12},
              (Headline("fashion-mnist", "throughput", article="cnn"),), ("steps_per_epoch",)),
        Entry("resnet50", {"batch_size": 16, "image_size": 128, "classes": 100, "epochs": 1, "steps_per_epoch": 12,
                           "predict_steps": 12, **PROFILED},
              {"batch_size": 4, "image_size": 32, "steps_per_epoch": 12, "predict_steps": 12},
              (Headline("resnet50-train", "throughput"),
               Headline("resnet50-inference", "inference_throughput", stats="inference_step_seconds")),
              ("steps_per_epoch", "predict_steps"), weight=2.0),
        Entry("transformer", {"preset": "tiny", "epochs": 1, "steps_per_epoch": 12, "predict_steps": 4, **PROFILED},
              {"steps_per_epoch": 12, "seq_len": 128, "batch_size": 4}, (Headline("transformer-train", "throughput"),),
              ("steps_per_epoch",), weight=1.5),
        Entry("decode", {**DECODE, "batch_size": 1}, {"gen_len": 32},
              (Headline("decode-b1", **TOKENS),), ("gen_len",), reference=FORMATS),
        Entry("decode", {**DECODE, "batch_size": 8}, {"gen_len": 32},
              (Headline("decode-b8", **TOKENS),), ("gen_len",), reference=FORMATS),
    ),
    scaling="conv",  # the article's convolution, which its TPU ran over 8 cores (batch_parallel)
    # One size past the L2 and a copy past most last-level caches, float32 on every device: a few seconds at the
    # start and the end of a backend's part. Not a ceiling (the roofline above measures those): a yardstick of how
    # far the machine moved while the card ran, against which a difference between two cards is read.
    drift=Entry("roofline", {"min_size": 2048, "max_size": 2048, "dtypes": "float32", "copy_mib": 256, "iterations": 5,
                             "warmup": 1, "rounds": 2}, {"min_size": 1024, "max_size": 1024, "copy_mib": 128}, (), ()),
    repeats=2,  # two runs of each entry, interleaved: its interval then holds the spread between runs
)
