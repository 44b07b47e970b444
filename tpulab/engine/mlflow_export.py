"""Runs, sweeps and machine cards sent to an MLflow tracking store, where teams already compare their runs.

Each run becomes an MLflow run: its parameters (and the backend, device and dtype it ran on) as params, its summary's
figures as metrics (derived from `Summary`'s and `Stats`' declared fields, and the workload's own `figures`), each
step's time as a metric series, its flags and verdicts as tags, its record (and the trace of a profiled run) as
artifacts. A sweep is a parent run whose children are its points' runs; a machine card is a run with its entries'
figures as metrics. tpulab's id is kept as a tag (`ID`), so that an export done twice adds nothing. MLflow is
imported only here, and only when an export is asked for (`pip install 'tpulab[mlflow]'`).
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from tpulab.base.errors import TpulabError, UsageError, first_line
from tpulab.base.events import PHASE_BANDWIDTH, RunRecord, Summary, SweepRecord, Telemetry
from tpulab.base.figures import is_number
from tpulab.base.schema import scalars
from tpulab.base.timing import Stats
from tpulab.engine.card import Card, scrubbed

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Metric

ID, KIND = "tpulab.id", "tpulab.kind"  # the tags that find a run again: tpulab's id, and run, sweep or card
PARENT = "mlflow.parentRunId"  # MLflow's own tag: a sweep's points are its children
EXPERIMENT = "tpulab"  # the experiment an export goes to unless told
INSTALL = "pip install 'tpulab[mlflow]'"
STATUS = {"finished": "FINISHED", "failed": "FAILED", "cancelled": "KILLED"}


class TrackerError(TpulabError):
    """The tracking store refused or could not be reached: MLflow's own first line."""


@dataclass
class Sent:
    """What an export added to the tracking store, and what was there already."""

    uri: str
    experiment: str
    runs: int = 0
    sweeps: int = 0
    cards: int = 0
    present: int = 0  # already in the store (by tpulab's id): left as they were

    def how_to_open(self) -> str:
        """The one line that says where to look: a server's address, or the `mlflow ui` that opens a local store."""
        if self.uri.startswith(("http://", "https://")):
            return f"open {self.uri} in a browser"
        if self.uri.startswith("databricks"):
            return f"open the experiment {self.experiment!r} in your Databricks workspace"
        return f"open it with `mlflow ui --backend-store-uri {self.uri}` (the UI comes with `pip install mlflow`)"


def client(tracking_uri: str | None) -> MlflowClient:
    """MLflow's client of `tracking_uri` (None: MLflow's own default, $MLFLOW_TRACKING_URI or a local store), or the
    one line that says how to install MLflow, or what is wrong with the URI."""
    try:
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException
    except ImportError:
        raise UsageError(f"exporting to MLflow needs mlflow-skinny: {INSTALL}") from None
    try:
        return MlflowClient(tracking_uri)
    except MlflowException as e:
        sql = "" if importlib.util.find_spec("sqlalchemy") else f" ({INSTALL} brings the SQLite store)"
        raise UsageError(f"--tracking-uri {tracking_uri or 'default'}: {first_line(e.message)}{sql}") from None


def send(records: Iterable[RunRecord], sweeps: Iterable[SweepRecord] = (), cards: Iterable[Card] = (), *,
         tracking_uri: str | None = None, experiment: str = EXPERIMENT) -> Sent:
    """Runs, sweeps and cards into `experiment` of the tracking store; each sweep becomes the parent of those of its
    runs that `records` holds (a sweep none of whose runs is sent is left out). Runs found by tpulab's id are left
    as they were, but for their parent where they had none; a run left half-written by an export that stopped
    (still RUNNING) is written again."""
    if not experiment.strip():
        raise UsageError("--experiment must name an MLflow experiment (got an empty name)")
    mlflow = client(tracking_uri)
    from mlflow.exceptions import MlflowException

    try:
        found = mlflow.get_experiment_by_name(experiment)
    except MlflowException as e:
        raise TrackerError(f"MLflow at {mlflow.tracking_uri}: {first_line(e.message)}") from None
    try:
        exp_id = found.experiment_id if found is not None else mlflow.create_experiment(experiment)
    except MlflowException as e:
        raise UsageError(f"--experiment {experiment!r}: {first_line(e.message)}") from None
    try:
        return _Export(mlflow, exp_id, {s.id: s for s in sweeps}).send(records, cards, experiment)
    except MlflowException as e:
        raise TrackerError(f"MLflow at {mlflow.tracking_uri}: {first_line(e.message)}") from None


