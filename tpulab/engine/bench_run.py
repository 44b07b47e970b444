"""`tpulab bench`: the suite run on this machine, one backend after another, into one machine card.

Each entry is an ordinary run made by `run_job`, the job every front end makes, and kept in the store like any
other; the card points at it by id. The ceilings come first, from a roofline judged by the rules that make a
ceiling a ceiling (`engine.ceilings`): a busy machine's are refused, and its entries then carry no ceiling
fraction, only the reason. An entry measures until its spread is stable or its share of the budget is spent
(each rerun doubles its steps), and says which. A failed entry keeps its one-line reason and the rest runs; a
cancelled bench keeps what it measured, as a partial card.

Noise is not a finding, and a shared machine moves over minutes: a card measures its own stability. The suite's
short roofline (`Suite.drift`) runs at the start of each backend's part and at its end, and the card states how
far its ceilings drifted. Where the budget allows, every entry runs again at the steps it settled on, after all
the others ran once (A B C, A B C: a neighbour's burst or a drift falls on several entries a little, not on one
entry whole), and its figures and interval are taken over its repeats. Each entry keeps its timed steps, thinned
(`card.KEPT`), for comparisons, and says when another process used the machine while it was timed.

A framework's decode is not what people serve with: after the backends, each installed reference engine (a backend
whose `reference` says what its line adds: llama.cpp) runs the entries that declare its variants (the same shape and
dtype, and the quantized formats), judged by the bandwidth the card's rooflines measured on this machine. An engine
not installed is named on the card, with what its line would add and the command that installs it.
"""

from __future__ import annotations

import platform
import statistics
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from tpulab import backends
from tpulab.base import fmt
from tpulab.base.errors import TpulabError, first_line
from tpulab.base.events import OTHER_OPS, RunRecord, Summary
from tpulab.base.timing import Stats, summarize
from tpulab.base.version import __version__
from tpulab.engine import bench
from tpulab.engine.card import Card, CardCeiling, CardDrift, CardEntry, CardSuite, Op, kept
from tpulab.engine.ceilings import MEMORY, Ceilings, load_of, of_record, verdicts
from tpulab.engine.record import now_iso
from tpulab.engine.runner import Run, run_job
from tpulab.engine.spec import resolve
from tpulab.engine.store import Store, StoreError, timed
from tpulab.machine import fingerprint
from tpulab.machine.detect import RuntimeReport
from tpulab.workloads import get_workload
from tpulab.workloads.base import BACKEND, DEVICE, PROFILE, PROFILE_STEPS

HOST_BOUND = 0.5  # a traced step whose device waited on the host this much of the time is host-bound
OVERRUN = 2.0  # a run still going at this many times its entry's share (and 30 s more) is stopped
KILL_AFTER_S = 3.0  # a run is asked to stop this long before its deadline, and killed at it
SETTLE_S = 2.0  # a part's last run is gone this long before the part's end: its record and the card are kept by then
LEAST_S = 5.0  # an entry that would start with less of the budget left than this is skipped, and says so
DRIFT_LEAST_S = 2 * LEAST_S  # a drift probe's least time (a worker's start, a matmul and a copy)
DRIFT_MOST = 1 / 3  # of a part's budget, for its two drift probes together: a smaller budget runs none, and says why


class NoTime(TpulabError):
    """A stage the card's budget leaves no time for: it is skipped, and says so."""


@dataclass(frozen=True)
class Progress:
    """Where a bench is: the entry now running, how far through, and the estimated seconds left."""

    backend: str
    what: str
    done: int  # the entry running (1 to `total`); 0: a stage between entries (the ceilings, the drift probes)
    total: int  # the entries of this backend's part
    elapsed: float  # since the card began (as `eta` is the whole card's)
    eta: float  # the whole card's budget left: its time left, at most
    finished: CardEntry | None = None  # an entry just finished: a line of the running card
    repeated: CardEntry | None = None  # an entry again, its figures now over one more repeat

    def count(self) -> str:
        """'[3/6 tensorflow]' for an entry, '[tensorflow]' for a stage between entries."""
        return f"[{self.done}/{self.total} {self.backend}]" if self.done else f"[{self.backend}]"


def installed(report: RuntimeReport) -> list[str]:
    """Every registered framework installed here (a plugin's too): `--backend all`. A reference engine is not one:
    the card runs its lines beside them (`references`)."""
    return [name for name, b in backends.registry().items() if b.installed(report.packages) and not b.reference
            and b.framework]


