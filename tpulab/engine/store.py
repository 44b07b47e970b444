"""Every run, sweep and machine card kept in SQLite, compared across runtimes, and carried between machines as a
file.

Each run's whole record (runtime report, versions, parameters, every step) is kept as JSON in
`run_data`, the source of truth; the columns a listing, a filter and an estimate read are derived
from it into `runs` (small rows, indexed), so those never parse a record and cost what they show,
not what is kept. The schema is versioned in `meta`.

A record's JSON is kept in two parts: its arrays that grow with the run (`BULK`: every step and telemetry
sample, about 10 MiB for 100,000 steps) in `run_data.bulk`, the rest in `run_data.record`; the two joined
(`WHOLE`) are the record as it was saved, which `get`, `records` and exports read. What reads no step (a
comparison's table, `results show`, the ceilings) reads the rest alone (`light=True`), and a comparison's
verdict takes the steady step times from `run_steps`: each run's `timed_repeats`, kept when it was saved as
float64s (`numpy.ndarray.tobytes`, the very values its steps hold) with where each fresh process's begin.
"""

from __future__ import annotations

import csv
import errno
import json
import math
import shutil
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from tpulab.backends import article
from tpulab.base.basis import GFLOPS, TIME, Work, basis, differ
from tpulab.base.ceilings import RENAMED_FLAGS
from tpulab.base.figures import PARALLEL, flat
from tpulab.base.errors import EXIT_USAGE, NO_SPACE, TpulabError, first_line, why_unwritten
from tpulab.base.events import PHASE_PREDICT, SCHEMA, STATUSES, Device, RunRecord, Summary, SweepRecord, Telemetry
from tpulab.base.noise import DEFAULT_FLOOR, SAME, UNCALIBRATED, Change, Floor, change
from tpulab.base.timing import Stats, median
from tpulab.base.home import home, traces
from tpulab.base.schema import checked, problem, read, scalars, words
from tpulab.engine.card import Card
from tpulab.engine.card import from_json as card_from_json
from tpulab.engine.card import Fleet, fleet_from_json
from tpulab.engine.floor import Calibration, key
from tpulab.engine.runindex import COLUMNS, RunFilter, RunRow, Wanted, derive, table_sql
from tpulab.machine.fingerprint import machine_key
from tpulab.workloads import registry

SCHEMA_VERSION = 8  # 2: sweeps; 3: records apart from their indexed columns; 4: profiles (the host gap indexed);
# 5: machine cards; 6: each run's flat row derived from the declarations (`row`); 7: fleets (`tpulab bench --ray`);
# 8: noise floors (`tpulab calibrate`); a record's steps and telemetry apart from the rest (`bulk`), its step times
# compact (`run_steps`), each run's intensity indexed (a roofline's points)
BUSY_TIMEOUT_S = 60  # how long a writer waits for another process's transaction
EXPORT_FORMAT = "tpulab-results"
MAX_IMPORT_BYTES = 64 * 2**20  # a file an import reads whole (an export of before, a run's --json): refused past it
HEADER_BYTES = 4096  # an export's first line, its header, is under 100 bytes: no more is read to recognise it
MAX_RECORD_BYTES = 64 * 2**20  # one line of an export of runs, one record: a run of 100,000 steps is about 10 MiB
COMPARED_BY_DESIGN = ("device", "shards", "backend")  # what a comparison across runtimes varies on purpose
USABLE = "status = 'finished' AND gflops_per_s > 0"  # a run an estimate may learn from
INDEXES = (
    "CREATE INDEX IF NOT EXISTS runs_started ON runs (started_at)",
    "CREATE INDEX IF NOT EXISTS runs_workload ON runs (workload, started_at)",
    "CREATE INDEX IF NOT EXISTS runs_sweep ON runs (sweep)",
    # The estimate's lookups: this configuration's nearest work, and this device's best rate.
    "CREATE INDEX IF NOT EXISTS runs_same ON runs (device_kind, workload, backend, dtype, configuration, flops_per_step, "
    f"started_at) WHERE {USABLE}",
    f"CREATE INDEX IF NOT EXISTS runs_work ON runs (device_kind, flops_per_step, gflops_per_s, started_at) WHERE {USABLE}",
    # A roofline's points: a device's newest runs whose intensity is known (`Store.on_roofline`).
    "CREATE INDEX IF NOT EXISTS runs_points ON runs (device_kind, started_at) WHERE intensity > 0 AND gflops_per_s > 0",
)
EVERY = RunFilter()
# SQLite's result codes (https://sqlite.org/rescode.html): its own words on a full disk are often "disk I/O error"
SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL = 8, 10, 13
IOERR_READING = (266, 522)  # SQLITE_IOERR_READ, SQLITE_IOERR_SHORT_READ: the one I/O error a read makes
ORDER = "ORDER BY runs.started_at DESC, runs.rowid DESC"  # newest first
BULK = ("steps", "telemetry")  # a record's arrays that grow with the run: kept apart in `run_data.bulk`
# A kept record whole: the rest's JSON object and its bulk's (an object of the BULK keys present, else NULL) joined
# into one, `{...rest..., "steps": [...], "telemetry": [...]}`, read by one parse.
WHOLE = "CASE WHEN bulk IS NULL THEN record ELSE substr(record, 1, length(record) - 1) || ',' || substr(bulk, 2) END"
STEPS_TABLE = "CREATE TABLE IF NOT EXISTS run_steps (id TEXT PRIMARY KEY, starts TEXT NOT NULL, seconds BLOB NOT NULL)"


class StoreError(TpulabError):
    """The store or a file cannot be used; the message names the path and the way out."""


class BadImport(StoreError):
    """A file that is not a tpulab export, or holds what cannot be imported: bad input (exit code 2)."""

    exit_code = EXIT_USAGE


class NotKept(StoreError):
    """An id that names no kept run (or several), or runs that cannot be compared: bad input (exit code 2)."""

    exit_code = EXIT_USAGE


def default_path(environ: Mapping[str, str] | None = None) -> Path:
    return home(environ) / "results.db"


