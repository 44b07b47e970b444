"""Every run kept in SQLite, compared across runtimes, and carried between machines as a file.

One row per run holds the whole record as JSON (runtime report, versions, parameters, every
step), with the columns a listing needs beside it. The schema is versioned in `meta`.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from tpulab.core.basis import GFLOPS, TIME, Work, basis
from tpulab.core.errors import TpulabError
from tpulab.core.events import STATUSES, RunRecord
from tpulab.workloads import registry

SCHEMA_VERSION = 2  # 2: sweeps
BUSY_TIMEOUT_S = 60  # how long a writer waits for another process's transaction
EXPORT_FORMAT = "tpulab-results"
COMPARED_BY_DESIGN = ("device", "shards", "backend")  # what a comparison across runtimes varies on purpose


class StoreError(TpulabError):
    """The store or a file cannot be used; the message names the path and the way out."""


def default_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("TPULAB_HOME"):
        return Path(env["TPULAB_HOME"]) / "results.db"
    import platformdirs

    return Path(platformdirs.user_data_dir("tpulab")) / "results.db"


@dataclass
class Exported:
    records: list[Any]
    sweeps: list[Any]


class Store:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._ready = False

    @contextmanager
    def _db(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"cannot open the results database {self.path}: {e}; "
                             "pass --db PATH or set TPULAB_HOME to a writable folder") from None
        try:
            if not self._ready:
                self._migrate(con)
            con.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            yield con
            con.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise StoreError(f"cannot read the results database {self.path}: {e}. It was left untouched: "
                             f"move it aside (mv {self.path} {self.path}.bak) or pass --db OTHER_PATH") from None
        finally:
            con.close()

    def _migrate(self, con: sqlite3.Connection) -> None:
        # Switching a new database to WAL while another process opens it can fail at once with "locked"
        # (SQLite's busy handler does not cover it): try again for as long as the busy timeout would wait.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                con.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        con.execute("BEGIN IMMEDIATE")
        con.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            con.execute("ROLLBACK")
            raise StoreError(f"the results database {self.path} has schema {version}, newer than this "
                             f"tpulab's {SCHEMA_VERSION}: upgrade tpulab, or pass --db OTHER_PATH")
        if version < 1:
            con.execute("""CREATE TABLE IF NOT EXISTS runs (
                id TEXT PRIMARY KEY, workload TEXT NOT NULL, status TEXT NOT NULL,
                started_at TEXT NOT NULL, record TEXT NOT NULL)""")
            con.execute("CREATE INDEX IF NOT EXISTS runs_started ON runs (started_at)")
        if version < 2:
            con.execute("""CREATE TABLE IF NOT EXISTS sweeps (
                id TEXT PRIMARY KEY, workload TEXT NOT NULL, started_at TEXT NOT NULL, sweep TEXT NOT NULL)""")
        if version < SCHEMA_VERSION:
            con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        con.execute("COMMIT")
        self._ready = True

    def save(self, record: RunRecord) -> None:
        with self._db(write=True) as con:
            _insert(con, record.to_json(), replace=True)

    def records(self, workload: str | None = None) -> list[RunRecord]:
        """All runs, newest first."""
        with self._db() as con:
            q = "SELECT record FROM runs" + (" WHERE workload = ?" if workload else "") + \
                " ORDER BY started_at DESC, rowid DESC"
            return [load_record(json.loads(r[0])) for r in con.execute(q, (workload,) if workload else ())]

    def _by_prefix(self, table: str, column: str, wanted: str, listing: str) -> Any:
        """One row's JSON by its id or a unique prefix of it; the error says how to list them."""
        noun = table.removesuffix("s")
        with self._db() as con:
            rows = con.execute(f"SELECT {column} FROM {table} WHERE id LIKE ? || '%'", (wanted.lower(),)).fetchall()
        if not rows:
            raise StoreError(f"no {noun} {wanted!r} in {self.path}: `{listing}` lists them")
        if len(rows) > 1:
            raise StoreError(f"{wanted!r} matches {len(rows)} {table}: give more of the id")
        return json.loads(rows[0][0])

    def get(self, run_id: str) -> RunRecord:
        """A run by its id or a unique prefix of it."""
        return load_record(self._by_prefix("runs", "record", run_id, "tpulab results"))

    def save_sweep(self, sweep: dict[str, Any]) -> None:
        """A sweep: its grid, its points' run ids and its findings (the runs are saved as runs)."""
        with self._db(write=True) as con:
            _insert_sweep(con, sweep, replace=True)

    def sweeps(self) -> list[dict[str, Any]]:
        """All sweeps, newest first."""
        with self._db() as con:
            rows = con.execute("SELECT sweep FROM sweeps ORDER BY started_at DESC, rowid DESC").fetchall()
        return [json.loads(r[0]) for r in rows]

    def get_sweep(self, sweep_id: str) -> dict[str, Any]:
        """A sweep by its id or a unique prefix of it."""
        return dict(self._by_prefix("sweeps", "sweep", sweep_id, "tpulab results sweep"))

    def sweep_runs(self, sweep: dict[str, Any]) -> dict[str, RunRecord]:
        """The kept runs of a sweep's points, by id."""
        wanted = sorted({i for p in sweep["points"] for i in p["runs"]})
        with self._db() as con:
            rows = con.execute(f"SELECT record FROM runs WHERE id IN ({','.join('?' * len(wanted))})",
                               wanted).fetchall()
        records = [load_record(json.loads(r[0])) for r in rows]
        return {r.id: r for r in records}

    def import_records(self, exported: Exported) -> tuple[int, int]:
        """All or nothing; a record or sweep already present is skipped. Returns (runs added, runs skipped)."""
        records, sweeps = exported.records, exported.sweeps
        for i, r in enumerate(records, 1):
            problem = validate(r)
            if problem:
                rid = r.get("id") if isinstance(r, dict) else None
                raise StoreError(f"record {i}{f' (id {rid})' if rid else ''}: {problem}; nothing was imported")
        for i, sw in enumerate(sweeps, 1):
            problem = validate_sweep(sw)
            if problem:
                raise StoreError(f"sweep {i}: {problem}; nothing was imported")
        added = 0
        with self._db(write=True) as con:
            for r in records:
                added += _insert(con, r, replace=False)
            for sw in sweeps:
                _insert_sweep(con, sw, replace=False)
        return added, len(records) - added