def references(report: RuntimeReport, suite: bench.Suite, taken: list[str]) -> tuple[list[str], dict[str, str]]:
    """The reference engines whose lines this card runs (installed, and running a workload of the suite's entries
    that declare variants), and for each one not installed, what its lines would add and how to install it."""
    workloads = {e.workload for e in suite.entries if e.reference}
    run, absent = [], {}
    for name, b in backends.registry().items():
        if b.reference is None or name in taken or not any(name in get_workload(w).runners for w in workloads):
            continue
        if b.installed(report.packages):
            run.append(name)
        else:
            labels = ", ".join(dict.fromkeys(v.label for e in suite.entries for v in e.reference))
            absent[name] = f"{b.title} is not installed: its line would add {b.reference} ({labels}); install: {b.install}"
    return run, absent


def chosen(requested: str, report: RuntimeReport) -> list[str]:
    if requested == "all":
        return installed(report)
    return [backends.choose(requested, report)[0]]


def machine(report: RuntimeReport, environ: dict[str, str]) -> dict[str, Any]:
    """The fingerprint: detection's report (read once), the CPU's limits, the OS and versions, the variables."""
    import psutil

    cpu = report.cpu
    accelerators = [{"kind": "gpu", "name": g.name, "memory_bytes": g.memory_bytes, "driver": g.driver,
                     "compute_capability": g.compute_capability, "found_by": g.found_by} for g in report.gpus]
    if report.tpu is not None:
        t = report.tpu
        accelerators.append({"kind": "tpu", "name": f"TPU {t.generation or '(generation unknown)'}", "chips": t.chips,
                             "cores": t.cores, "accelerator_type": t.accelerator_type, "found_by": "; ".join(t.found_by)})
    return {
        "label": f"{cpu.model} ({cpu.logical_cores} threads)" + "".join(f" + {a['name']}" for a in accelerators),
        "host": socket.gethostname(),
        "cpu": {"model": cpu.model, "cores": psutil.cpu_count(logical=False), "threads": cpu.logical_cores,
                "memory_bytes": cpu.memory_bytes, "llc_bytes": cpu.llc_bytes, "features": cpu.features,
                "mhz": cpu.mhz, "max_mhz": cpu.max_mhz, **fingerprint.limits()},
        "accelerators": accelerators,
        "device": report.default_device,
        "os": fingerprint.os_name(), "arch": platform.machine(), "python": report.python, "tpulab": __version__,
        "packages": {k: v for k, v in report.packages.items() if v},
        "env": fingerprint.speed_variables(environ),
        "colab": report.colab,
    }


def command(record: RunRecord) -> str:
    """The command that runs this again: the workload, its backend and device, and each parameter not at its default."""
    w = get_workload(record.workload)
    defaults = w.defaults()
    flags = [f"--backend {record.backend}"]
    if record.device is not None:
        flags.append(f"--device {record.device.kind}")
    for spec in w.params:
        value = record.params.get(spec.name)
        if spec.name in (BACKEND.name, DEVICE.name) or spec.name not in record.params or value == defaults.get(spec.name):
            continue
        if spec.kind is bool:
            flags.append(spec.flag if value else "--no-" + spec.flag.removeprefix("--"))
        else:
            flags.append(f"{spec.flag} {spec.show(value)}")
    return f"tpulab --run {record.workload} --no-ui " + " ".join(flags)


def field_of(summary: Summary, path: str) -> Any:
    """A summary's figure by its dotted path ('figures.decode_tokens_per_s'); None where a part is absent."""
    return summary.figure(path)


def spread(stats: Stats | None) -> float | None:
    """(p90 - p10) / median of the step times: what `bench.STABLE` bounds."""
    return (stats.p90 - stats.p10) / stats.median if stats and stats.median > 0 else None


def figures(h: bench.Headline, record: RunRecord, ceiling_known: bool) -> dict[str, Any]:
    """An entry's figures from its run's record, read through the summary's public fields."""
    s = record.summary
    value = field_of(s, h.path)
    stats = getattr(s, h.stats, None)
    out: dict[str, Any] = {"median": value, "n": stats.count if stats else None, "unit": h.unit or s.throughput_unit}
    if value is not None and stats is not None and stats.p10 > 0:  # a rate is work over time: its p10 at the p90 time
        out["p10"], out["p90"] = value * stats.median / stats.p90, value * stats.median / stats.p10
    if h.stats == "step_seconds":  # the summary's fractions are of its training (or only) steps
        out["ceiling_fraction"] = field_of(s, h.fraction) if ceiling_known else None
        out["spec_fraction"] = field_of(s, h.spec)
    own = h.stats == "step_seconds"  # the profile, the bound and the ceiling's side are of the run's own steps
    p = s.profile if own else None  # (a run that trains, then infers, traces its training step: not inference's)
    gap = p.host_gap_share if p else None
    out["host_gap_share"] = gap
    out["bound"] = "host" if gap is not None and gap >= HOST_BOUND else s.bound if own else None
    out["top_ops"] = [Op(name=o.name, category=o.category, share=o.share) for o in (p.ops if p else [])
                      if o.name != OTHER_OPS][:3]
    traced = [] if own or s.profile is None else [
        f"op profile: the run traced its training step, not this phase: `tpulab results show {record.short_id} "
        "--profile` shows it"]
    out["verdicts"] = [*traced, *(f"{f.code}: {f.message}" for f in [*s.flags, *(p.verdicts if p else []),
                                                                    *(s.telemetry.verdicts if s.telemetry else [])])]
    return out


