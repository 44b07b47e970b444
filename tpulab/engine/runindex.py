"""The columns kept beside each stored record, so listings, filters and estimates never parse a record.

`RunRow` is the one definition: each field names its SQL type and how it is derived from a
record, so a new column is one line here (the store re-derives its index when the fields change).
`RunFilter` is the one filter of runs, shared by `results list`, `export`, `prune` and the lab.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from tpulab.base.errors import UsageError
from tpulab.base.events import STATUSES, RunRecord
from tpulab.workloads import registry


def _col(sql: str, of: Callable[[RunRecord], Any]) -> Any:
    return field(metadata={"sql": sql, "of": of})


def configuration_key(values: dict[str, Any]) -> str:
    """A workload's `configuration(p)` as one comparable text: how the work is done, not how much."""
    return json.dumps(values, sort_keys=True, default=str)


def _configuration(r: RunRecord) -> str | None:
    w = registry().get(r.workload)
    return configuration_key(w.configuration(r.params)) if w is not None else None


def disturbed_of(r: RunRecord) -> int | None:
    """1 where the run was timed beside other work (its `disturbed` flag), 0 where its load was sampled and low,
    None where it was not sampled."""
    if r.summary.has_flag("disturbed"):
        return 1
    t = r.summary.telemetry
    return 0 if t is not None and t.cpu_mean is not None and t.process_mean is not None else None


def _stat(name: str) -> Callable[[RunRecord], Any]:
    return lambda r: getattr(r.summary.step_seconds, name) if r.summary.step_seconds else None


@dataclass(frozen=True)
class RunRow:
    """A kept run as a listing, a filter and an estimate see it."""

    id: str = _col("TEXT PRIMARY KEY", lambda r: r.id)
    workload: str = _col("TEXT NOT NULL", lambda r: r.workload)
    status: str = _col("TEXT NOT NULL", lambda r: r.status)
    started_at: str = _col("TEXT NOT NULL", lambda r: r.started_at)
    device: str = _col("TEXT NOT NULL", lambda r: r.device_label())
    device_short: str = _col("TEXT NOT NULL", lambda r: r.device_label(short=True))
    device_kind: str | None = _col("TEXT", lambda r: r.device.kind if r.device else None)
    backend: str = _col("TEXT NOT NULL", lambda r: r.backend)
    dtype: str | None = _col("TEXT", lambda r: r.dtype)
    configuration: str | None = _col("TEXT", _configuration)  # the workload's: how the work is done
    shards: int | None = _col("INTEGER", lambda r: r.device.replicas if r.device else None)
    batch_size: int | None = _col("INTEGER", lambda r: r.batch)
    sweep: str | None = _col("TEXT", lambda r: r.sweep)
    model: str | None = _col("TEXT", lambda r: str(r.model.get("name")) if r.model else None)  # a user's model
    median_s: float | None = _col("REAL", _stat("median"))
    peak_fraction: float | None = _col("REAL", lambda r: r.summary.peak_fraction)
    gflops_per_s: float | None = _col("REAL", lambda r: r.summary.gflops_per_s)
    examples_per_s: float | None = _col("REAL", lambda r: r.summary.examples_per_s)
    flops_per_step: float | None = _col("REAL", lambda r: r.summary.flops_per_step)
    compile_s: float | None = _col("REAL", lambda r: r.summary.compile_seconds)
    host_gap_share: float | None = _col("REAL", lambda r: r.summary.profile.host_gap_share
                                        if r.summary.profile else None)  # schema 4: a profiled run's
    disturbed: int | None = _col("INTEGER", lambda r: disturbed_of(r))  # 1: other work used the machine; None: unknown
    intensity: float | None = _col("REAL", lambda r: r.summary.intensity)  # schema 8: FLOP per byte, a roofline's point

    @property
    def short_id(self) -> str:
        return self.id[:8]

    @classmethod
    def of(cls, record: RunRecord) -> RunRow:
        return cls(**derive(record))


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(RunRow))


def derive(record: RunRecord) -> dict[str, Any]:
    """Every indexed column of a record, derived from the record alone."""
    return {f.name: f.metadata["of"](record) for f in fields(RunRow)}