class _Export:
    """One export into one experiment: the runs already there by tpulab's id, and each sweep's parent once made."""

    def __init__(self, mlflow: MlflowClient, exp_id: str, sweeps: Mapping[str, SweepRecord]) -> None:
        self.mlflow, self.exp_id, self.sweeps = mlflow, exp_id, sweeps
        self.there: dict[str, Any] = {}  # tpulab's id -> the MLflow run that holds it
        token = None
        while True:
            page = mlflow.search_runs([exp_id], max_results=1000, page_token=token)
            self.there |= {r.data.tags[ID]: r for r in page if ID in r.data.tags}
            token = page.token
            if not token:
                break
        self.parents: dict[str, str] = {}  # a sweep's id -> its MLflow run's

    def send(self, records: Iterable[RunRecord], cards: Iterable[Card], experiment: str) -> Sent:
        sent = Sent(self.mlflow.tracking_uri, experiment)
        for r in records:
            parent = self.parent(r.sweep, sent) if r.sweep is not None and r.sweep in self.sweeps else None
            if (run_id := self.present(r.id)) is not None:
                sent.present += 1
                if parent and PARENT not in self.there[r.id].data.tags:
                    self.mlflow.set_tag(run_id, PARENT, parent)
                continue
            self.run(r, parent)
            sent.runs += 1
        for c in cards:
            if self.present(c.id) is not None:
                sent.present += 1
                continue
            self.card(scrubbed(c))  # what leaves the machine: no host name, user name or home path
            sent.cards += 1
        return sent

    def present(self, tpulab_id: str) -> str | None:
        """The MLflow run that already holds `tpulab_id`, or None; one an export left unfinished is deleted."""
        found = self.there.get(tpulab_id)
        if found is None:
            return None
        if found.info.status == "RUNNING":
            self.mlflow.delete_run(found.info.run_id)
            del self.there[tpulab_id]
            return None
        return str(found.info.run_id)

    def parent(self, sweep_id: str, sent: Sent) -> str:
        """The sweep's parent run: found, or made once."""
        if sweep_id not in self.parents:
            found = self.present(sweep_id)
            if found is not None:
                sent.present += 1
            else:
                found = self.sweep(self.sweeps[sweep_id])
                sent.sweeps += 1
            self.parents[sweep_id] = found
        return self.parents[sweep_id]

    def start(self, tpulab_id: str, kind: str, name: str, started_at: str, tags: Mapping[str, str],
              parent: str | None = None) -> str:
        run = self.mlflow.create_run(self.exp_id, start_time=millis(started_at), run_name=name,
                                     tags={ID: tpulab_id, KIND: kind, **tags, **({PARENT: parent} if parent else {})})
        return str(run.info.run_id)

    def log(self, run_id: str, params: Mapping[str, Any], metrics: Mapping[str, Any], at: int,
            series: Iterable[Metric] = ()) -> None:
        from mlflow.entities import Metric, Param

        self.mlflow.log_batch(run_id, params=[Param(key(k), text(v)) for k, v in params.items() if v is not None],
                              metrics=[*(Metric(key(k), float(v), at, 0) for k, v in metrics.items() if is_number(v)),
                                       *series])

    def run(self, r: RunRecord, parent: str | None) -> None:
        s = r.summary
        found = figures(s)
        verdicts = [*(s.telemetry.verdicts if s.telemetry else ()), *(s.profile.verdicts if s.profile else ())]
        tags = {"tpulab.workload": r.workload, "tpulab.status": r.status,
                **{f"tpulab.{k}": v for k, v in found.items() if isinstance(v, str)},  # a figure's words, a source
                **{f"tpulab.flag.{f.code}": f.message for f in s.flags},
                **{f"tpulab.verdict.{f.code}": f.message for f in verdicts},
                **{f"tpulab.version.{k}": v for k, v in (r.versions or {}).items()},
                **{f"tpulab.plugin.{k}": v for k, v in r.plugins.items()},
                **({"tpulab.sweep": r.sweep} if r.sweep else {}), **({"tpulab.error": r.error} if r.error else {})}
        run_id = self.start(r.id, "run", f"{r.workload} {r.short_id}", r.started_at, tags, parent)
        at = millis(r.ended_at or r.started_at)
        device = r.device
        self.log(run_id, {**r.params, "backend": r.backend, "device": device.kind if device else r.params.get("device"),
                          "device_name": device.name if device else None, "replicas": device.replicas if device else None,
                          "dtype": r.dtype, "per_replica_batch": r.per_replica_batch, "dataset": r.dataset},
                 found, at, step_series(r, at))
        self.mlflow.log_dict(run_id, r.to_json(), "record.json")
        trace = s.profile.trace_path if s.profile else None
        if trace and Path(trace).is_dir():
            self.mlflow.log_artifacts(run_id, trace, "trace")
        self.mlflow.set_terminated(run_id, STATUS.get(r.status, "FAILED"), at)

    def sweep(self, sw: SweepRecord) -> str:
        """The parent of a sweep's runs: its base and axes as params, its findings' ratios as metrics, its best point
        as a tag."""
        best = sw.findings.get("best")
        point = sw.points[best] if isinstance(best, int) and 0 <= best < len(sw.points) else None
        tags = {"tpulab.workload": sw.workload, "tpulab.status": sw.status,
                **({"tpulab.best": values(point.values)} if point else {}),
                **({"tpulab.stopped": sw.stopped} if sw.stopped else {})}
        run_id = self.start(sw.id, "sweep", f"sweep {sw.workload} {sw.short_id}", sw.started_at, tags)
        at = millis(sw.ended_at or sw.started_at)
        self.log(run_id, {**sw.base, **{f"swept.{k}": ",".join(map(str, v)) for k, v in sw.axes.items()},
                          "steps": sw.steps, "repeat": sw.repeat, "points": len(sw.points)},
                 {k: v for k, v in sw.findings.items() if k.startswith("over_")}, at)
        self.mlflow.log_dict(run_id, sw.to_json(), "sweep.json")
        self.mlflow.set_terminated(run_id, STATUS.get(sw.status, "FINISHED"), at)
        return run_id

    def card(self, c: Card) -> None:
        """A machine card: each entry's figures as metrics (`entry/backend/figure`), each ceiling's value
        (`ceiling/device kind/dtype`), the card's drift; its entries' verdicts and reasons as tags."""
        tags = {"tpulab.status": c.status, **({"tpulab.noisy": c.noisy} if c.noisy else {}),
                **{f"tpulab.verdict.{e.name}/{e.backend}": "; ".join(e.verdicts) for e in c.entries if e.verdicts},
                **{f"tpulab.reason.{e.name}/{e.backend}": e.reason for e in c.entries if e.reason},
                **{f"tpulab.unit.{e.name}/{e.backend}": e.unit for e in c.entries if e.unit}}
        run_id = self.start(c.id, "card", f"card {c.which()}", c.created_at, tags)
        metrics: dict[str, Any] = {"load": c.load, "wall_s": c.wall_s, "drifted": c.drifted()}
        for e in c.entries:
            metrics |= {f"{e.name}/{e.backend}/{k}": getattr(e, k) for k in ENTRY_FIGURES}
        metrics |= {f"ceiling/{x.device.split(':')[0]}/{x.dtype}": x.value for x in c.ceilings}  # 'cpu: Xeon...': cpu
        at = millis(c.ended_at or c.created_at)
        self.log(run_id, {"suite": c.suite.name, "suite_version": c.suite.version, "quick": c.suite.quick,
                          "machine": c.label(), "backends": ",".join(c.backends), "budget_s": c.budget_s},
                 metrics, at)
        self.mlflow.log_dict(run_id, c.to_json(), "card.json")
        self.mlflow.set_terminated(run_id, "FINISHED" if c.exit_code == 0 else "FAILED", at)


