"""What the Python API returns: a run, a sweep, a comparison, the runtime, a listing.

Each wraps the typed record the rest of tpulab uses (nothing is copied), gives its figures as
attributes and NumPy arrays, `to_dict()`, `to_pandas()` where pandas is installed, and draws
itself: HTML with charts in a notebook, the terminal's tables in a REPL.
"""

from __future__ import annotations

import io
import shutil
from typing import TYPE_CHECKING, Any

from tpulab.base import fmt, safe
from tpulab.base.events import RunRecord, SweepRecord
from tpulab.base.figures import FigureValue
from tpulab.engine.mlflow_export import EXPERIMENT, Sent, send
from tpulab.engine.runindex import RunRow
from tpulab.views import html, listing

if TYPE_CHECKING:
    import numpy as np

    from tpulab.engine.doctor import Verdict
    from tpulab.engine.store import Comparison
    from tpulab.engine.sweep import Findings, Point
    from tpulab.machine.detect import RuntimeReport


def columns() -> int:
    """The terminal's width, as `COLUMNS` or the terminal says (100 where neither does: a notebook's kernel), so
    that `print(r)` never draws wider than where it prints."""
    return shutil.get_terminal_size((100, 24)).columns


def text(*renderables: Any, width: int | None = None) -> str:
    """Rich renderables as plain text, for a terminal REPL's repr: as wide as the terminal unless told."""
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=width or columns(), color_system=None, force_terminal=False,
                      force_jupyter=False)
    for r in renderables:
        console.print(r, highlight=False)
    return out.getvalue().rstrip()


def pandas() -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("to_pandas() needs pandas: pip install pandas (Colab has it)") from None
    return pd


class RunResult:
    """One run: its record (`.record`, every step and the summary) and its headline figures."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record

    def __getattr__(self, name: str) -> Any:  # the record's fields: params, steps, device, summary...
        if name == "record":
            raise AttributeError(name)
        return getattr(self.record, name)

    @property
    def median(self) -> float | None:
        """Median steady step time, seconds."""
        return self.record.median

    @property
    def headlines(self) -> dict[str, Any]:
        """The figures its workload leads with (`Workload.headlines`), by their paths in the summary."""
        from tpulab.workloads import registry

        w = registry().get(self.record.workload)
        return {path: self.record.summary.figure(path) for path in (w.headlines if w else ("throughput",))}

    @property
    def compile_seconds(self) -> float | None:
        return self.record.summary.compile_seconds

    @property
    def examples_per_s(self) -> float | None:
        return self.record.summary.examples_per_s

    @property
    def gflops_per_s(self) -> float | None:
        return self.record.summary.gflops_per_s

    @property
    def peak_fraction(self) -> float | None:
        return self.record.summary.peak_fraction

    @property
    def step_seconds(self) -> np.ndarray:
        """Every steady (timed, not warm-up) step's seconds, in order."""
        import numpy as np

        return np.array([s.seconds for s in self.record.steps if not s.warmup for _ in range(s.steps)], dtype=float)

    @property
    def throughput(self) -> np.ndarray:
        """Examples/s of every steady step (empty when the batch is unknown)."""
        import numpy as np

        batch = self.record.params.get("batch_size")
        if not batch:
            return np.array([], dtype=float)
        return batch / self.step_seconds

    @property
    def figures(self) -> dict[str, FigureValue]:
        """Its workload's own figures (`Workload.figures` declares them): a decode run's TTFT, ITL p50, MBU..."""
        return self.record.summary.figures

    @property
    def timed(self) -> np.ndarray:
        """The step times its median is of, in order, as its workload times them (a decode run's: each token's
        latency after the prefill); empty for a workload not installed here."""
        import numpy as np

        from tpulab.workloads import registry

        w = registry().get(self.record.workload)
        return np.array(w.timed_seconds(self.record.steps) if w else [], dtype=float)

    @property
    def ops(self) -> Any:
        """The op table of a profiled run (`profile=True`) as a pandas DataFrame: a row per op, by time,
        the ops below the top ones summed in a row named `other`; seconds per step, share of the step 0 to 1."""
        from dataclasses import asdict

        from tpulab.views.profile import CSV_FIELDS, profile_of

        profile = profile_of(self.record)
        return pandas().DataFrame([asdict(o) for o in profile.ops], columns=list(CSV_FIELDS))

    def to_dict(self) -> dict[str, Any]:
        return self.record.to_json()

    def to_pandas(self) -> Any:
        """One row per timed step: step, seconds, examples/s, warm-up, and the step's metrics."""
        pd = pandas()
        return pd.DataFrame([{"step": s.step, "seconds": s.seconds, "steps": s.steps, "warmup": s.warmup,
                              "examples_per_s": s.examples_per_s, "phase": s.phase, **s.metrics}
                             for s in self.record.steps])

    def _repr_html_(self) -> str:
        return html.run_html(self.record)

    def __repr__(self) -> str:
        from tpulab.views.console import summary_table

        return text(summary_table(self.record))