@dataclass
class Exported:
    """An export's records, sweeps and machine cards as parsed JSON, each read as it is taken (an export of lines is
    streamed)."""

    records: Iterable[Any]
    sweeps: Iterable[Any]
    cards: Iterable[Any] = ()


@dataclass
class Imported:
    """What an import added (runs, sweeps, cards), and how many of its runs, sweeps and cards were already present."""

    runs: int
    sweeps: int
    present: int
    cards: int = 0


@dataclass
class Page:
    """One page of a listing, newest first; `after` continues it (None: nothing further)."""

    rows: list[RunRow]
    after: tuple[str, int] | None


class Store:
    """The results database at `path`, opened (and migrated) on first use; each call is one transaction."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._ready = False

    @contextmanager
    def _db(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except OSError as e:
            raise StoreError(f"cannot open the results database {self.path}: "
                             f"{why_unwritten(self.path, e.strerror or str(e), e.errno)}; "
                             "pass --db PATH or set TPULAB_HOME to a writable folder") from None
        except sqlite3.Error as e:
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
            raise self._fault(e) from None
        finally:
            con.close()

    def _fault(self, e: sqlite3.DatabaseError) -> StoreError:
        """A failed write (the disk full, a file size limit, no permission) said as one, naming its cause; only a
        database SQLite cannot read is called unreadable. Either way the transaction left what was kept as it was."""
        code = getattr(e, "sqlite_errorcode", 0)
        if code == SQLITE_FULL or code & 0xFF in (SQLITE_IOERR, SQLITE_READONLY) and code not in IOERR_READING:
            why = why_unwritten(self.path, str(e), errno.ENOSPC if code == SQLITE_FULL else None)
            free = "free some space there, or " if why == NO_SPACE else ""
            return StoreError(f"cannot write the results database {self.path}: {why}; nothing kept was changed: "
                              f"{free}pass --db OTHER_PATH")
        return StoreError(f"cannot read the results database {self.path}: {e}. It was left untouched: "
                          f"move it aside (mv {self.path} {self.path}.bak) or pass --db OTHER_PATH")

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
        if version < 2:
            con.execute("""CREATE TABLE IF NOT EXISTS sweeps (
                id TEXT PRIMARY KEY, workload TEXT NOT NULL, started_at TEXT NOT NULL, sweep TEXT NOT NULL)""")
        if version < 5:  # machine cards: each whole, as JSON (`tpulab.engine.card`); their runs are kept as runs
            con.execute("CREATE TABLE IF NOT EXISTS cards (id TEXT PRIMARY KEY, created_at TEXT NOT NULL, card TEXT NOT NULL)")
        if version < 7:  # fleets: each whole, as JSON, listing its nodes' cards (kept as cards) and the nodes without one
            con.execute("CREATE TABLE IF NOT EXISTS fleets (id TEXT PRIMARY KEY, created_at TEXT NOT NULL, fleet TEXT NOT NULL)")
        if version < 8:  # noise floors: the newest calibration per machine, backend and device kind, whole, as JSON
            con.execute("CREATE TABLE IF NOT EXISTS floors (key TEXT PRIMARY KEY, made_at TEXT NOT NULL, "
                        "calibration TEXT NOT NULL)")
            # Each record's steps and telemetry apart from the rest, and its step times compact: written by the
            # rebuild below (a record of before is split, and its step times derived, as it is indexed again).
            con.execute(STEPS_TABLE)
        if version < 3:  # the records move to run_data; runs keeps their columns
            _rebuild(con, "SELECT record, NULL FROM runs_old ORDER BY rowid", renamed=("runs",))
        elif version < 4 and "host_gap_share" not in _columns(con):  # no record of schema 3 has a profile
            con.execute("ALTER TABLE runs ADD COLUMN host_gap_share REAL")
        split = "bulk" in _columns(con, "run_data")
        if version >= 3 and (_columns(con) != list(COLUMNS) or version < 6 or not split):
            # RunRow gained or lost a column, or the flat rows theirs, or the records are whole in one column (before
            # schema 8): derive the index again from the records.
            _rebuild(con, f"SELECT d.record, {'d.bulk' if split else 'NULL'} FROM runs_old o JOIN run_data_old d "
                     "USING (id) ORDER BY o.rowid", renamed=("runs", "run_data"))
        for index in INDEXES:  # one added since this database was indexed is made now
            con.execute(index)
        if version < SCHEMA_VERSION:
            con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        con.execute("COMMIT")
        self._ready = True

    def save(self, record: RunRecord) -> None:
        with self._db(write=True) as con:
            _insert(con, record, record.to_json(), replace=True)

    # --- listings: indexed columns only ------------------------------------------------------------
    def page(self, filt: RunFilter = EVERY, limit: int | None = None,
             after: tuple[str, int] | None = None) -> Page:
        """Runs matching `filt`, newest first: `limit` of them (all when None), continuing from `after`."""
        where, args = filt.where()
        if after is not None:
            where += " AND (runs.started_at, runs.rowid) < (?, ?)"
            args = [*args, *after]
        sql = f"SELECT {', '.join(COLUMNS)}, rowid FROM runs WHERE {where} {ORDER}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._db() as con:
            found = con.execute(sql, args).fetchall()
        rows = [RunRow(*r[:-1]) for r in found]
        more = limit is not None and len(found) == limit
        return Page(rows, (found[-1][3], found[-1][-1]) if more and found else None)

    def count(self, filt: RunFilter = EVERY) -> int:
        where, args = filt.where()
        with self._db() as con:
            return int(con.execute(f"SELECT COUNT(*) FROM runs WHERE {where}", args).fetchone()[0])

    def listing_json(self, rows: list[RunRow]) -> list[dict[str, Any]]:
        """The flat JSON of these runs (`row()`), kept beside each record when it was saved."""
        with self._db() as con:
            found = dict(con.execute(f"SELECT id, row FROM run_data WHERE id IN ({','.join('?' * len(rows))})",
                                     [r.id for r in rows]).fetchall())
        return [json.loads(found[r.id]) for r in rows if r.id in found]

    def candidates(self, w: Wanted) -> list[RunRow]:
        """What an estimate can learn from, in one indexed query: this configuration's runs nearest in
        work per step (below and above, the newest of each), and this device's best rate among runs of
        similar work (the best of each distinct work per step, found by index: never a scan). Newest first."""
        if not w.flops > 0:
            return []
        lo, hi = w.flops / w.within * (1 - 1e-9), w.flops * w.within * (1 + 1e-9)
        device = f"{USABLE} AND device_kind = ?"
        same = f"{device} AND workload = ? AND backend = ? AND dtype IS ? AND configuration IS ?"
        config = [w.device, w.workload, w.backend, w.dtype, w.configuration]
        cols = ", ".join(COLUMNS)
        newest = "ORDER BY started_at DESC, rowid DESC LIMIT 1"
        fastest = "ORDER BY gflops_per_s DESC, started_at DESC, rowid DESC LIMIT 1"
        nearest = (f"SELECT * FROM (SELECT {cols}, rowid FROM runs WHERE {same} AND flops_per_step = "
                   f"(SELECT {{}}(flops_per_step) FROM runs WHERE {same} AND flops_per_step BETWEEN ? AND ?) {newest})")
        sql = (f"WITH RECURSIVE sizes(f) AS (SELECT MIN(flops_per_step) FROM runs WHERE {device} AND flops_per_step "
               f"BETWEEN ? AND ? UNION ALL SELECT (SELECT MIN(flops_per_step) FROM runs WHERE {device} AND "
               "flops_per_step > f AND flops_per_step <= ?) FROM sizes WHERE f IS NOT NULL), "
               f"best(id) AS (SELECT (SELECT rowid FROM runs WHERE {device} AND flops_per_step = f {fastest}) "
               "FROM sizes WHERE f IS NOT NULL) "
               f"SELECT * FROM (SELECT {cols}, rowid FROM runs WHERE rowid IN (SELECT id FROM best) {fastest})"
               f" UNION ALL {nearest.format('MAX')} UNION ALL {nearest.format('MIN')}")
        args = [w.device, lo, hi, w.device, hi, w.device,
                *config, *config, lo, w.flops, *config, *config, w.flops, hi]
        with self._db() as con:
            found = {r[0]: r for r in con.execute(sql, args)}
        ordered = sorted(found.values(), key=lambda r: (r[3], r[-1]), reverse=True)
        return [RunRow(*r[:-1]) for r in ordered]

    def on_roofline(self, device: Device, limit: int) -> list[RunRow]:
        """The newest `limit` runs on `device` (its kind and name, on any number of devices) whose intensity and
        GFLOP/s are known: a roofline's points, from the index alone (never a record)."""
        # A device's label is its kind, its name, then what its short label has after the kind (` x4`, `, 2 hosts...`).
        kind = device.kind.upper()
        with self._db() as con:  # the partial index runs_points, newest first
            found = con.execute(f"SELECT {', '.join(COLUMNS)} FROM runs WHERE device_kind = ? AND intensity > 0 AND "
                                "gflops_per_s > 0 AND device = ? || substr(device_short, ?) "
                                f"ORDER BY started_at DESC, rowid DESC LIMIT {int(limit)}",
                                (device.kind, f"{kind} {device.name}", len(kind) + 1)).fetchall()
        return [RunRow(*r) for r in found]

    # --- whole records: opened or exported ---------------------------------------------------------
    def records(self, filt: RunFilter = EVERY, light: bool = False) -> list[RunRecord]:
        """Runs matching `filt`, whole, newest first (for export: a listing reads `page`); with `light`, each without
        its steps and telemetry (`BULK`: left empty), which are most of a long run's record."""
        where, args = filt.where()
        with self._db() as con:
            found = con.execute(f"SELECT {'d.record' if light else WHOLE} FROM runs JOIN run_data d USING (id) "
                                f"WHERE {where} {ORDER}", args).fetchall()
        return [stored(r[0]) for r in found]

    def each_record(self, filt: RunFilter = EVERY) -> Iterator[RunRecord]:
        """Runs matching `filt`, whole, newest first, read a few at a time (an export of 100,000 runs)."""
        where, args = filt.where()
        with self._db() as con:
            cur = con.execute(f"SELECT {WHOLE} FROM runs JOIN run_data d USING (id) WHERE {where} {ORDER}", args)
            while batch := cur.fetchmany(200):
                yield from (stored(r[0]) for r in batch)

    def _by_prefix(self, table: str, column: str, wanted: str, listing: str) -> Any:
        """One row's JSON by its id or a unique prefix of it; the error says how to list them."""
        noun = "run" if table == "run_data" else table.removesuffix("s")
        prefix = wanted.lower()
        with self._db() as con:  # a range on the primary key: a lookup, never a scan of the records
            rows = con.execute(f"SELECT {column} FROM {table} WHERE id >= ? AND id < ?",
                               (prefix, prefix + "\U0010ffff")).fetchall()
        if not rows:
            raise NotKept(f"no {noun} {wanted!r} in {self.path}: `{listing}` lists them")
        if len(rows) > 1:
            raise NotKept(f"{wanted!r} matches {len(rows)} {noun}s: give more of the id")
        return rows[0][0]

    def get(self, run_id: str, light: bool = False) -> RunRecord:
        """A run by its id or a unique prefix of it; with `light`, without its steps and telemetry (`BULK`: left
        empty), which are most of a long run's record: what a comparison's table or a run's summary reads."""
        return stored(self._by_prefix("run_data", "record" if light else WHOLE, run_id, "tpulab results"))

    def timed_repeats(self, r: RunRecord) -> list[list[float]]:
        """`timed_repeats(r)` as kept when `r` was saved (`run_steps`), without reading its steps: what a comparison
        of light records (`get(..., light=True)`) takes its verdicts from. A record not kept is read itself."""
        import numpy as np

        with self._db() as con:
            found = con.execute("SELECT starts, seconds FROM run_steps WHERE id = ?", (r.id,)).fetchone()
        if found is None:
            return timed_repeats(r)
        xs = np.frombuffer(found[1], dtype="<f8").tolist()
        bounds = [*json.loads(found[0]), len(xs)]
        return [xs[a:b] for a, b in zip(bounds, bounds[1:])]

    def save_sweep(self, sweep: SweepRecord) -> None:
        """A sweep: its grid, its points' run ids and its findings (the runs are saved as runs)."""
        with self._db(write=True) as con:
            _insert_sweep(con, sweep.to_json(), replace=True)

    def sweeps(self) -> list[SweepRecord]:
        """All sweeps, newest first."""
        with self._db() as con:
            rows = con.execute("SELECT sweep FROM sweeps ORDER BY started_at DESC, rowid DESC").fetchall()
        return [SweepRecord.from_json(json.loads(r[0])) for r in rows]

    def get_sweep(self, sweep_id: str) -> SweepRecord:
        """A sweep by its id or a unique prefix of it."""
        return SweepRecord.from_json(json.loads(self._by_prefix("sweeps", "sweep", sweep_id, "tpulab results sweep")))

    def sweep_runs(self, sweep: SweepRecord) -> dict[str, RunRecord]:
        """The kept runs of a sweep's points, by id."""
        wanted = sweep.run_ids()
        with self._db() as con:
            rows = con.execute(f"SELECT {WHOLE} FROM run_data WHERE id IN ({','.join('?' * len(wanted))})",
                               wanted).fetchall()
        records = [stored(r[0]) for r in rows]
        return {r.id: r for r in records}

    def save_card(self, card: Card) -> None:
        """A machine card, whole (replacing one of the same id: a card is saved again as its entries finish)."""
        with self._db(write=True) as con:
            con.execute("INSERT OR REPLACE INTO cards VALUES (?, ?, ?)", (card.id, card.created_at,
                                                                         json.dumps(card.to_json())))

    def cards(self) -> list[Card]:
        """All kept cards, newest first."""
        with self._db() as con:
            rows = con.execute("SELECT card FROM cards ORDER BY created_at DESC, rowid DESC").fetchall()
        return [card_from_json(json.loads(r[0])) for r in rows]

    def get_card(self, card_id: str) -> Card:
        """A card by its id or a unique prefix of it."""
        return card_from_json(json.loads(self._by_prefix("cards", "card", card_id, "tpulab cards")))

    def save_fleet(self, fleet: Fleet) -> None:
        """A fleet, whole (replacing one of the same id: it is saved again as its nodes' cards come back)."""
        with self._db(write=True) as con:
            con.execute("INSERT OR REPLACE INTO fleets VALUES (?, ?, ?)", (fleet.id, fleet.created_at,
                                                                          json.dumps(fleet.to_json())))

    def fleets(self) -> list[Fleet]:
        """All kept fleets, newest first."""
        with self._db() as con:
            rows = con.execute("SELECT fleet FROM fleets ORDER BY created_at DESC, rowid DESC").fetchall()
        return [fleet_from_json(json.loads(r[0])) for r in rows]

    def get_fleet(self, fleet_id: str) -> Fleet:
        """A fleet by its id or a unique prefix of it."""
        return fleet_from_json(json.loads(self._by_prefix("fleets", "fleet", fleet_id, "tpulab cards fleet")))

    def save_calibration(self, c: Calibration) -> None:
        """A calibration, replacing the one kept for its machine, backend and device kind."""
        with self._db(write=True) as con:
            con.execute("INSERT OR REPLACE INTO floors VALUES (?, ?, ?)", (c.key, c.made_at, json.dumps(c.to_json())))

    def calibrations(self) -> list[Calibration]:
        """Every kept calibration, newest first."""
        with self._db() as con:
            rows = con.execute("SELECT calibration FROM floors ORDER BY made_at DESC").fetchall()
        return [Calibration.from_json(json.loads(r[0])) for r in rows]

    def floor_for(self, records: Iterable[RunRecord]) -> Floor:
        """The noise floor a comparison of `records` takes: the widest of their machines' calibrated floors (each
        record's machine, backend and device kind), or the uncalibrated default where any has none."""
        keys = {floor_key(r) for r in records}
        with self._db() as con:
            found = [con.execute("SELECT calibration FROM floors WHERE key = ?", (k,)).fetchone() for k in keys]
        if not keys or any(f is None for f in found):
            return UNCALIBRATED
        floor = max((Calibration.from_json(json.loads(f[0])).floor() for f in found), key=lambda f: f.spread)
        spans = [(timed_span(r), r.short_id) for r in records]
        short = min(((s, i) for s, i in spans if s is not None), default=None)
        if floor.span_s and short is not None and short[0] < floor.span_s / 2:
            return Floor(max(DEFAULT_FLOOR, floor.spread), f"not calibrated for so short a run: run {short[1]}'s steps "
                         f"lasted {short[0]:.2f} s, under half the {floor.span_s:.1f} s the floor was calibrated at; the "
                         "default", calibrated=False)
        return floor

    def import_records(self, exported: Exported) -> Imported:
        """All or nothing: each record, sweep and card is checked as it is read, inside one transaction that a bad one
        leaves uncommitted; a run, sweep or card already present (by its id) is left as it is, and counted apart."""
        runs = kept_sweeps = seen = 0
        with self._db(write=True) as con:
            for seen, r in enumerate(exported.records, 1):
                try:
                    record = imported(r)
                except ValueError as e:
                    rid = r.get("id") if isinstance(r, dict) else None
                    named = f" (id {rid})" if isinstance(rid, str) and len(rid) <= 64 and rid.isalnum() else ""
                    raise BadImport(f"record {seen}{named}: {e}; nothing was imported") from None
                runs += _insert(con, record, r, replace=False)
            sweeps = 0
            for sweeps, sw in enumerate(exported.sweeps, 1):
                why = validate_sweep(sw)
                if why:
                    raise BadImport(f"sweep {sweeps}: {why}; nothing was imported")
                kept_sweeps += _insert_sweep(con, sw, replace=False)
            cards = kept_cards = 0
            for cards, c in enumerate(exported.cards, 1):
                try:
                    card = card_from_json(c)
                except (ValueError, TypeError) as e:
                    raise BadImport(f"card {cards}: {first_line(str(e))}; nothing was imported") from None
                kept_cards += con.execute("INSERT OR IGNORE INTO cards VALUES (?, ?, ?)", (
                    card.id, card.created_at, json.dumps(card.to_json()))).rowcount
        return Imported(runs, kept_sweeps, seen - runs + sweeps - kept_sweeps + cards - kept_cards, kept_cards)

    # --- pruning -------------------------------------------------------------------------------------
    def prune(self, filt: RunFilter) -> tuple[int, int]:
        """Removes the runs matching `filt` (and sweeps left with no run), then gives the space back to the
        file system. Returns (runs removed, bytes reclaimed)."""
        before = self.size()
        where, args = filt.where()
        with self._db(write=True) as con:
            gone = [i for (i,) in con.execute(f"SELECT id FROM runs WHERE {where}", args)]
            con.execute(f"DELETE FROM run_data WHERE id IN (SELECT id FROM runs WHERE {where})", args)
            con.execute(f"DELETE FROM run_steps WHERE id IN (SELECT id FROM runs WHERE {where})", args)
            removed = con.execute(f"DELETE FROM runs WHERE {where}", args).rowcount
            for sweep_id, text in con.execute("SELECT id, sweep FROM sweeps").fetchall():
                ids = [i for p in json.loads(text)["points"] for i in p["runs"]]
                kept = con.execute(f"SELECT COUNT(*) FROM runs WHERE id IN ({','.join('?' * len(ids))})",
                                   ids).fetchone()[0] if ids else 0
                if not kept:
                    con.execute("DELETE FROM sweeps WHERE id = ?", (sweep_id,))
        try:
            con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            try:
                con.execute("VACUUM")
                con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                con.close()
        except sqlite3.Error as e:
            raise StoreError(f"removed {removed} run(s) from {self.path}, but could not reclaim the space "
                             f"({e}): run `tpulab results prune` again when no other tpulab uses it") from None
        for run_id in gone:  # a profiled run's raw trace goes with it (kept by its id under tpulab's home)
            shutil.rmtree(traces() / run_id, ignore_errors=True)
        return removed, max(0, before - self.size())

    def size(self) -> int:
        """Bytes the database takes on disk, its write-ahead log included."""
        return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())