ENTRY_FIGURES = ("median", "low", "high", "p10", "p90", "n", "cv", "ceiling_fraction", "spec_fraction", "scaling",
                 "host_gap_share", "seconds")


def figures(s: Summary) -> dict[str, Any]:
    """A summary's numbers, named as the CSV export names them: its scalar fields, its step times' statistics (the
    median with its interval), its telemetry's, and the workload's own figures."""
    return {**scalars(Summary, s), **scalars(Stats, s.step_seconds, "step_"),
            **scalars(Stats, s.inference_step_seconds, "inference_step_"),
            **scalars(Telemetry, s.telemetry, "telemetry_"), **s.figures, **(s.final_metrics or {}), **(s.validation or {})}


def step_series(r: RunRecord, at: int) -> list[Metric]:
    """Each step's seconds at its index (`step_seconds`; a warm-up's `warmup_step_seconds`, another phase's
    `<phase>_step_seconds`); in each series a fresh process's steps (`--repeat`) continue the index where the
    previous process's ended."""
    from mlflow.entities import Metric

    out: list[Metric] = []
    offset: dict[str, int] = {}
    last: dict[str, int] = {}
    for s in r.steps:
        if s.phase == PHASE_BANDWIDTH or not math.isfinite(s.seconds):
            continue
        name = "warmup_step_seconds" if s.warmup else f"{s.phase}_step_seconds" if s.phase else "step_seconds"
        if s.step + offset.get(name, 0) <= last.get(name, -1):  # the next process's steps start again at its first
            offset[name] = last[name] + 1 - s.step
        last[name] = s.step + offset.get(name, 0)
        out.append(Metric(name, s.seconds, millis_of(s.t) if s.t else at, last[name]))
    return out


def key(name: str) -> str:
    """A name MLflow takes as a param's or metric's key (letters, digits, _ - . / and spaces)."""
    return re.sub(r"[^\w.\- /]", "_", name).strip("/") or "_"


def text(value: Any) -> str:
    """A param's value: a string as it is, anything else as JSON (a number, a list, a model's description)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def values(v: Mapping[str, Any]) -> str:
    """A point's values as the sweep's lines say them: 'size=32, batch_size=8'."""
    return ", ".join(f"{k}={x}" for k, x in v.items())


def millis(when: str) -> int:
    return millis_of(datetime.fromisoformat(when).timestamp())


def millis_of(seconds: float) -> int:
    return int(seconds * 1000)