def _insert(con: sqlite3.Connection, r: dict[str, Any], replace: bool) -> int:
    verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
    cur = con.execute(f"{verb} INTO runs (id, workload, status, started_at, record) VALUES (?, ?, ?, ?, ?)",
                      (r["id"], r["workload"], r["status"], r["started_at"], json.dumps(r)))
    return cur.rowcount


def _insert_sweep(con: sqlite3.Connection, sweep: dict[str, Any], replace: bool) -> None:
    verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
    con.execute(f"{verb} INTO sweeps (id, workload, started_at, sweep) VALUES (?, ?, ?, ?)",
                (sweep["id"], sweep["workload"], sweep["started_at"], json.dumps(sweep)))


def load_record(data: dict[str, Any]) -> RunRecord:
    """A stored or imported record; one from before backends were named ran on the article's framework."""
    if not data.get("backend"):
        from tpulab.backends import article

        legacy = article()
        data = {**data, "backend": legacy.name if legacy else ""}
    return RunRecord.from_json(data)


REQUIRED: dict[str, type] = {
    "id": str, "workload": str, "params": dict, "status": str, "started_at": str,
    "summary": dict, "steps": list, "epochs": list,
}


def validate(r: Any) -> str | None:
    """Why a record cannot be imported, or None."""
    if not isinstance(r, dict):
        return f"expected an object, found {type(r).__name__}"
    for key, kind in REQUIRED.items():
        if key not in r:
            return f"missing {key!r}"
        if not isinstance(r[key], kind):
            return f"{key!r} should be {kind.__name__}, found {type(r[key]).__name__}"
    if not r["id"] or not all(c in "0123456789abcdef" for c in r["id"]):
        return f"'id' should be hexadecimal, found {r['id']!r}"
    if r["status"] not in STATUSES:
        return f"'status' should be one of {', '.join(STATUSES)}, found {r['status']!r}"
    for j, s in enumerate(r["steps"], 1):
        if not isinstance(s, dict) or not isinstance(s.get("seconds"), (int, float)):
            return f"step {j} has no number 'seconds'"
    try:  # every part must read back as the classes every view reads
        load_record(r)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        return f"not a tpulab record ({e})"
    return None


SWEEP_REQUIRED: dict[str, type] = {"id": str, "workload": str, "started_at": str, "status": str, "axes": dict,
                                   "base": dict, "steps": int, "points": list}


def validate_sweep(sw: Any) -> str | None:
    """Why a sweep cannot be imported, or None."""
    if not isinstance(sw, dict):
        return f"expected an object, found {type(sw).__name__}"
    for key, kind in SWEEP_REQUIRED.items():
        if not isinstance(sw.get(key), kind):
            return f"{key!r} should be {kind.__name__}"
    for j, p in enumerate(sw["points"], 1):
        if not (isinstance(p, dict) and isinstance(p.get("values"), dict) and isinstance(p.get("runs"), list)
                and all(isinstance(i, str) for i in p["runs"])):
            return f"point {j} needs 'values' and a list of run ids 'runs'"
    return None


# --- files ----------------------------------------------------------------------------------
def export_json(records: list[RunRecord], path: Path, sweeps: list[dict[str, Any]] | None = None) -> None:
    path.write_text(json.dumps({"format": EXPORT_FORMAT, "schema": SCHEMA_VERSION,
                                "records": [r.to_json() for r in records], "sweeps": sweeps or []}, indent=1))


def _metric_columns() -> list[tuple[str, str]]:
    """(column, metric key) for every metric any workload declares, training's then validation's."""
    seen = {m.label.replace(" ", "_"): m.key for w in registry().values() for m in w.metrics}
    return [*seen.items(), *((f"val_{label}", f"val_{key}") for label, key in seen.items())]


