"""Sweeps: a grid of a workload's parameters, each point a run, to find this machine's fastest configuration.

The grid comes from the same declarations as a single run: any parameter takes a list
(`32,64,128`) or, for numbers, a doubling range (`16..1024`, `0.5..8`). Every value is checked before
anything runs, and combinations that cannot run are named with the reason. Each point runs in
its own worker, as any run, and is kept in the store with the sweep's id; the sweep itself is
kept too, so it can be shown again. The objective is throughput (examples/s), so training
points are short; the first call is excluded as always.

Noise is not a finding: each point is set against the best from both sides' step times (`noise.change`), and
the points not detectably slower than the best are named with it, never ranked below it by a difference the
samples cannot tell from noise. The knee and the speedups carry their intervals and verdicts the same way.
"""

from __future__ import annotations

import itertools
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from tpulab.backends import BackendError
from tpulab.backends import article as article_backend
from tpulab.base.basis import GFLOPS, Work, basis
from tpulab.base.capacity import Found, find
from tpulab.base.events import Event, RunRecord, SweepPoint, SweepRecord
from tpulab.base.figures import is_number
from tpulab.base.noise import NOISE, SLOWER, Change, change
from tpulab.base.timing import Stats, median, summarize
from tpulab.engine.ceilings import Ceilings, kept_at
from tpulab.engine.estimate import ASSUMED_PEAK_FRACTION, Estimate, estimate, wanted
from tpulab.engine.record import now_iso, refused
from tpulab.engine.runindex import RunRow, Wanted
from tpulab.engine.runner import Run, run_job
from tpulab.engine.spec import MAX_REPEAT, RunSpec, resolve
from tpulab.engine.store import StoreError, timed
from tpulab.machine.detect import RuntimeReport
from tpulab.workloads import registry
from tpulab.workloads.base import BACKEND, BATCH_SIZE, PROCESSES, Limits, ParamError, Params, ParamSpec, Workload

if TYPE_CHECKING:
    from tpulab.engine.store import Store

DEFAULT_STEPS = 12  # timed steps per point; the first call is extra and excluded
MAX_STEPS = 100000


def parse_values(spec: ParamSpec, raw: str) -> list[Any]:
    """'32,64,128', '16..1024' or '0.5..8' (doubling from the first, numbers), 'float32,mixed_bfloat16', 'on,off':
    each value checked."""
    text = str(raw).strip()
    if spec.kind in (int, float) and ".." in text and "," not in text:
        lo_text, hi_text = text.split("..", 1)
        lo, hi = spec.parse(lo_text), spec.parse(hi_text)
        if not 0 < lo <= hi:
            example = "16..1024" if spec.kind is int else "0.5..8"
            raise ParamError(spec.name, f"{spec.flag} range must go up from a positive number, e.g. {example} "
                                        f"(got {text!r})")
        values = []
        while lo <= hi:
            values.append(lo)
            lo *= 2
        return values
    values = [spec.parse(part) for part in text.split(",") if part.strip()]
    if not values:
        raise ParamError(spec.name, f"{spec.flag} must be {spec.allowed()} or a list of them (got {text!r})")
    return list(dict.fromkeys(values))  # a value named twice is one point


@dataclass(frozen=True)
class Grid:
    """The fixed parameters and the swept ones, in the order they were given (the first is the x axis), and each
    combination that runs here resolved once, as its run (`build_grid`)."""

    workload: Workload
    base: Params
    axes: dict[str, list[Any]]
    steps: int
    specs: Mapping[tuple[Any, ...], RunSpec] = field(default_factory=dict)  # by the combination's values

    def spec(self, values: Mapping[str, Any]) -> RunSpec | None:
        """The resolved run of a combination (None: it cannot run here, or it is none of the grid's)."""
        return self.specs.get(tuple(values.values()))

    def combinations(self) -> list[dict[str, Any]]:
        names = list(self.axes)
        return [dict(zip(names, values)) for values in itertools.product(*self.axes.values())]

    def params(self, values: dict[str, Any]) -> Params:
        return self.workload.shorten({**self.base, **values}, self.steps)

    def length(self) -> str:
        """How long each point runs, in words: the sweep's steps where the workload times its points over them
        (`Workload.shorten`), else as long as each point's own parameters say (a generation: its length in tokens)."""
        w = self.workload
        if w.set_by_sweeps(self.steps):
            return f"{self.steps} timed {w.unit}s each"
        return f"each as long as its own parameters say ({w.unit}s)"