def pooled(h: bench.Headline, records: list[RunRecord], ceiling_known: bool) -> dict[str, Any]:
    """An entry's figures from its alike runs (the repeats): the first run's (`figures`), then its median, spread,
    interval and fractions over every run's timed steps, the interval drawn over the runs as repeats so that it
    holds the spread between them. A rate is the first run's work per step over the pooled step time (one run:
    its own figure). A run whose steps do not give its statistics is left out of the pool."""
    first = records[0]
    out = figures(h, first, ceiling_known)
    value, stats = out["median"], getattr(first.summary, h.stats, None)
    pool = [(r, xs) for r in records if (xs := timed(r, h.stats))]
    if value is None or stats is None or not pool or pool[0][0] is not first:
        return {**out, "repeats": 1, "runs": [first.id], "disturbed": disturbed([first])}
    repeats = [xs for _, xs in pool]
    flat = [x for xs in repeats for x in xs]
    steps = summarize(flat, repeats)
    assert steps is not None  # (the pool is not empty)
    work = value * stats.median
    mean = statistics.fmean(flat)
    out.update(median=work / steps.median, n=steps.count, p10=work / steps.p90, p90=work / steps.p10,
               cv=statistics.stdev(flat) / mean if len(flat) > 1 and mean > 0 else None,
               low=work / steps.high if steps.high else None, high=work / steps.low if steps.low else None,
               repeats=len(pool), runs=[r.id for r, _ in pool], samples=kept(repeats),
               disturbed=disturbed([r for r, _ in pool]))
    moved = stats.median / steps.median  # the pooled figure over the first run's: its fractions move with it
    for key in ("ceiling_fraction", "spec_fraction"):
        out[key] = out[key] * moved if out.get(key) is not None else None
    return out


def disturbed(records: list[RunRecord]) -> str | None:
    """What else used the machine while these runs were timed (their `disturbed` flags: the load in short, else
    the flag's words), each run named where several were pooled; None: none was."""
    said = []
    for i, r in enumerate(records, 1):
        flag = next((f for f in r.summary.flags if f.code == "disturbed"), None)
        load = load_of(r.summary.telemetry)
        if flag is not None:
            said.append((i, load.words() if load is not None and load.busy else flag.message))
    if len(records) == 1:
        return said[0][1] if said else None
    return "; ".join(f"run {i} of {len(records)}: {m}" for i, m in said) or None


@dataclass
class Measuring:
    """An entry as measured so far: its alike runs (the first settled their steps; each repeat runs them again),
    what one more costs, and where its headlines sit on the card."""

    entry: bench.Entry
    values: dict[str, Any]  # the parameters every run of it is made with
    records: list[RunRecord]
    stopped: str  # how its first run's steps were settled
    seconds: float  # wall time of its runs together
    cost: float  # wall time of its last run: what one more takes
    budget_stop: bool = False  # its first run was stopped at its share, with the steps it had timed
    repeatable: bool = False  # its first run finished with every figure: a repeat can be pooled with it
    at: list[int] = field(default_factory=list)  # its headlines' places among the card's entries
    notes: list[str] = field(default_factory=list)  # its repeats: how many, and any left out


def drifts(backend: str, start: RunRecord | str | None, end: RunRecord | str | None) -> list[CardDrift]:
    """The drift probe's matmul and copy at a backend's start and end, or why either is missing."""
    out = []
    records = [r for r in (start, end) if isinstance(r, RunRecord)]
    dtype = str(records[0].params.get("dtypes", "float32")).split("+")[0] if records else "float32"
    for kind, key, unit, path in (("compute", dtype, "FLOP/s", "gflops_per_s"),
                                  ("memory", MEMORY, "B/s", "gbytes_per_s")):
        found = [_rate(r, path) for r in (start, end)]
        why = [f"at the {at}: {f}" for f, at in zip(found, ("start", "end")) if isinstance(f, str)]
        first, last = (f if isinstance(f, float) else None for f in found)
        out.append(CardDrift(backend=backend, kind=kind, dtype=key, unit=unit, start=first, end=last,
                             runs=[r.id for r in records], why="; ".join(why) or None))
    return out