class SweepResult:
    """A sweep: its grid, its points (each with its runs) and what it found."""

    def __init__(self, sweep: SweepRecord, runs: dict[str, RunRecord]) -> None:
        self.sweep = sweep
        self.records = runs

    @property
    def id(self) -> str:
        return self.sweep.id

    @property
    def status(self) -> str:
        return self.sweep.status

    @property
    def axes(self) -> dict[str, list[Any]]:
        return dict(self.sweep.axes)

    @property
    def points(self) -> list[Point]:
        from tpulab.engine.sweep import kept_points

        return kept_points(self.sweep, self.records)

    @property
    def findings(self) -> Findings:
        """What the sweep found, as every view finds it: its best, the points not detectably slower, its speedups
        (over its workload's baseline where it names one) with their intervals and verdicts."""
        from tpulab.views.sweep import kept_findings

        return kept_findings(self.sweep, self.points)

    @property
    def best(self) -> RunResult | None:
        """The best point's fastest run."""
        best = self.findings.best
        if best is None:
            return None
        return RunResult(min(best.finished, key=lambda r: r.median or float("inf")))

    @property
    def runs(self) -> list[RunResult]:
        return [RunResult(r) for p in self.points for r in p.records]

    @property
    def throughput(self) -> np.ndarray:
        """Each point's examples/s (NaN where it did not finish), in the grid's order."""
        import numpy as np

        return np.array([p.throughput if p.throughput is not None else np.nan for p in self.points], dtype=float)

    def to_dict(self) -> dict[str, Any]:
        from tpulab.views.sweep import sweep_summary_json

        return {**sweep_summary_json(self.sweep, self.records), "sweep": self.sweep.to_json()}

    def to_pandas(self) -> Any:
        """One row per point: its swept values, then its figures."""
        from tpulab.views.sweep import point_json

        pd = pandas()
        return pd.DataFrame([{**p.values, **{k: v for k, v in point_json(p).items() if k != "values"}}
                             for p in self.points])

    def _repr_html_(self) -> str:
        return html.sweep_html(self.sweep, self.records)

    def __repr__(self) -> str:
        from tpulab.views.sweep import sweep_report

        return text(sweep_report(self.sweep, self.records, columns()))


class ComparisonResult:
    """Runs side by side, with speedups against the first."""

    def __init__(self, comparison: Comparison) -> None:
        self.comparison = comparison

    def __getattr__(self, name: str) -> Any:  # workload, by, header, warnings
        if name == "comparison":
            raise AttributeError(name)
        return getattr(self.comparison, name)

    @property
    def runs(self) -> list[RunResult]:
        return [RunResult(r) for r in self.comparison.records]

    @property
    def speedups(self) -> np.ndarray:
        import numpy as np

        return np.array([x if x is not None else np.nan for x in self.comparison.speedups], dtype=float)

    def to_dict(self) -> dict[str, Any]:
        from tpulab.engine.store import row

        c = self.comparison
        return {"workload": c.workload, "by": c.by, "header": c.header, "warnings": c.warnings,
                "rows": [{**row(r), "speedup": x} for r, x in zip(c.records, c.speedups)]}

    def to_pandas(self) -> Any:
        return pandas().DataFrame(self.to_dict()["rows"])

    def _repr_html_(self) -> str:
        return html.comparison_html(self.comparison)

    def __repr__(self) -> str:
        from tpulab.views.console import comparison_table

        return text(comparison_table(self.comparison, columns()))


class RuntimeResult:
    """What hardware is here and what tpulab makes of it (the report of `tpulab detect`)."""

    def __init__(self, report: RuntimeReport, verdicts: list[Verdict]) -> None:
        self.report = report
        self.verdicts = verdicts

    def __getattr__(self, name: str) -> Any:  # cpu, gpus, tpu, colab, packages, frameworks
        if name in ("report", "verdicts"):
            raise AttributeError(name)
        return getattr(self.report, name)

    @property
    def default_device(self) -> str:
        return self.report.default_device

    @property
    def accelerator(self) -> str | None:
        """'tpu' or 'gpu' when one can be used here, else None."""
        device = self.report.default_device
        return None if device == "cpu" else device

    def to_dict(self) -> dict[str, Any]:
        return {**self.report.to_dict(), "verdicts": [v.to_dict() for v in self.verdicts]}

    def _repr_html_(self) -> str:
        return html.runtime_html(self.report, self.verdicts)

    def __repr__(self) -> str:
        from tpulab.views.console import runtime_table

        return text(runtime_table(self.report, self.verdicts))


class RunList(list):
    """Kept runs, newest first: a list of `RunResult`, drawn as the CLI's listing."""

    def __init__(self, runs: list[RunResult], caption: str, sweeps: list[SweepRecord] | None = None) -> None:
        super().__init__(runs)
        self.caption = caption
        self.sweeps = sweeps or []  # the sweeps its runs are points of: each their parent in MLflow

    def to_mlflow(self, tracking_uri: str | None = None, experiment: str = EXPERIMENT) -> Sent:
        """These runs into an MLflow tracking store (None: MLflow's own default), each sweep of theirs as their
        parent run; a run already there (by tpulab's id) is left as it was. Needs `pip install 'tpulab[mlflow]'`."""
        return send([r.record for r in self], self.sweeps, tracking_uri=tracking_uri, experiment=experiment)

    def to_pandas(self) -> Any:
        from tpulab.engine.store import row

        return pandas().DataFrame([row(r.record) for r in self])

    def _repr_html_(self) -> str:
        return html.list_html([r.record for r in self], self.caption)

    def __repr__(self) -> str:
        from rich import box
        from rich.table import Table

        width = columns()
        header, *rows = fmt.fit([fmt.LIST_COLUMNS, *(listing.list_row(RunRow.of(r.record)) for r in self)], width)
        t = Table(title=self.caption, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0)
        for col in header:
            t.add_column(col, no_wrap=True)
        for cells in rows:
            t.add_row(*map(safe.text, cells))
        return text(t, width=width)