def build_grid(workload: Workload, raw: Mapping[str, Any], report: RuntimeReport, preset: str | None = None,
               steps: int = DEFAULT_STEPS) -> tuple[Grid, list[tuple[dict[str, Any], str]]]:
    """The grid, and the combinations that cannot run with the reason for each (each resolved as its run).

    Raises `ParamError` for a bad value (one line naming the parameter) or when no combination can run,
    `BackendError` (the install command) when one names a backend that cannot run here.
    """
    axes: dict[str, list[Any]] = {}
    fixed: dict[str, Any] = {}
    for name, text in raw.items():
        if text is None:
            continue
        spec = workload.spec(name)
        values = parse_values(spec, text)
        if len(values) > 1 and not spec.axis:
            raise ParamError(name, f"{spec.flag} takes one value for every point of a sweep, never a list "
                                   f"(got {text!r})")
        if len(values) > 1:
            axes[name] = values
        else:
            fixed[name] = values[0]
    base = {**workload.preset(preset), **fixed}
    for name in workload.set_by_sweeps(steps) & {*fixed, *axes}:
        raise ParamError(name, f"{workload.spec(name).flag} is set by the sweep itself (each point is "
                               f"{steps} timed steps, --steps): leave it out")
    grid = Grid(workload, base, axes, steps)
    impossible = []
    specs = {}
    for combo in grid.combinations():
        try:
            specs[tuple(combo.values())] = resolve(workload, grid.params(combo), report)
        except ParamError as e:
            impossible.append((combo, str(e)))
    if not specs:
        why = impossible[0][1] if impossible else "no values"
        raise ParamError(next(iter(axes), BATCH_SIZE), f"no combination of the grid can run: {why}")
    return replace(grid, specs=specs), impossible


