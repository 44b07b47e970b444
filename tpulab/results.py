"""Every run kept in SQLite, compared across runtimes, and carried between machines as a file.

One row per run holds the whole record as JSON (runtime report, versions, parameters, every
step), with the columns a listing needs beside it. The schema is versioned in `meta`.
"""

from __future__ import annotations

import csv
import json
import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

SCHEMA_VERSION = 1
EXPORT_FORMAT = "tpulab-results"
STATUSES = ("finished", "failed", "cancelled")
COMPARED_BY_DESIGN = ("device", "shards")  # what a comparison across runtimes varies on purpose


class StoreError(RuntimeError):
    """The store or a file cannot be used; the message names the path and the way out."""


def default_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("TPULAB_HOME"):
        return Path(env["TPULAB_HOME"]) / "results.db"
    import platformdirs

    return Path(platformdirs.user_data_dir("tpulab")) / "results.db"


class Store:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._ready = False

    @contextmanager
    def _db(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path, timeout=60, isolation_level=None)
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
        con.execute("PRAGMA journal_mode=WAL")
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
            con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        con.execute("COMMIT")
        self._ready = True

    def save(self, record: dict[str, Any]) -> None:
        with self._db(write=True) as con:
            _insert(con, record, replace=True)

    def records(self, workload: str | None = None) -> list[dict[str, Any]]:
        """All runs, newest first."""
        with self._db() as con:
            q = "SELECT record FROM runs" + (" WHERE workload = ?" if workload else "") + \
                " ORDER BY started_at DESC, rowid DESC"
            return [json.loads(r[0]) for r in con.execute(q, (workload,) if workload else ())]

    def get(self, run_id: str) -> dict[str, Any]:
        """A run by its id or a unique prefix of it."""
        with self._db() as con:
            rows = con.execute("SELECT record FROM runs WHERE id LIKE ? || '%'", (run_id.lower(),)).fetchall()
        if not rows:
            raise StoreError(f"no run {run_id!r} in {self.path}: `tpulab results` lists them")
        if len(rows) > 1:
            raise StoreError(f"{run_id!r} matches {len(rows)} runs: give more of the id")
        return json.loads(rows[0][0])

    def import_records(self, records: list[dict[str, Any]]) -> tuple[int, int]:
        """All or nothing; a record already present is skipped. Returns (added, skipped)."""
        for i, r in enumerate(records, 1):
            problem = validate(r)
            if problem:
                rid = r.get("id") if isinstance(r, dict) else None
                raise StoreError(f"record {i}{f' (id {rid})' if rid else ''}: {problem}; nothing was imported")
        added = 0
        with self._db(write=True) as con:
            for r in records:
                added += _insert(con, r, replace=False)
        return added, len(records) - added


def _insert(con: sqlite3.Connection, r: dict[str, Any], replace: bool) -> int:
    verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
    cur = con.execute(f"{verb} INTO runs (id, workload, status, started_at, record) VALUES (?, ?, ?, ?, ?)",
                      (r["id"], r["workload"], r["status"], r["started_at"], json.dumps(r)))
    return cur.rowcount


REQUIRED: dict[str, type | tuple[type, ...]] = {
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
    return None


# --- files ----------------------------------------------------------------------------------
def export_json(records: list[dict[str, Any]], path: Path) -> None:
    path.write_text(json.dumps({"format": EXPORT_FORMAT, "schema": SCHEMA_VERSION, "records": records}, indent=1))


CSV_COLUMNS = ["id", "workload", "status", "started_at", "device", "dtype", "shards", "batch_size",
               "per_replica_batch", "compile_s", "median_s", "p10_s", "p90_s", "count", "examples_per_s",
               "gflops_per_s", "peak_fraction", "loss", "accuracy", "val_accuracy", "dataset", "flags", "params"]


def csv_row(r: dict[str, Any]) -> dict[str, Any]:
    s = r.get("summary") or {}
    st = s.get("step_seconds") or {}
    metrics = s.get("final_metrics") or {}
    d = r.get("device") or {}
    return {
        "id": r["id"], "workload": r["workload"], "status": r["status"], "started_at": r["started_at"],
        "device": f"{d.get('kind', '')} {d.get('name', '')}".strip(), "dtype": r.get("dtype"),
        "shards": r["params"].get("shards"), "batch_size": r["params"].get("batch_size"),
        "per_replica_batch": r.get("per_replica_batch"), "compile_s": s.get("compile_seconds"),
        "median_s": st.get("median"), "p10_s": st.get("p10"), "p90_s": st.get("p90"), "count": st.get("count"),
        "examples_per_s": s.get("examples_per_s"), "gflops_per_s": s.get("gflops_per_s"),
        "peak_fraction": s.get("peak_fraction"), "loss": metrics.get("loss"),
        "accuracy": metrics.get("sparse_categorical_accuracy"),
        "val_accuracy": (s.get("validation") or {}).get("val_sparse_categorical_accuracy"),
        "dataset": r.get("dataset"), "flags": ";".join(f["code"] for f in s.get("flags", [])),
        "params": json.dumps(r["params"], sort_keys=True),
    }


def export_csv(records: list[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, CSV_COLUMNS)
        w.writeheader()
        w.writerows(csv_row(r) for r in records)


def read_export(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise StoreError(f"{path} is not a tpulab JSON export ({e}); CSV exports are for spreadsheets and "
                         "cannot be imported; nothing was imported") from None
    if isinstance(data, dict) and data.get("format") == EXPORT_FORMAT and isinstance(data.get("records"), list):
        return data["records"]
    if isinstance(data, list):
        return data
    raise StoreError(f"{path} is not a tpulab export (no 'records' list); nothing was imported")


# --- comparison -----------------------------------------------------------------------------
def median(r: dict[str, Any]) -> float | None:
    return ((r.get("summary") or {}).get("step_seconds") or {}).get("median")


def compare(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Side by side, with speedups as ratios of median step time against the first run."""
    if len(records) < 2:
        raise StoreError("compare needs at least two runs")
    workloads = {r["workload"] for r in records}
    if len(workloads) > 1:
        raise StoreError(f"compare runs of one workload (found {', '.join(sorted(workloads))})")
    base = median(records[0])
    rows = []
    for r in records:
        m = median(r)
        rows.append({"id": r["id"], "record": r, "median": m,
                     "speedup": base / m if base and m else None})
    warnings = [f"{k} differs: " + " vs ".join(str(r["params"].get(k)) for r in records)
                for k in differing(records) if k not in COMPARED_BY_DESIGN]
    warnings += [f"run {r['id'][:8]} is {r['status']}: its figures cover only what completed"
                 for r in records if r["status"] != "finished"]
    warnings += [f"run {r['id'][:8]} used synthetic data" for r in records if r.get("synthetic")]
    return {"workload": records[0]["workload"], "rows": rows, "warnings": warnings}


def differing(records: Iterable[dict[str, Any]]) -> list[str]:
    records = list(records)
    keys = sorted({k for r in records for k in r["params"]})
    return [k for k in keys if len({json.dumps(r["params"].get(k)) for r in records}) > 1]