def table_sql(name: str) -> str:
    return f"CREATE TABLE {name} (" + ", ".join(f"{f.name} {f.metadata['sql']}" for f in fields(RunRow)) + ")"


@dataclass(frozen=True)
class Wanted:
    """What an estimate looks for among kept runs: this device's, and this configuration's, of similar work."""

    workload: str
    device: str
    backend: str
    dtype: str | None
    configuration: str  # `configuration_key` of the workload's `configuration(p)`
    flops: float
    within: float  # a kept run counts if its work per step is within this factor


# --- filters ------------------------------------------------------------------------------------
FILTERS = ("workload", "device", "backend", "status", "sweep", "since", "before")


class FilterError(UsageError):
    """A filter value that cannot be read; the message names it and the form it takes."""


def when(text: str, name: str) -> str:
    """An ISO date or time, or `Nd`/`Nh` ago, as the ISO text started_at compares against."""
    m = re.fullmatch(r"(\d+)([dh])", text.strip())
    if m:
        ago = timedelta(days=int(m[1])) if m[2] == "d" else timedelta(hours=int(m[1]))
        return (datetime.now(timezone.utc) - ago).isoformat(timespec="seconds")
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise FilterError(f"{name} {text!r}: give a date (2026-11-01), a time (2026-11-01T14:00) "
                          "or an age (7d, 12h)") from None
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).astimezone(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunFilter:
    """Which runs: each field set narrows the selection; `words` match any descriptive column."""

    workload: str | None = None
    device: str | None = None  # a kind (gpu) or part of the device's label
    backend: str | None = None
    status: str | None = None
    sweep: str | None = None  # a sweep's id or its first characters
    since: str | None = None  # ISO, as `when` returns
    before: str | None = None
    words: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def where(self) -> tuple[str, list[Any]]:
        """An SQL condition on the `runs` columns, and its parameters."""
        terms: list[str] = []
        args: list[Any] = []
        exact = {"workload": self.workload, "backend": self.backend, "status": self.status}
        for column, value in exact.items():
            if value:
                terms.append(f"{column} = ?")
                args.append(value)
        if self.device:
            terms.append("(device_kind = ? OR device LIKE '%' || ? || '%')")
            args += [self.device.lower(), self.device]
        if self.sweep:
            terms.append("sweep LIKE ? || '%'")
            args.append(self.sweep.lower())
        if self.since:
            terms.append("started_at >= ?")
            args.append(self.since)
        if self.before:
            terms.append("started_at < ?")
            args.append(self.before)
        for w in self.words:
            terms.append("(workload LIKE '%' || ? || '%' OR device LIKE '%' || ? || '%' OR backend LIKE ? || '%' "
                         "OR status LIKE ? || '%' OR id LIKE ? || '%')")
            args += [w] * 5
        return (" AND ".join(terms) or "1"), args

    def describe(self) -> str:
        """'workload conv, device gpu' (empty when nothing is filtered)."""
        parts = [f"{f.name} {getattr(self, f.name)}" for f in fields(self) if f.name != "words" and getattr(self, f.name)]
        return ", ".join(parts + [repr(w) for w in self.words])


def parse_filter(text: str) -> RunFilter:
    """The lab's filter field: `key:value` for a named filter (workload:conv since:7d), other words match
    any descriptive column (conv, gpu, jax, failed, an id's first characters)."""
    named: dict[str, str] = {}
    words: list[str] = []
    for token in text.split():
        key, sep, value = token.partition(":")
        if sep and key in FILTERS and value:
            named[key] = value
        else:
            words.append(token)
    return make_filter(words=tuple(words), **named)


def make_filter(words: tuple[str, ...] = (), **named: str | None) -> RunFilter:
    """A filter from named values as typed (CLI flags or the lab's field); dates and statuses checked."""
    status = named.get("status")
    if status and status not in STATUSES:
        raise FilterError(f"status {status!r}: one of {', '.join(STATUSES)}")
    since, before = named.get("since"), named.get("before")
    return RunFilter(workload=named.get("workload"), device=named.get("device"), backend=named.get("backend"),
                     status=status, sweep=named.get("sweep"), since=when(since, "since") if since else None,
                     before=when(before, "before") if before else None, words=words)