@dataclass
class Point:
    """One configuration of the grid, run `repeat` times."""

    values: dict[str, Any]
    params: Params  # as run (resolved), or as given when it cannot run here
    article: bool = False  # the article's configuration, run because the grid lacked it
    records: list[RunRecord] = field(default_factory=list)
    spec: RunSpec | None = None  # None: a kept sweep's point, or one whose backend cannot run here
    cannot: str | None = None  # why its backend cannot run here (the point is kept as failed)

    @property
    def finished(self) -> list[RunRecord]:
        return [r for r in self.records if r.status == "finished" and (r.summary.examples_per_s
                                                                         or r.summary.gflops_per_s)]

    @property
    def status(self) -> str:
        if self.finished:
            return "finished"
        return self.records[-1].status if self.records else "pending"

    @property
    def throughput(self) -> float | None:
        """examples/s as each run's summary gives it (at the median step, or the workload's own rate: tokens/s over
        the batch at TPOT), the median over repeats."""
        return median([r.summary.examples_per_s for r in self.finished if r.summary.examples_per_s])

    @property
    def throughput_range(self) -> tuple[float, float] | None:
        xs = [r.summary.examples_per_s for r in self.finished if r.summary.examples_per_s]
        return (min(xs), max(xs)) if xs else None

    def rate(self, by: str) -> float | None:
        """What the sweep ranks by: examples/s, or GFLOP/s when the points' work per example differs."""
        return self.gflops if by == GFLOPS else self.throughput

    def work(self, by: str) -> float | None:
        """What one of its steps did, counted as `by` counts it (examples, tokens or FLOPs): each run's rate times
        its median step, the median over repeats. Two points' works scale the ratio of their step times."""
        return median([rate * r.median for r in self.finished
                       if r.median and (rate := r.summary.gflops_per_s if by == GFLOPS else r.summary.examples_per_s)])

    def samples(self) -> list[list[float]]:
        """Each finished run's steady step times, in order: what its interval and its verdicts are drawn from."""
        return [xs for r in self.finished if (xs := timed(r))]

    @property
    def step_stats(self) -> Stats | None:
        """Its steady steps' spread and their median's 95% interval, over the repeats where it ran several: the
        '±2%' beside its rate."""
        if len(self.finished) == 1:
            return self.finished[0].summary.step_seconds
        runs = self.samples()
        return summarize([x for xs in runs for x in xs], runs)

    @property
    def machines(self) -> int:
        r = self.finished[0] if self.finished else None
        return r.device.machines if r and r.device else 1

    @property
    def step_seconds(self) -> float | None:
        return median([r.median or 0 for r in self.finished])

    @property
    def gflops(self) -> float | None:
        return median([r.summary.gflops_per_s for r in self.finished if r.summary.gflops_per_s])

    @property
    def peak_fraction(self) -> float | None:
        return median([r.summary.peak_fraction for r in self.finished if r.summary.peak_fraction])

    @property
    def ceiling_fraction(self) -> float | None:
        return median([r.summary.ceiling_fraction for r in self.finished if r.summary.ceiling_fraction])

    @property
    def flags(self) -> list[str]:
        return sorted({f.code for r in self.records for f in r.summary.flags})

    @property
    def error(self) -> str | None:
        return next((r.error for r in reversed(self.records) if r.error), None)

    @property
    def workload(self) -> Workload | None:
        """Its runs' workload, where it is installed here (a kept sweep's may not be)."""
        return registry().get(self.records[0].workload) if self.records else None

    @property
    def latency(self) -> str | None:
        """Its workload's latency figure (`Workload.latency`): a sweep of such points is a latency/throughput curve."""
        w = self.workload
        return w.latency if w is not None and self.finished else None

    def figure(self, name: str) -> float | None:
        """One of its workload's own figures (`summary.figures`), the median over repeats."""
        return median([v for r in self.finished if is_number(v := r.summary.figures.get(name))])


@dataclass
class Findings:
    """What a sweep found: the best point, its speedups, and where batch size stops paying."""

    best: Point | None
    slowest: Point | None
    article: Point | None
    over_article: float | None
    over_slowest: float | None
    knee: Point | None  # the smallest batch not detectably slower than the best, the others as the best's
    scaling: list[tuple[int, float, float]] = field(default_factory=list)  # (processes, ratio, ideal)
    by: str = "examples/s"  # what the points were ranked by
    baseline: Point | None = None  # what the best's speedup is measured against (`Workload.sweep_baseline`)
    over_baseline: float | None = None
    within: list[Point] = field(default_factory=list)  # per series, the largest batch within --max-itl
    speedups: dict[int, float] = field(default_factory=dict)  # id(point) -> its rate over its baseline's
    near: list[Point] = field(default_factory=list)  # not detectably slower than the best, fastest first
    untold: list[Point] = field(default_factory=list)  # too few steps to tell whether they are slower than the best
    changes: dict[int, Change] = field(default_factory=dict)  # id(point) -> it against the best
    article_change: Change | None = None  # the best against the article's configuration
    slowest_change: Change | None = None  # ... against the slowest point
    baseline_change: Change | None = None  # ... against its baseline
    latency: str | None = None  # the points' latency figure (`Point.latency`): the sweep is a curve, ranked by throughput
    capacity: list[Found[Point]] = field(default_factory=list)  # per series, where the workload declares one and
    # the sweep's axes hold its load (`Workload.capacity`): the highest load within the SLO, and the knee

    def speedup(self, p: Point) -> float | None:
        return self.speedups.get(id(p))

    def change(self, p: Point) -> Change | None:
        """A point against the best (None: the best itself, or no steps to draw from)."""
        return self.changes.get(id(p))