def _columns(con: sqlite3.Connection, table: str = "runs") -> list[str]:
    return [c[1] for c in con.execute(f"PRAGMA table_info({table})")]


def _rebuild(con: sqlite3.Connection, source: str, renamed: tuple[str, ...]) -> None:
    """The runs table (and run_data, and run_steps) made afresh from the records `source` selects (each its JSON and
    its bulk's, or NULL where it is whole), in their order."""
    for table in renamed:
        con.execute(f"ALTER TABLE {table} RENAME TO {table}_old")
    for index in ("runs_started", "runs_workload", "runs_sweep", "runs_same", "runs_work", "runs_points"):
        con.execute(f"DROP INDEX IF EXISTS {index}")
    con.execute(table_sql("runs"))
    con.execute("CREATE TABLE IF NOT EXISTS run_data (id TEXT PRIMARY KEY, row TEXT NOT NULL, record TEXT NOT NULL, "
                "bulk TEXT)")
    con.execute("DROP TABLE IF EXISTS run_steps")
    con.execute(STEPS_TABLE)
    for text, bulk in _stream(con, source):
        data: Any = None
        try:
            data = json.loads(text)
            if bulk is not None:
                data.update(json.loads(bulk))
            record = load_record(data)
        except (json.JSONDecodeError, TypeError, ValueError, KeyError, AttributeError) as e:
            con.execute("ROLLBACK")
            rid = data.get("id") if isinstance(data, dict) else "?"
            raise StoreError(f"cannot index run {rid}: it is not a tpulab record ({e}); the database was left as "
                             "it was: move it aside or pass --db OTHER_PATH") from None
        _insert(con, record, data, replace=True)
    for table in renamed:
        con.execute(f"DROP TABLE {table}_old")