def row(r: RunRecord) -> dict[str, Any]:
    """A run flat enough for a spreadsheet or a JSON listing: figures, metrics by their short names."""
    s = r.summary
    st = s.step_seconds
    d = r.device
    figures = {**(s.final_metrics or {}), **(s.validation or {})}
    return {
        "id": r.id, "workload": r.workload, "status": r.status, "started_at": r.started_at,
        "device": f"{d.kind} {d.name}" if d else "", "backend": r.backend, "dtype": r.dtype,
        "shards": r.params.get("shards"), "batch_size": r.params.get("batch_size"),
        "per_replica_batch": r.per_replica_batch, "compile_s": s.compile_seconds,
        "median_s": st.median if st else None, "p10_s": st.p10 if st else None, "p90_s": st.p90 if st else None,
        "count": st.count if st else None, "examples_per_s": s.examples_per_s, "gflops_per_s": s.gflops_per_s,
        "peak_fraction": s.peak_fraction, "mfu": s.mfu, "throughput": s.throughput,
        "throughput_unit": s.throughput_unit, "inference_throughput": s.inference_throughput,
        "inference_median_s": s.inference_step_seconds.median if s.inference_step_seconds else None,
        "model": (r.model or {}).get("name"), "model_sha256": (r.model or {}).get("sha256"),
        "model_parameters": (r.model or {}).get("parameters"),
        **{column: figures.get(key) for column, key in _metric_columns()},
        "dataset": r.dataset, "sweep": r.sweep, "flags": [f.code for f in s.flags], "params": r.params,
    }


def csv_row(r: RunRecord) -> dict[str, Any]:
    out = row(r)
    out["flags"] = ";".join(out["flags"])
    out["params"] = json.dumps(out["params"], sort_keys=True)
    return out


def export_csv(records: list[RunRecord], path: Path) -> None:
    columns = list(row(records[0]) if records else ())
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows(csv_row(r) for r in records)


def read_export(path: Path) -> Exported:
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise StoreError(f"{path} is not a tpulab JSON export ({e}); CSV exports are for spreadsheets and "
                         "cannot be imported; nothing was imported") from None
    if isinstance(data, dict) and data.get("format") == EXPORT_FORMAT and isinstance(data.get("records"), list):
        sweeps = data.get("sweeps") or []
        return Exported(data["records"], sweeps if isinstance(sweeps, list) else [])
    if isinstance(data, list):
        return Exported(data, [])
    raise StoreError(f"{path} is not a tpulab export (no 'records' list); nothing was imported")


# --- comparison -----------------------------------------------------------------------------
@dataclass
class Comparison:
    """Runs of one workload side by side; speedups against the first, by time or by throughput."""

    workload: str
    records: list[RunRecord]
    speedups: list[float | None]
    by: str  # "time": the same work per step, wall time compared; else the throughput compared
    header: str
    warnings: list[str]


def compare(records: list[RunRecord]) -> Comparison:
    """Like with like: wall-time ratios only when every run did the same work per step.

    When the work differs (another batch or shape), a ratio of times says nothing; the runs are
    compared by what they achieved per second instead (GFLOP/s, else examples/s), and the header says so.
    """
    if len(records) < 2:
        raise StoreError("compare needs at least two runs")
    workloads = {r.workload for r in records}
    if len(workloads) > 1:
        raise StoreError(f"compare runs of one workload (found {', '.join(sorted(workloads))})")
    found = basis([Work(r.summary.flops_per_step, r.batch, model_key(r)) for r in records])
    by = found.by
    if by == TIME:
        header = "speedup = the first run's median time / this run's"
        values = [1 / m if m else None for m in (r.median for r in records)]
    else:
        header = f"{found.why}: speedup = this run's {by} / the first run's"
        values = [r.summary.gflops_per_s if by == GFLOPS else r.summary.examples_per_s for r in records]
    base = values[0]
    speedups = [v / base if v and base and math.isfinite(v / base) else None for v in values]
    warnings = [f"{k} differs: " + " vs ".join(str(r.params.get(k)) for r in records)
                for k in differing(records) if k not in COMPARED_BY_DESIGN]
    warnings += [f"run {r.short_id} is {r.status}: its figures cover only what completed"
                 for r in records if r.status != "finished"]
    warnings += [f"run {r.short_id} used synthetic data" for r in records if r.synthetic]
    if len({model_key(r) for r in records}) > 1:
        warnings.append("the models differ: " + " vs ".join(model_key(r) or "-" for r in records))
    return Comparison(records[0].workload, list(records), speedups, by, f"{records[0].workload}: {header}", warnings)


def model_key(r: RunRecord) -> str | None:
    """What makes a user's model that model: its name and the hash of its file (None for built-in workloads)."""
    return f"{r.model.get('name')}@{r.model.get('sha256')}" if r.model else None


def differing(records: Iterable[RunRecord]) -> list[str]:
    records = list(records)
    keys = sorted({k for r in records for k in r.params})
    return [k for k in keys if len({json.dumps(r.params.get(k)) for r in records}) > 1]