def objective(points: list[Point]) -> str:
    """Like with like (`basis`): examples/s when every point does the same work per example, else GFLOP/s.

    Sweeping an image size or a filter count changes the work per example: the smallest problem would
    win on examples/s, so the points are compared by the rate at which they did their work instead.
    A curve's points (a workload that declares a latency: generated tokens are what a decode sweep is for, whatever
    their cost) rank by their throughput in its own unit (tokens/s).
    """
    done = [p for p in points if p.finished]
    if done and all(p.latency for p in done):
        return done[0].finished[0].summary.throughput_unit
    return basis([Work(p.finished[0].summary.flops_per_step, p.finished[0].batch) for p in points if p.finished]).rate


Baseline = Callable[[dict[str, Any]], "dict[str, Any] | None"]  # a point's values -> its baseline's


def findings(points: list[Point], article_values: dict[str, Any] | None, baseline: Baseline | None = None,
             max_itl_s: float | None = None) -> Findings:
    """The best point and those not detectably slower than it, its speedups (over the article's configuration, or
    over its `baseline`'s values where the workload names one), the knee, the scaling and, with `max_itl_s`, the
    largest batch of each series whose latency figure (ITL p50) stays within it. Each comparison is drawn from both
    sides' steps."""
    by = objective(points)
    done = sorted((p for p in points if p.rate(by)), key=lambda p: -(p.rate(by) or 0))
    if not done:
        return Findings(None, None, None, None, None, None, by=by)
    latency = done[0].latency if all(p.latency for p in done) else None
    best, slowest = done[0], done[-1]
    article = next((p for p in done if p.article), None) or (
        next((p for p in done if article_values is not None and p.values == article_values), None))
    changes = {id(p): c for p in done[1:] if (c := versus(p, best, by)) is not None}
    told = {i for i, c in changes.items() if c.low is not None}
    bases = {id(p): point_at(done, baseline(p.values)) for p in done} if baseline is not None else {}
    speedups = {id(p): r for p in done if (b := bases.get(id(p))) and (r := _ratio(p.rate(by), b.rate(by)))}
    base = bases.get(id(best))

    def against(other: Point | None) -> Change | None:
        return versus(best, other, by) if other is not None and other is not best else None

    declared = best.workload.capacity if best.workload is not None else None
    return Findings(best, slowest, article, _ratio(best.rate(by), article.rate(by) if article else None),
                    _ratio(best.rate(by), slowest.rate(by)), knee_of(done, changes, by), scaling(done, best), by, base,
                    speedups.get(id(best)), within_itl(done, max_itl_s) if max_itl_s is not None else [], speedups,
                    [p for p in done if id(p) in told and changes[id(p)].word != SLOWER],
                    [p for p in done[1:] if id(p) not in told], changes, against(article), against(slowest),
                    against(base), latency,
                    find(declared, points) if declared is not None and declared.load in best.values else [])


def versus(other: Point, base: Point, by: str) -> Change | None:
    """`other` against `base` from both sides' step times (their repeats, where they ran several): its rate over
    the base's, with the ratio's interval and verdict. The ratio of their step times is scaled by the ratio of
    their work per step, which differs where the points did different work (another batch, another image)."""
    work_a, work_b = base.work(by), other.work(by)
    if not work_a or not work_b:
        return None
    a, b = base.samples(), other.samples()
    return change([x for xs in a for x in xs], [x for xs in b for x in xs], work_b / work_a,
                  base_repeats=a if len(a) > 1 else None, other_repeats=b if len(b) > 1 else None)


def knee_of(done: list[Point], changes: dict[int, Change], by: str) -> Point | None:
    """The smallest batch, the other values as the best's (`done[0]`), not detectably slower than the best; where
    the steps give no interval, within the noise threshold of its rate (the most the steps can tell)."""
    best = done[0]
    if BATCH_SIZE not in best.values:
        return None

    def close(p: Point) -> bool:
        c = changes.get(id(p))
        if c is not None and c.low is not None:
            return c.word != SLOWER
        return p is best or (p.rate(by) or 0) * (1 + NOISE) >= (best.rate(by) or 0)

    return min((p for p in done if series_key(p) == series_key(best) and close(p)), key=lambda p: p.values[BATCH_SIZE])


def point_at(points: list[Point], values: dict[str, Any] | None) -> Point | None:
    return next((p for p in points if p.values == values), None) if values is not None else None