def _stream(con: sqlite3.Connection, source: str) -> Iterator[tuple[str, str | None]]:
    """The source's rows a few at a time: a large store is never read whole into memory."""
    cur = con.execute(source)
    while batch := cur.fetchmany(500):
        yield from batch


def _insert(con: sqlite3.Connection, record: RunRecord, data: dict[str, Any], replace: bool) -> int:
    """One run: its indexed columns, derived from the record, the record itself (`data`, as saved or imported: its
    `BULK` apart from the rest), and its steady step times (`run_steps`)."""
    verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
    values = derive(record)
    cur = con.execute(f"{verb} INTO runs ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                      list(values.values()))
    if cur.rowcount:
        rest = {k: v for k, v in data.items() if k not in BULK}
        bulk = {k: data[k] for k in BULK if k in data}
        con.execute("INSERT OR REPLACE INTO run_data VALUES (?, ?, ?, ?)",
                    (record.id, json.dumps(row(record, values)), json.dumps(rest), json.dumps(bulk) if bulk else None))
        con.execute("INSERT OR REPLACE INTO run_steps VALUES (?, ?, ?)", (record.id, *compact(record)))
    return cur.rowcount


def compact(record: RunRecord) -> tuple[str, bytes]:
    """A record's `timed_repeats` as `run_steps` keeps them: where each fresh process's times begin (a JSON list of
    offsets), and every time in turn as little-endian float64s (the values its steps hold, to the bit)."""
    import numpy as np

    repeats = timed_repeats(record)
    starts = [0]
    for r in repeats[:-1]:
        starts.append(starts[-1] + len(r))
    seconds = [x for r in repeats for x in r]
    return json.dumps(starts), np.asarray(seconds, dtype="<f8").tobytes()


def _insert_sweep(con: sqlite3.Connection, sweep: dict[str, Any], replace: bool) -> int:
    verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
    return con.execute(f"{verb} INTO sweeps (id, workload, started_at, sweep) VALUES (?, ?, ?, ?)",
                       (sweep["id"], sweep["workload"], sweep["started_at"], json.dumps(sweep))).rowcount


OWN_PARTS = ("decode",)  # schema 4 kept a workload's own figures nested under its name: they read as `figures`


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A stored or imported record as this version writes it: one from before backends were named ran on the
    article's framework; one from before a figure above a measured ceiling was called that ceiling measured low has
    its flags renamed; one from schema 4 has its workload's own part read as its figures, flat."""
    if not data.get("backend"):
        legacy = article()
        data = {**data, "backend": legacy.name if legacy else ""}
    summary = data.get("summary")
    if not isinstance(summary, dict):
        return data
    flags = summary.get("flags") or []
    if any(isinstance(f, dict) and f.get("code") in RENAMED_FLAGS for f in flags):
        renamed = [{**f, "code": RENAMED_FLAGS[f["code"]]} if isinstance(f, dict) and f.get("code") in RENAMED_FLAGS
                   else f for f in flags]
        summary = {**summary, "flags": renamed}
    if own := [k for k in OWN_PARTS if isinstance(summary.get(k), dict)]:
        kept = figures if isinstance(figures := summary.get("figures"), dict) else {}
        summary = {**{k: v for k, v in summary.items() if k not in own},
                   "figures": {**{n: v for k in own for n, v in flat(summary[k]).items()}, **kept}}
    return {**data, "summary": summary}


def load_record(data: dict[str, Any]) -> RunRecord:
    """A stored or imported record, read as this version writes it (`upgrade`)."""
    return RunRecord.from_json(upgrade(data))


def stored(text: str) -> RunRecord:
    """A kept record from its JSON text, read at once; one an older tpulab wrote, through `upgrade`. One this
    tpulab cannot read (a field it declares otherwise) is a `StoreError` in one line, never a traceback."""
    try:
        record = read(RunRecord, text)
        return record if record.schema >= SCHEMA and record.backend else load_record(json.loads(text))
    except ValueError as e:  # pydantic's ValidationError is one
        from pydantic import ValidationError

        found = words(e) if isinstance(e, ValidationError) else first_line(str(e))
        raise StoreError(f"a kept run cannot be read by this tpulab ({found}); `tpulab results export` keeps the "
                         "others") from None


def imported(r: Any) -> RunRecord:
    """A record from someone else's file, every field as its dataclass declares it (`tpulab.base.schema`), read as
    this version writes it (`upgrade`); a `ValueError` in one line says why it is not one."""
    if not isinstance(r, dict):
        raise ValueError(f"expected an object, found {type(r).__name__}")
    record = checked(upgrade(r), RunRecord)
    if not record.id or not all(c in "0123456789abcdef" for c in record.id):
        raise ValueError("'id' should be hexadecimal")
    if record.status not in STATUSES:
        raise ValueError(f"'status' should be one of {', '.join(STATUSES)}")
    return record


def validate_sweep(sw: Any) -> str | None:
    """Why a sweep cannot be imported, or None: every field as its dataclass declares it (`tpulab.base.schema`)."""
    return problem(sw, SweepRecord)


# --- files ----------------------------------------------------------------------------------
def export_json(records: Iterable[RunRecord], path: Path, sweeps: Iterable[SweepRecord] = (),
                cards: Iterable[Card] = ()) -> int:
    """An export as JSON lines: a header naming the format, then one record a line, one sweep a line, one machine
    card a line (as kept: a history moved to another machine keeps its cards whole); an import reads it a line at a
    time, so it round-trips at any size. Returns the runs written."""
    n = 0
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps({"format": EXPORT_FORMAT, "schema": SCHEMA_VERSION, "lines": True}) + "\n")
        for r in records:
            f.write(json.dumps({"record": r.to_json()}) + "\n")
            n += 1
        for sw in sweeps:
            f.write(json.dumps({"sweep": sw.to_json()}) + "\n")
        for c in cards:
            f.write(json.dumps({"card": c.to_json()}) + "\n")
    return n