def _rate(record: RunRecord | str | None, path: str) -> float | str:
    """A drift probe's figure (FLOP/s or B/s), or why it has none. A probe stopped early on a busy machine (a
    roofline stops itself there) keeps what it timed: the machine as it then was is what the drift is about."""
    if record is None:
        return "the card was stopped before it"
    if isinstance(record, str):
        return record
    value = record.summary.figure(path)
    if value:
        return float(value) * 1e9
    if record.status != "finished":
        return first_line(record.error) if record.error else f"the roofline was {record.status}"
    return f"it gave no {path.replace('_', ' ')}"


class Bench:
    """One card's bench: `run()` measures and returns the card (kept in the store as it grows); `cancel()` from
    another thread (Ctrl+C) stops the run in flight and leaves a partial card."""

    def __init__(self, report: RuntimeReport, db: Path, backend: str = "auto", quick: bool = False,
                 suite: bench.Suite | None = None, on_progress: Callable[[Progress], None] | None = None,
                 budget_s: float | None = None, environ: dict[str, str] | None = None,
                 reuse_ceilings: bool | None = None, devices: str = "one", reference: bool = True) -> None:
        import os

        self.report, self.db, self.quick = report, Path(db), quick
        self.suite = suite = suite or bench.SUITE  # read when a bench starts, not when this module loads
        self.devices = devices  # one: every entry on one device; all: the suite's scaling entry across all of them
        self.backends = chosen(backend, report)
        # the reference engines' lines, unless left out (`--no-reference`): then the card says nothing of them
        self.references, missing = references(report, suite, self.backends) if reference else ([], {})
        self.ceilings_here = Ceilings()  # the best each backend's roofline measured: what a reference engine's runs use
        self.budget = budget_s if budget_s is not None else suite.budget(quick)  # each backend's
        # the card's parts, one after another, each with its budget: the backends', then each reference engine's
        self.parts = [*((b, self.budget) for b in self.backends),
                      *((e, self.budget * bench.REFERENCE_SHARE) for e in self.references)]
        self.total = sum(s for _, s in self.parts)  # the whole card's budget: no part, and no stage, runs past it
        self.began = time.monotonic()  # (both set again when the card starts)
        self.ends = self.began + self.total
        self.skipped = 0  # entries the budget left no time for
        self.on_progress = on_progress or (lambda p: None)
        self.reuse = quick if reuse_ceilings is None else reuse_ceilings
        self.store = Store(self.db)
        self.cancelled = False
        self.part = self.budget  # the budget of the part running now: a backend's, or a reference engine's
        self.overran = False  # the run in flight was stopped at its share of the budget
        self.current: Run | None = None
        self._loads: dict[str, tuple[float, int, str]] = {}  # run id -> (other cores, cores, entry)
        env = dict(os.environ if environ is None else environ)
        self.card = Card(id=uuid.uuid4().hex, created_at=_now(), suite=CardSuite(name=suite.name, version=suite.version,
                         quick=quick), machine=machine(report, env), backends=self.backends, budget_s=self.total,
                         references=missing)

    def cancel(self) -> None:
        self.cancelled = True
        if self.current is not None:
            self.current.cancel()

    def plan(self) -> str:
        """The budget in words, said before the card starts: 'budget 4m30s in all: 3m00s for tensorflow, 1m30s for
        llama.cpp's reference lines'."""
        said = [f"{fmt.duration(s)} for {name}" if name in self.backends else
                f"{fmt.duration(s)} for {backends.get(name).short}'s reference lines" for name, s in self.parts]
        return f"budget {fmt.duration(self.total)}" + (f" in all: {', '.join(said)}" if len(said) > 1 else "")

    # --- the bench -------------------------------------------------------------------------------
    def run(self) -> Card:
        start = self.began = time.monotonic()
        self.ends = start + self.total
        self._save()
        for i, (name, budget) in enumerate(self.parts):
            if self.cancelled:
                break
            now = time.monotonic()  # a part ends by its budget, and early enough for the parts after it
            end = min(now + budget, self.ends - sum(s for _, s in self.parts[i + 1:]))
            self.part = budget
            (self._backend if name in self.backends else self._reference)(name, now, end)
        c = self.card
        c.wall_s, c.ended_at = time.monotonic() - start, _now()
        missed = self.skipped or any(e.status == "cancelled" for e in c.entries)
        c.status = "partial" if self.cancelled else "failed" if any(e.status == "failed" for e in c.entries) \
            else "incomplete" if missed else "complete"
        busiest = max(self._loads.values(), default=None)
        if busiest is not None:
            c.load = busiest[0]
            if busiest[0] > 0.25 * busiest[1]:
                c.noisy = (f"other processes used {busiest[0]:.2f} of {busiest[1]} cores ({busiest[0] / busiest[1]:.0%}) "
                           f"during {busiest[2]}: more than a quarter of the machine")
        self._save()
        return c

    def _backend(self, backend: str, start: float, deadline: float) -> None:
        """A backend's part, every stage within its budget (`deadline`): the drift probe, the roofline, the entries,
        the drift probe again."""
        entries = self.suite.entries
        scaled, devices, why_not = self._scaled(backend) if self.devices == "all" else (None, 1, None)
        if scaled is not None:
            entries += (scaled,)
        total = len(entries)
        share = max(self.part * bench.DRIFT_SHARE, DRIFT_LEAST_S)  # (a probe's worker takes seconds to start)
        began = self._probe(backend, "the ceilings at the start (drift)", total, start, min(start + share, deadline)) \
            if 2 * share <= self.part * DRIFT_MOST else (
                f"the {fmt.duration(self.part)} budget leaves no room for the drift probes (the two take "
                f"{fmt.duration(2 * DRIFT_LEAST_S)} or more, at most {DRIFT_MOST:.0%} of a budget)")
        end = deadline - (time.monotonic() - start)  # the end's probe takes as long as the start's
        self._progress(backend, "ceilings (roofline)", 0, total)
        ceilings = self._ceilings(backend, min(start + self.part * bench.CEILINGS_SHARE * OVERRUN, end - LEAST_S))
        self.ceilings_here.add(ceilings)
        self._measure(backend, entries, ceilings, start, end, total, scaled, devices)
        ended = began if isinstance(began, str) else None if self.cancelled else \
            self._probe(backend, "the ceilings at the end (drift)", total, start, deadline - SETTLE_S)
        if self.suite.drift is not None:
            self.card.drift += drifts(backend, began, ended)
        if why_not is not None and not self.cancelled:
            self.card.entries.append(CardEntry(name=f"{self.suite.scaling}{bench.SCALING}", workload="", backend=backend,
                                               status="skipped", reason=why_not))
        self._save()

    def _reference(self, engine: str, start: float, end: float) -> None:
        """A reference engine's lines: the entries that declare its variants, each judged by the ceilings the card's
        backends measured on this machine (an engine has no roofline of its own: the machine has one bandwidth)."""
        entries = self.suite.referenced(backends.get(engine).short)
        self._measure(engine, entries, self.ceilings_here, start, end, len(entries))
        self._save()

    def _measure(self, backend: str, entries: tuple[bench.Entry, ...], ceilings: Ceilings, start: float, end: float,
                 total: int, scaled: bench.Entry | None = None, devices: int = 1) -> None:
        """Each entry's first run, then its repeats interleaved with the others' (A B C, A B C), until `end`."""
        weights = [e.weight for e in entries]
        repeats = max(1, self.suite.repeats)
        measured: list[Measuring] = []
        for i, entry in enumerate(entries):
            if self.cancelled:
                break
            left = max(0.0, end - time.monotonic())
            # the repeats of those measured so far are kept back, short of starving this one's first run
            reserved = sum(m.cost for m in measured) * (repeats - 1)
            share = max(left - reserved, left / repeats) * entry.weight / sum(weights[i:]) / repeats
            self._progress(backend, entry.workload, i + 1, total)
            if left >= LEAST_S:
                made_here, m = self._entry(entry, backend, share, ceilings, end - SETTLE_S)
            else:
                self.skipped += 1
                m, made_here = None, [CardEntry(
                    name=h.name, workload=entry.workload, backend=backend, status="skipped", ceiling_kind=h.ceiling,
                    reason=f"the {fmt.duration(self.part)} budget was spent before it started", article=h.article,
                    reference=h.reference, variant=h.variant)
                    for h in entry.headlines]
            for made in made_here:
                if entry is scaled:
                    made = scaling(made, devices, self.card.entries)
                if m is not None:
                    m.at.append(len(self.card.entries))
                self.card.entries.append(made)
                self._save()
                self._progress(backend, made.name, i + 1, total, made)
            if m is not None and m.repeatable:
                measured.append(m)
        for k in range(2, repeats + 1):  # A B C, A B C: each entry's next run after every other's
            for m in measured:
                if self.cancelled or time.monotonic() + m.cost + LEAST_S > end:
                    continue
                i = entries.index(m.entry)
                self._progress(backend, f"{m.entry.workload}, run {k} of {repeats}", i + 1, total)
                self._repeat(m, backend, ceilings, end - SETTLE_S)
                for made in self._remade(m, backend, ceilings, devices if m.entry is scaled else None):
                    self._progress(backend, made.name, i + 1, total, repeated=made)
        for m in measured:  # how many runs each got, now that no more will come
            self._remade(m, backend, ceilings, devices if m.entry is scaled else None, repeats)

    def _probe(self, backend: str, what: str, total: int, start: float, deadline: float) -> RunRecord | str | None:
        """The suite's short roofline (`Suite.drift`), at a backend's start or end: its record, or why there is none
        (None: the suite has no drift probe)."""
        if self.suite.drift is None:
            return None
        self._progress(backend, what, 0, total)
        try:
            return self._run(self.suite.drift.workload, self.suite.drift.values(self.quick), backend, Ceilings(),
                             deadline)
        except TpulabError as e:
            return first_line(str(e))

    def _scaled(self, backend: str) -> tuple[bench.Entry | None, int, str | None]:
        """The suite's scaling entry across every device of the kind `backend`'s entries run on, with how many; or
        why there is none (None: the one-device entry fails too, and says why)."""
        base = self.suite.scales()
        if base is None:
            return None, 1, None
        given = base.values(self.quick)
        preset = given.pop("preset", None)
        try:
            spec = resolve(base.workload, {**given, BACKEND.name: backend}, self.report, preset)
        except TpulabError:
            return None, 1, None
        count = 1 if spec.device == "cpu" else self.report.max_shards().get(spec.device, 1)
        if count < 2:
            return None, 1, (f"one {spec.device.upper()} device here: --devices all runs {self.suite.scaling} across "
                             "several" + (" (a CPU's logical shards split the same cores)" if spec.device == "cpu" else ""))
        return self.suite.scaled(count, int(spec.params["batch_size"]), self.quick), count, None

    def _progress(self, backend: str, what: str, done: int, total: int, finished: CardEntry | None = None,
                  repeated: CardEntry | None = None) -> None:
        elapsed = time.monotonic() - self.began
        eta = max(0.0, self.ends - time.monotonic())
        self.on_progress(Progress(backend, what, done, total, elapsed, eta, finished, repeated))

    def _save(self) -> None:
        try:
            self.store.save_card(self.card)
        except StoreError:
            pass  # the card is still written to -o and printed; saving the finished card says what is wrong

    # --- ceilings ----------------------------------------------------------------------------------
    def _ceilings(self, backend: str, deadline: float) -> Ceilings:
        """This card's ceilings on `backend`'s device: a fresh roofline's (refused ones said why), or with --quick a
        kept roofline's from the same versions."""
        kept = self._kept(backend) if self.reuse else None
        if kept is not None:
            ceilings, record = kept
            self._note_ceilings(ceilings, record, reused=f"roofline run {record.short_id} of {record.started_at[:16]}, "
                                "same device and versions (--quick reuses it)")
            return ceilings
        try:
            record = self._run(self.suite.ceilings.workload, self.suite.ceilings.values(self.quick), backend,
                               Ceilings(), deadline)
        except TpulabError as e:
            self.card.refused[self._key("roofline", backend)] = f"no roofline: {first_line(str(e))}"
            return Ceilings()
        ceilings = Ceilings([record])
        self._note_ceilings(ceilings, record)
        for dtype, v in verdicts(record).items():
            if v.figure is None:
                self.card.refused[self._key(dtype, backend)] = v.why + (f" (measure it: `{v.run}`)" if v.run else "")
        if record.status != "finished" and not any(k.endswith(self._key("", backend)) for k in self.card.refused):
            self.card.refused[self._key("roofline", backend)] = record.error or f"the roofline was {record.status}"
        return ceilings

    def _key(self, what: str, backend: str) -> str:
        """A refused ceiling's key: its dtype ('float32', 'memory'), and its backend's roofline when the card runs
        several ('float32 (jax)')."""
        return what if len(self.backends) == 1 else f"{what} ({backend})"

    def _note_ceilings(self, ceilings: Ceilings, record: RunRecord, reused: str | None = None) -> None:
        for (kind, name, dtype), c in of_record(record).items():
            if (kind, name, dtype) not in ceilings.kept:
                continue
            memory = dtype == MEMORY
            self.card.ceilings.append(CardCeiling(
                device=f"{kind}: {name}", kind="memory" if memory else "compute", dtype=dtype, value=c.value,
                unit="B/s" if memory else "FLOP/s", source=c.measured(), run_id=c.run_id, reused=reused))

    def _kept(self, backend: str) -> tuple[Ceilings, RunRecord] | None:
        """The newest kept roofline that set a ceiling on this device with this backend and these versions (not a
        card's drift probe: one size, no curve)."""
        from tpulab.engine.runindex import RunFilter

        version = backends.get(backend).version(self.report.packages)
        try:
            records = self.store.records(RunFilter(workload=self.suite.ceilings.workload, backend=backend))
        except StoreError:
            return None
        probes = [{k: v for k, v in d.values(q).items() if k != "preset"} for d in (self.suite.drift, bench.SUITE.drift)
                  if d is not None for q in (True, False)]
        for r in records:  # newest first
            same = r.versions is not None and version in r.versions.values() and \
                r.versions.get("python") == self.report.python
            probe = any(p and all(r.params.get(k) == v for k, v in p.items()) for p in probes)
            if same and not probe and r.device is not None and r.device.kind == self.report.default_device \
                    and of_record(r):
                return Ceilings([r]), r
        return None

    # --- entries -----------------------------------------------------------------------------------
    def _entry(self, entry: bench.Entry, backend: str, share: float, ceilings: Ceilings,
               limit: float) -> tuple[list[CardEntry], Measuring | None]:
        """An entry's first run: rerun at twice the steps until its spread is stable or its share is spent. Its
        card entries, and what its repeats need (None: it gave no run to repeat)."""
        start = time.monotonic()
        values = entry.values(self.quick)
        w = get_workload(entry.workload)
        if PROFILE.name not in {p.name for p in w.params} or not PROFILE.applies(backend):  # no profiler: no top ops
            values = {k: v for k, v in values.items() if k not in (PROFILE.name, PROFILE_STEPS.name)}
        record: RunRecord | None = None
        kept_values, cost = values, 0.0
        stopped = ""
        first = entry.headlines[0]
        while True:
            began = time.monotonic()
            try:
                got = self._run(entry.workload, values, backend, ceilings, min(start + share * OVERRUN + 30, limit))
            except TpulabError as e:
                if record is not None:  # a larger rerun the workload refuses: keep the last
                    stopped = f"steps at the workload's limit ({first_line(str(e))})"
                    break
                status = "skipped" if "does not run on" in str(e) or isinstance(e, NoTime) else "failed"
                self.skipped += isinstance(e, NoTime)
                return [CardEntry(name=h.name, workload=entry.workload, backend=backend, status=status,
                                  reason=first_line(str(e)), ceiling_kind=h.ceiling, article=h.article,
                                  reference=h.reference, variant=h.variant, seconds=time.monotonic() - start)
                        for h in entry.headlines], None
            if self.overran and record is not None:
                stopped = "budget: the rerun at twice the steps ran past its share: the last run's figures are kept"
                break
            record, kept_values, cost = got, values, time.monotonic() - began
            spent = time.monotonic() - start
            width = spread(getattr(record.summary, first.stats, None))
            if self.overran:  # (a run that timed no step says so in its reason)
                stopped = f"budget: stopped at its share after {spent:.0f} s, with the steps it had timed" \
                    if record.status == "finished" else ""
                break
            if record.status != "finished" or self.cancelled:
                stopped = f"the run was {record.status}"
                break
            n = getattr(record.summary, first.stats).count if getattr(record.summary, first.stats, None) else 0
            if width is not None and width <= bench.STABLE and n >= bench.MIN_SAMPLES:
                stopped = f"stable: p10-p90 within {width:.0%} of the median over {n} steps"
                break
            if spent * 3 > share:  # the next run, twice the steps, would not fit its share
                said = f"spread {width:.0%} over {n} steps" if width is not None else f"{n} steps"
                stopped = (f"budget: a rerun at twice the steps would pass its {share:.0f} s share ({said}, not yet "
                           f"within {bench.STABLE:.0%})")
                break
            values = {**values, **{k: int(record.params[k]) * 2 for k in entry.steps if k in record.params}}
        m = Measuring(entry, kept_values, [record], stopped, time.monotonic() - start, cost,
                      budget_stop=self.overran and record is got)
        made = [self._made(h, m, backend, ceilings) for h in entry.headlines]
        m.repeatable = record.status == "finished" and not m.budget_stop and all(e.status == "ok" for e in made)
        return made, m

    def _repeat(self, m: Measuring, backend: str, ceilings: Ceilings, limit: float) -> None:
        """One more run of a measured entry at the steps it settled on: pooled with its others when it finished."""
        began = time.monotonic()
        try:
            got = self._run(m.entry.workload, m.values, backend, ceilings, min(began + m.cost * OVERRUN + 30, limit))
        except TpulabError as e:
            m.notes.append(f"run {len(m.records) + 1} failed: {first_line(str(e))}")
            return
        m.seconds += time.monotonic() - began
        if got.status == "finished" and not self.overran:
            m.records.append(got)
            m.cost = time.monotonic() - began
        else:
            m.notes.append(f"run {len(m.records) + 1} was {got.status}, left out"
                           + (" (it ran past its share)" if self.overran else ""))

    def _remade(self, m: Measuring, backend: str, ceilings: Ceilings, devices: int | None,
                repeats: int | None = None) -> list[CardEntry]:
        """A measured entry's card entries again, over its runs so far; `repeats`: as many as the suite asked, said
        in how its measuring stopped (the last time it is made)."""
        if repeats is not None and repeats > 1:
            runs = len(m.records)
            m.notes.append(f"{runs} alike runs, interleaved with the other entries" if runs > 1 else
                           "one run: the budget left no time for a second" if not self.cancelled else
                           "one run: stopped before its second")
        out = []
        for h, at in zip(m.entry.headlines, m.at):
            made = self._made(h, m, backend, ceilings)
            self.card.entries[at] = made = scaling(made, devices, self.card.entries) if devices else made
            out.append(made)
        self._save()
        return out

    def _made(self, h: bench.Headline, m: Measuring, backend: str, ceilings: Ceilings) -> CardEntry:
        """The card's entry for one headline of an entry's runs; a run stopped at its budget share is an entry like
        any other when it timed steps (its `stopped` says so)."""
        record = m.records[0]
        for r in m.records:
            load = load_of(r.summary.telemetry)
            if load is not None:
                self._loads[r.id] = (load.other, load.cores, h.name)
        f = pooled(h, m.records, bool(ceilings.kept))
        status = {"finished": "ok", "cancelled": "cancelled"}.get(record.status, "failed")
        if m.budget_stop and f["median"] is not None:
            status = "ok"
        reason = first_line(record.error) if record.error else None
        if status == "ok" and f["median"] is None:
            status, reason = "failed", f"the run gave no {h.path.replace('_', ' ')}"
        return CardEntry(name=h.name, workload=record.workload, backend=backend, status=status, reason=reason,
                         device=record.device_label(), ceiling_kind=h.ceiling,
                         stopped="; ".join(x for x in [m.stopped, *m.notes] if x) or None,
                         seconds=m.seconds, command=command(record), article=h.article, run_id=record.id,
                         reference=h.reference, variant=h.variant,
                         params={k: v for k, v in record.params.items() if k not in (BACKEND.name, DEVICE.name)}, **f)

    def _run(self, workload: str, values: dict[str, Any], backend: str, ceilings: Ceilings,
             deadline: float) -> RunRecord:
        """One run, made by the run job every front end makes, judged by this card's ceilings and kept. It is gone
        by `deadline` whatever it is doing: asked to stop `KILL_AFTER_S` before (after its current step), then
        killed, again and again until it is gone (a worker still starting, or too starved of CPU to hear, too)."""
        stop = deadline - KILL_AFTER_S
        if stop - time.monotonic() < 1.0:
            raise NoTime("the card's budget left no time for it")
        given = dict(values)
        preset = given.pop("preset", None)
        spec = resolve(workload, {**given, BACKEND.name: backend}, self.report, preset)
        run = run_job(spec, self.report, self.db, ceilings=ceilings)
        self.current, self.overran = run, False
        if self.cancelled:  # Ctrl+C came as this entry was being made: it never starts
            run.cancel()

        ended = threading.Event()

        def overrun() -> None:
            if ended.wait(max(0.0, stop - time.monotonic())):
                return
            self.overran = True
            run.cancel()  # after its current step
            while not ended.wait(KILL_AFTER_S):
                run.cancel()  # again: killed, what it timed kept (a worker started since is asked, then killed)

        threading.Thread(target=overrun, name="tpulab-card-deadline", daemon=True).start()
        try:
            for _ in run.events():
                pass
        finally:
            ended.set()
            self.current = None
        record = run.recorder.record()
        if self.overran and record.status == "cancelled":
            if record.summary.step_seconds is not None:  # the card's own measurement, settled by its budget
                record.status, record.error = "finished", None
                record.note = ("stopped by its machine card at its share of the card's budget: its figures are of "
                               "the steps it had timed")
            else:
                record.error = "stopped by its machine card at its share of the budget, before a step was timed"
        try:
            self.store.save(record)
        except StoreError as e:
            record.logs.append(f"not kept: {e}")
        return record


def scaling(made: CardEntry, devices: int, entries: list[CardEntry]) -> CardEntry:
    """A scaling entry with its speedup over the same entry on one device (`entries`: the card's so far), and what
    that is of linear (each device doing the work one did alone)."""
    one = next((e for e in entries if e.name + bench.SCALING == made.name and e.backend == made.backend), None)
    speedup = made.median / one.median if made.median and one is not None and one.median else None
    said = [f"{devices} devices: {speedup:.2f}x one device's {one.name} ({speedup / devices:.0%} of linear)"] \
        if speedup is not None and one is not None else []
    return replace(made, devices=devices, scaling=speedup, verdicts=[*said, *made.verdicts])


def _now() -> str:
    return now_iso()