def series_key(p: Point) -> tuple[tuple[str, Any], ...]:
    """A point's series on a batch curve: its values but the batch."""
    return tuple((k, v) for k, v in p.values.items() if k != BATCH_SIZE)


def within_itl(points: list[Point], max_itl_s: float) -> list[Point]:
    """Per series (the values but the batch), the largest batch whose latency figure (ITL p50) is at most
    `max_itl_s`."""
    out: dict[tuple[tuple[str, Any], ...], Point] = {}
    for p in points:
        itl = p.figure(p.latency) if p.latency else None
        if itl is None or itl > max_itl_s or BATCH_SIZE not in p.values:
            continue
        key = series_key(p)
        if key not in out or p.values[BATCH_SIZE] > out[key].values[BATCH_SIZE]:
            out[key] = p
    return list(out.values())


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def scaling(points: list[Point], best: Point | None) -> list[tuple[int, float, float]]:
    """(processes, throughput ratio to the fewest processes, ideal ratio), the others as the best's.

    The ideal grows with the machines the processes bring: processes sharing one machine share its
    devices, so their ideal is to lose nothing (1x); processes on N machines may reach N x.
    """
    n = PROCESSES.name
    if best is None or n not in best.values:
        return []
    others = {k: v for k, v in best.values.items() if k != n}
    line = sorted((p.values[n], p.throughput or 0, p.machines) for p in points if p.throughput
                  and {k: v for k, v in p.values.items() if k != n} == others)
    if len(line) < 2:
        return []
    _, base, base_machines = line[0]
    return [(n, rate / base, machines / base_machines) for n, rate, machines in line[1:]]


def unlike_article(grid: Grid) -> dict[str, tuple[Any, Any]]:
    """The knobs the sweep holds fixed at other values than the article's: {name: (the sweep's, the article's)}
    (none for a workload the article did not run: it has no `article` preset)."""
    w = grid.workload
    if "article" not in w.presets:
        return {}
    article = w.shorten({**w.defaults(), **w.presets["article"]}, grid.steps)
    ours = grid.params({})
    return {s.name: (ours.get(s.name), article.get(s.name)) for s in w.params
            if s.tunes and s.name not in grid.axes and ours.get(s.name) != article.get(s.name)}


def article_configuration(grid: Grid, report: RuntimeReport) -> dict[str, Any] | None:
    """The article's values of the swept knobs (its preset, on TensorFlow where installed), or None.

    The one place that decides whether a sweep has the article's configuration: only when every knob it
    holds fixed is the article's (a smoke sweep's batch 128 at 32x32 images is not the article's run, so
    it is neither run nor named as one). What is not a knob (the device, the data, the seed) keeps the
    grid's first value.
    """
    if not grid.axes or "article" not in grid.workload.presets or unlike_article(grid):
        return None
    article = {**grid.workload.defaults(), **grid.workload.presets["article"]}
    if BACKEND.name in grid.axes:
        framework = article_backend()
        article[BACKEND.name] = framework.name if framework and framework.installed(report.packages) else "auto"
    return {name: article[name] if grid.workload.spec(name).tunes else values[0]
            for name, values in grid.axes.items()}


@dataclass
class PointStarted:
    point: Point
    index: int  # 1-based, with `repeat`
    of: int


@dataclass
class PointFinished:
    point: Point
    record: RunRecord


SweepEvent = PointStarted | PointFinished | Event


@dataclass
class Unkept:
    """The store could not keep a point's run or the sweep: the sweep goes on."""

    error: str


@dataclass(frozen=True)
class Stop:
    """Why a sweep stops after its current point: the user asked for it (the command line's exit code says so),
    or something else ended it (its time limit, the lab closing)."""

    why: str
    by_user: bool = False

    def __str__(self) -> str:
        return self.why


BY_USER = Stop("stopped by the user", by_user=True)