def _metric_columns() -> list[tuple[str, str]]:
    """(column, metric key) for every metric any workload declares, training's then validation's."""
    seen = {m.label.replace(" ", "_"): m.key for w in registry().values() for m in w.metrics}
    return [*seen.items(), *((f"val_{label}", f"val_{key}") for label, key in seen.items())]


def _figure_columns() -> list[str]:
    """Every figure any workload declares (`Workload.figures`), in declared order, then a run's over several processes
    (`PARALLEL`): a column each."""
    return list(dict.fromkeys([*(f.name for w in registry().values() for f in w.figures), *(f.name for f in PARALLEL)]))


def row(r: RunRecord, index: dict[str, Any] | None = None) -> dict[str, Any]:
    """A run flat enough for a spreadsheet or a JSON listing, every column derived from a declaration: the index's
    (`RunRow`), the record's, the summary's and the step statistics' scalar fields, each declared metric and figure by its name,
    the telemetry's (`telemetry_` and its field), and what identifies the model and the run's settings."""
    s = r.summary
    metrics = {**(s.final_metrics or {}), **(s.validation or {})}
    flat = dict(index) if index is not None else derive(r)  # (`_insert` has derived them already)
    flat |= {k: v for k, v in scalars(RunRecord, r).items() if k not in flat}
    flat |= {k: v for k, v in scalars(Summary, s).items() if k not in flat}
    flat |= scalars(Stats, s.step_seconds, "step_") | scalars(Stats, s.inference_step_seconds, "inference_step_")
    flat |= {column: metrics.get(key) for column, key in _metric_columns()}
    flat |= {name: s.figures.get(name) for name in _figure_columns()}
    flat |= scalars(Telemetry, s.telemetry, "telemetry_")
    model = r.model or {}
    return {**flat, "telemetry_verdicts": [f.code for f in s.telemetry.verdicts] if s.telemetry else [],
            "model_sha256": model.get("sha256"), "model_parameters": model.get("parameters"),
            "flags": [f.code for f in s.flags], "params": r.params}


def csv_row(r: RunRecord) -> dict[str, Any]:
    out = row(r)
    out["flags"] = ";".join(out["flags"])
    out["telemetry_verdicts"] = ";".join(out["telemetry_verdicts"])
    out["params"] = json.dumps(out["params"], sort_keys=True)
    return out


def export_csv(records: list[RunRecord], path: Path) -> None:
    columns = list(row(records[0]) if records else ())
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        w.writerows(csv_row(r) for r in records)


def read_export(path: Path) -> Exported:
    """The records and sweeps of an export (`results export`: lines, read as they are taken; or the one document an
    earlier tpulab wrote), or of a run's `--json` output (its result line): a `StoreError` in one line for anything
    else, before anything is imported."""
    try:
        with path.open("rb") as f:
            head = f.readline(HEADER_BYTES)
    except OSError as e:
        raise BadImport(f"cannot read {path}: {e.strerror}") from None
    try:
        header = json.loads(head)
    except (ValueError, RecursionError):
        header = None
    if isinstance(header, dict) and header.get("format") == EXPORT_FORMAT and header.get("lines"):
        lines = _Lines(path)
        return Exported(_taken(lines, "record"), _taken(lines, "sweep"), _taken(lines, "card"))
    return _whole(path)


KINDS = ("record", "sweep", "card")  # an export's lines, in this order: a sweep names runs, a card its runs