class Sweep:
    """Runs a grid point after point; a failed point is kept and the sweep goes on.

    Every point is resolved as its run once, by `build_grid` (the article's, added, when the sweep is made). The command
    line and the notebook drive it alike (`plan`, then `drive`), the lab reads its `events` in a thread
    (keeping each point itself); each only renders what it yields.
    """

    def __init__(self, grid: Grid, report: RuntimeReport, repeat: int = 1, max_minutes: float | None = None) -> None:
        self.grid, self.report, self.limits = grid, report, Limits.of(report)
        self.repeat = repeat
        self.max_minutes = max_minutes
        self.id = uuid.uuid4().hex
        self.started_at = now_iso()
        self.ended_at: str | None = None
        self.status = "running"
        self.points = [p for v in grid.combinations() if (p := self._point(v)) is not None]
        self.article_values = article_configuration(grid, report)
        if self.article_values is not None and not any(p.values == self.article_values for p in self.points) \
                and (article := self._point(self.article_values, article=True)) is not None:
            self.points.append(article)
        self.run: Run | None = None
        self.ceilings = Ceilings()  # the measured ceilings each point is judged by (the caller reads the store)
        self.stopping: Stop | None = None  # why the sweep stops after the current point

    def _point(self, values: dict[str, Any], article: bool = False) -> Point | None:
        """The point of these values, as the grid resolved it (the article's: resolved here); None when it cannot
        run with these values."""
        params = self.grid.params(values)
        if not article:
            spec = self.grid.spec(values)
            return Point(values, spec.params, spec=replace(spec, sweep=self.id)) if spec is not None else None
        try:
            spec = resolve(self.grid.workload, params, self.report, sweep=self.id)
        except ParamError:
            return None
        except BackendError as e:
            return Point(values, params, article, cannot=str(e))
        return Point(values, spec.params, article, spec=spec)

    def estimate(self, candidates: Callable[[Wanted], list[RunRow]]) -> Estimate:
        """The whole sweep's duration: each point's estimate, summed, times the repeats.

        `candidates` finds what each point learns from (`Store.candidates`, one indexed query a point)."""
        w = self.grid.workload
        guesses = [estimate(w, p.params, self.limits, self.report, candidates(wanted(w, p.params, self.limits)))
                   for p in self.points]
        if any(g.seconds is None for g in guesses):
            return Estimate(None, "no basis for some points")
        if len(guesses) == 1:
            return Estimate((guesses[0].seconds or 0) * self.repeat, guesses[0].basis, guesses[0].kind)
        words = {"run": "from a kept run of the same configuration", "device": "at this device's best rate",
                 "peak": f"assuming {ASSUMED_PEAK_FRACTION:.0%} of peak"}
        counts = Counter(g.kind for g in guesses)
        basis = "; ".join(f"{n} point{'' if n == 1 else 's'} {words[kind]}" for kind, n in counts.items())
        return Estimate(sum(g.seconds or 0 for g in guesses) * self.repeat, basis, "mixed")

    def stop(self, why: str | None = None) -> None:
        """Finish the current point, then stop; every finished point is kept. `why`: what ended it, when not the
        user's word."""
        self.stopping = self.stopping or (BY_USER if why is None else Stop(why))

    def cancel_point(self) -> None:
        """Stop the running point after its current step (again: kill it)."""
        if self.run is not None:
            self.run.cancel()

    def events(self) -> Iterator[SweepEvent]:
        self.started_at = now_iso()  # planned earlier (a form plans one as it changes): it starts now
        deadline = time.monotonic() + self.max_minutes * 60 if self.max_minutes else math.inf
        total = len(self.points) * self.repeat
        n = 0
        for point in interleaved(self.points, self.repeat):
            if self.stopping is None and time.monotonic() >= deadline:
                self.stopping = Stop(f"--max-minutes {self.max_minutes:g} reached")
            if self.stopping is not None:
                break
            n += 1
            yield PointStarted(point, n, total)
            record = yield from self._run_point(point)
            point.records.append(record)
            yield PointFinished(point, record)
        self.status = "cancelled" if self.stopping else "finished"
        self.ended_at = now_iso()

    def drive(self, store: Store | None = None) -> Iterator[SweepEvent | Unkept]:
        """`events`, each finished point's run kept in `store` before it is yielded, and the sweep at the end."""
        for event in self.events():
            if isinstance(event, PointFinished) and store is not None:
                try:
                    store.save(event.record)
                except StoreError as e:
                    yield Unkept(str(e))
            yield event
        if store is not None:
            try:
                store.save_sweep(self.record())
            except StoreError as e:
                yield Unkept(str(e))

    def _run_point(self, point: Point) -> Generator[Event, None, RunRecord]:
        if point.spec is None:  # nothing was decided for it: no spec, its record says why
            return refused(self.grid.workload.name, point.params, point.cannot or "it cannot run here", self.report,
                           self.id)
        self.run = run_job(point.spec, self.report, ceilings=self.ceilings)
        try:
            yield from self.run.events()
            return self.run.recorder.record()
        finally:
            self.run = None

    def findings(self, max_itl_s: float | None = None) -> Findings:
        return findings(self.points, self.article_values, baseline_of(self.grid.workload, self.grid.axes), max_itl_s)

    def record(self) -> SweepRecord:
        """The sweep as kept in the store: its grid, its points' run ids, and what it found."""
        f = self.findings()
        index = {id(p): i for i, p in enumerate(self.points)}

        def at(p: Point | None) -> int | None:
            return index[id(p)] if p is not None else None

        return SweepRecord(
            id=self.id, workload=self.grid.workload.name, started_at=self.started_at, ended_at=self.ended_at,
            status=self.status, stopped=self.stopping.why if self.stopping else None, axes=self.grid.axes, base=self.grid.base,
            steps=self.grid.steps, repeat=self.repeat, article_values=self.article_values,
            points=[SweepPoint(values=p.values, article=p.article, runs=[r.id for r in p.records]) for p in self.points],
            findings={"best": at(f.best), "slowest": at(f.slowest), "article": at(f.article), "knee": at(f.knee),
                      "over_article": f.over_article, "over_slowest": f.over_slowest,
                      "baseline": at(f.baseline), "over_baseline": f.over_baseline,
                      "near": [at(p) for p in f.near]})