class _Lines:
    """An export's lines after its header, read once, in order: records first, then sweeps, then cards."""

    def __init__(self, path: Path) -> None:
        self.path, self.number = path, 1
        self.pending: dict[str, Any] | None = None  # a line read but not yet taken (the first sweep, by the records)
        self.lines = self._read()

    def _read(self) -> Iterator[dict[str, Any]]:
        with self.path.open("rb") as f:
            f.readline(HEADER_BYTES)
            while line := f.readline(MAX_RECORD_BYTES + 1):
                self.number += 1
                if len(line) > MAX_RECORD_BYTES and not line.endswith(b"\n"):
                    raise BadImport(f"{self.path}, line {self.number}: more than the {MAX_RECORD_BYTES // 2**20} MiB "
                                    "one record may hold; nothing was imported")
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except (ValueError, RecursionError) as e:
                    why = "it nests too deep" if isinstance(e, RecursionError) else first_line(str(e))
                    raise BadImport(f"{self.path}, line {self.number}: not JSON ({why}); nothing was imported") from None
                if not (isinstance(item, dict) and len(item) == 1 and next(iter(item)) in KINDS):
                    raise BadImport(f"{self.path}, line {self.number}: expected {{\"record\": ...}}, "
                                    "{\"sweep\": ...} or {\"card\": ...}; nothing was imported")
                yield item


def _taken(lines: _Lines, kind: str) -> Iterator[Any]:
    """The lines of one kind, in order (`KINDS`); a line of an earlier kind after this kind's began is refused
    (sweeps and cards name runs imported before them)."""
    while True:
        if lines.pending is None:
            lines.pending = next(lines.lines, None)
        item = lines.pending
        if item is None:
            return
        found = next(iter(item))
        if found != kind:
            if KINDS.index(found) < KINDS.index(kind):
                raise BadImport(f"{lines.path}, line {lines.number}: a {found} after the {kind}s; nothing was imported")
            return
        lines.pending = None
        yield item[kind]


def _whole(path: Path) -> Exported:
    """An export written as one document (before exports were lines), or a run's `--json` output: read whole."""
    try:
        size = path.stat().st_size
        if size > MAX_IMPORT_BYTES:
            raise BadImport(f"{path} is {size / 2**20:.0f} MiB, more than the {MAX_IMPORT_BYTES // 2**20} MiB an "
                             "import reads of a file that is not an export of lines: export it again with this "
                             "tpulab (`tpulab results export`); nothing was imported")
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise BadImport(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise BadImport(f"{path} is not a tpulab JSON export ({e}); nothing was imported") from None
    try:
        data = _parse(text)
    except (ValueError, RecursionError) as e:  # a JSONDecodeError is a ValueError, as a 5,000-digit number is
        why = "it nests too deep" if isinstance(e, RecursionError) else first_line(str(e))
        raise BadImport(f"{path} is not a tpulab JSON export ({why}); CSV exports are for spreadsheets and "
                         "cannot be imported; nothing was imported") from None
    if isinstance(data, dict) and data.get("format") == EXPORT_FORMAT and isinstance(data.get("records"), list):
        sweeps, cards = data.get("sweeps", []), data.get("cards", [])
        for name, value in (("sweeps", sweeps), ("cards", cards)):
            if not isinstance(value, list):
                raise BadImport(f"{path}: '{name}' should be a list; nothing was imported")
        return Exported(data["records"], sweeps, cards)
    if isinstance(data, list):
        return Exported(data, [])
    raise BadImport(f"{path} is not a tpulab export (no 'records' list); nothing was imported")


def _parse(text: str) -> Any:
    """One JSON document; else JSON lines, a run's `--json` output, whose result lines are its records.
    (NaN is read as Python's json writes it; which fields may hold it is `validate`'s to say.)"""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg != "Extra data":
            raise
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    results = [{k: v for k, v in d.items() if k != "event"} for d in lines
               if isinstance(d, dict) and d.get("event") == "result"]
    if not results:
        raise ValueError("JSON lines without a run's result line")
    return results


# --- comparison -----------------------------------------------------------------------------
@dataclass
class Comparison:
    """Runs side by side; speedups against the first, by time or by a rate (`tpulab.base.basis`)."""

    workload: str
    records: list[RunRecord]
    speedups: list[float | None]
    by: str  # basis.TIME: the same work per step, times compared; else the rate compared (GFLOP/s, examples/s)
    header: str
    warnings: list[str]
    changes: list[Change | None] = field(default_factory=list)  # each run against the first, from both sides' steps


def timed(r: RunRecord, stats: str = "step_seconds") -> list[float]:
    """The steady step times a run's `stats` (its steps', or `inference_step_seconds`) came from, in order ([] where
    the kept steps do not give them: a workload tpulab does not know, or one whose figure is not its steps')."""
    w = registry().get(r.workload)
    xs = w.timed_seconds(r.steps, PHASE_PREDICT if stats == "inference_step_seconds" else "") if w is not None else []
    kept = getattr(r.summary, stats, None)
    same = kept is not None and len(xs) == kept.count and math.isclose(median(xs) or 0.0, kept.median, rel_tol=1e-9)
    return xs if same else []


def timed_repeats(r: RunRecord) -> list[list[float]]:
    """`timed`, each fresh process's steps apart (a run of `--repeat N`: N lists; else one)."""
    flat = timed(r)
    w = registry().get(r.workload)
    if w is None or not r.repeats:
        return [flat]
    split = w.timed_repeats(r.steps, r.repeats)
    return split if sum(map(len, split)) == len(flat) else [flat]


def timed_span(r: RunRecord) -> float | None:
    """How long a run's steady steps lasted, in each of its processes (None: no steady step)."""
    s = r.summary.step_seconds
    return s.mean * s.count / max(1, len(r.repeats)) if s is not None else None


def floor_key(r: RunRecord) -> str:
    """The key of the noise floor a record's comparison reads: its machine, backend and device kind."""
    return key(machine_key(r.runtime), r.backend, r.device.kind if r.device else "cpu")


Timings = Callable[[RunRecord], list[list[float]]]  # a run's steady step times, each fresh process's apart


def changes(records: list[RunRecord], values: list[float | None], by: str,
            floor: Floor = UNCALIBRATED, timings: Timings = timed_repeats) -> list[Change | None]:
    """Each run against the first, from both sides' step times (each fresh process's apart, where a run repeated):
    the speedup's interval and its verdict beyond `floor`'s threshold for their processes. By a rate, the runs did
    different work per step: the ratio of their times is scaled by the ratio of their work. `timings` gives each
    run's times: read from its steps, or kept apart (`Store.timed_repeats`, for records read without them)."""
    base = records[0]
    base_repeats = timings(base)
    out: list[Change | None] = [None]
    for r, v in zip(records[1:], values[1:]):
        scale = 1.0 if by == TIME else (v or 0.0) * (r.median or 0.0) / ((values[0] or 0.0) * (base.median or 0.0) or 1.0)
        other = timings(r)
        found = change([], [], scale, base_repeats=base_repeats, other_repeats=other, floor=floor) if scale > 0 else None
        beside = untrusted([base, r])
        if found is not None and found.word != SAME and beside:
            found = withheld(found, f"no verdict beside a machine that was not itself: run {' and '.join(beside)} "
                                    "was disturbed or the machine moved (its flags say how)")
        out.append(found)
    return out


UNTRUSTED = ("disturbed", "machine-moved")  # a run's flags that say its figures are not this machine's alone


def untrusted(records: Iterable[RunRecord]) -> list[str]:
    """The short ids of the runs whose flags say their figures are not this machine's alone."""
    return [r.short_id for r in records if any(f.code in UNTRUSTED for f in r.summary.flags)]


def withheld(c: Change, why: str) -> Change:
    """`c` with its verdict withheld: no difference detected, and why (the interval stays, as measured)."""
    return replace(c, word=SAME, why=f"{why}; {c.why}")


def disturbed(records: list[RunRecord]) -> list[str]:
    """The runs that were timed while other work used the machine, each with its load."""
    return [f"run {r.short_id} was disturbed: {f.message}" for r in records for f in r.summary.flags
            if f.code == "disturbed"]


def compare(records: list[RunRecord], across_workloads: bool = False, floor: Floor = UNCALIBRATED,
            timings: Timings = timed_repeats) -> Comparison:
    """Like with like: wall-time ratios only when every run did the same work per step.

    When the work differs (another batch or shape), a ratio of times says nothing; the runs are
    compared by what they achieved per second instead (GFLOP/s, else examples/s), and the header says so.
    Runs of different workloads (your own model against the article's CNN) only with `across_workloads`:
    by GFLOP/s when every run's work is known, else by examples/s, each having done its own work.
    `floor`: the machines' noise floor (`Store.floor_for`), whose threshold each verdict takes. `timings`: each
    run's step times (`changes`); records read without their steps (`Store.get(..., light=True)`) take the store's
    (`Store.timed_repeats`). Nothing else here reads a step.
    """
    if len(records) < 2:
        raise NotKept(f"compare needs at least two runs (got {len(records)})")
    workloads = {r.workload for r in records}
    mixed = len(workloads) > 1
    if mixed and not across_workloads:
        raise NotKept(f"compare runs of one workload (found {', '.join(sorted(workloads))})")
    found = basis([Work(r.summary.flops_per_step, r.batch, f"{r.workload} {model_key(r) or ''}") for r in records])
    by = found.by
    if by == TIME:
        header = "speedup = the first run's median time / this run's"
        values = [1 / m if m else None for m in (r.median for r in records)]
    else:
        header = f"{found.why}: speedup = this run's {by} / the first run's"
        values = [r.summary.gflops_per_s if by == GFLOPS else r.summary.examples_per_s for r in records]
    base = values[0]
    speedups = [v / base if v and base and math.isfinite(v / base) else None for v in values]
    found_changes = changes(records, values, by, floor, timings)
    warnings = [differ(k, [r.params.get(k) for r in records])
                for k in differing(records) if k not in COMPARED_BY_DESIGN and not mixed]
    warnings += [f"workloads differ: {' vs '.join(r.workload for r in records)}"] if mixed else []
    warnings += [f"run {r.short_id} is {r.status}: its figures cover only what completed"
                 for r in records if r.status != "finished"]
    warnings += [f"run {r.short_id} used synthetic data" for r in records if r.synthetic]
    warnings += disturbed(records)
    if len({r.summary.cache_hit for r in records if r.summary.cache_hit is not None}) > 1:
        warnings.append("first calls differ in kind: " + ", ".join(
            f"{r.short_id} {'compiled (cache)' if r.summary.cache_hit else 'compiled'}"
            for r in records if r.summary.cache_hit is not None))
    if len({model_key(r) for r in records}) > 1:
        warnings.append("the models differ: " + " vs ".join(model_key(r) or "-" for r in records))
    name = " vs ".join(sorted(workloads)) if mixed else records[0].workload
    verdict = f"; faster or slower beyond the noise floor ±{floor.spread:.0%} ({floor.source})"
    return Comparison(name, list(records), speedups, by, f"{name}: {header}{verdict}", warnings, found_changes)


def model_key(r: RunRecord) -> str | None:
    """What makes a user's model that model: its name and the hash of its file (None for built-in workloads)."""
    return f"{r.model.get('name')}@{r.model.get('sha256')}" if r.model else None


def differing(records: Iterable[RunRecord]) -> list[str]:
    records = list(records)
    keys = sorted({k for r in records for k in r.params})
    return [k for k in keys if len({json.dumps(r.params.get(k)) for r in records}) > 1]