def interleaved(points: list[Point], repeat: int) -> list[Point]:
    """Each point once, in order, `repeat` times over (A B C, A B C): a machine that drifts while a sweep runs moves
    every point's repeats alike, where A A A, B B B would lay the drift on the points themselves."""
    return [p for _ in range(repeat) for p in points]


def baseline_of(workload: Workload, axes: Mapping[str, Any]) -> Baseline:
    """The workload's answer to what a point's speedup is measured against, for this grid's axes."""
    return lambda values: workload.sweep_baseline(values, axes)


def kept_points(sweep: SweepRecord, records: dict[str, RunRecord]) -> list[Point]:
    """A kept sweep's points again, with their runs from the store (a run deleted since is left out)."""
    return [Point(p.values, next((records[i].params for i in p.runs if i in records), {}), p.article,
                  [records[i] for i in p.runs if i in records])
            for p in sweep.points]


def plan(workload: Workload, raw: Mapping[str, Any], report: RuntimeReport, preset: str | None = None,
         steps: int | None = None, repeat: int = 1, max_minutes: float | None = None,
         db: Path | None = None) -> tuple[Sweep, list[tuple[dict[str, Any], str]]]:
    """A sweep ready to `drive`, and the combinations that cannot run with the reason for each.

    Every check a front end needs before anything runs: `steps` and `repeat` in range, every value,
    every point resolved (a `UsageError` names what to fix). `db`: the store whose measured ceilings
    judge each point.
    """
    if steps is not None and not 1 <= steps <= MAX_STEPS:
        raise ParamError("steps", f"--steps must be an integer from 1 to {MAX_STEPS} (got {steps})")
    if not 1 <= repeat <= MAX_REPEAT:
        raise ParamError("repeat", f"--repeat must be an integer from 1 to {MAX_REPEAT} (got {repeat})")
    grid, impossible = build_grid(workload, raw, report, preset, steps or DEFAULT_STEPS)
    sweep = Sweep(grid, report, repeat, max_minutes)
    if db is not None:
        sweep.ceilings = kept_at(db)
    return sweep, impossible
