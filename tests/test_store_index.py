"""The store's index: the migration from schema 2, paging, every filter, prune, the estimate's one query,
and the listings at 80 columns. Real SQLite, the real command."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from tpulab.base.events import Device, Profile, RunRecord, SweepRecord
from tpulab.base.home import traces
from tpulab.engine.estimate import SIMILAR_WORK, estimate, wanted
from tpulab.engine.runindex import COLUMNS, FilterError, RunFilter, RunRow, derive, make_filter, parse_filter
from tpulab.base.basis import TIME
from tpulab.base.noise import SAME, SLOWER, Floor
from tpulab.engine.store import BULK, SCHEMA_VERSION, Store, compare, timed_repeats
from tpulab.engine.store import row as row_of
from tpulab.machine.detect import detect
from tpulab.workloads import registry

from .helpers import EIGHT_CPUS, make_record, run_cli

DAY0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def dated(record: RunRecord, day: int) -> RunRecord:
    record.started_at = (DAY0 + timedelta(days=day)).isoformat(timespec="seconds")
    return record


def runs(n: int) -> list[RunRecord]:
    """`n` runs, one a day, oldest first: every third with jax, every fifth cancelled."""
    report = detect()
    return [dated(make_record(median=0.1 + i / 100, backend="jax" if i % 3 == 0 else "tensorflow",
                              status="cancelled" if i % 5 == 0 else "finished", report=report), i) for i in range(n)]


def history(store: Store, n: int) -> list[RunRecord]:
    records = runs(n)
    for r in records:
        store.save(r)
    return records


# --- migration ----------------------------------------------------------------------------------
def schema_2_db(path, records: list[RunRecord], sweep: dict) -> None:
    """A database as tpulab wrote it before the index: the record JSON in `runs`, schema 2 in meta."""
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        con.execute("INSERT INTO meta VALUES ('schema_version', '2')")
        con.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, workload TEXT NOT NULL, status TEXT NOT NULL, "
                    "started_at TEXT NOT NULL, record TEXT NOT NULL)")
        con.execute("CREATE INDEX runs_started ON runs (started_at)")
        con.execute("CREATE TABLE sweeps (id TEXT PRIMARY KEY, workload TEXT NOT NULL, started_at TEXT NOT NULL, "
                    "sweep TEXT NOT NULL)")
        for r in records:
            con.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                        (r.id, r.workload, r.status, r.started_at, json.dumps(r.to_json())))
        con.execute("INSERT INTO sweeps VALUES (?, ?, ?, ?)",
                    (sweep["id"], sweep["workload"], sweep["started_at"], json.dumps(sweep)))


def test_a_schema_2_store_is_indexed_and_keeps_every_record(tmp_path):
    path = tmp_path / "old.db"
    records = [dated(make_record(median=0.5), 1), dated(make_record(2, 0.25, backend="jax"), 2),
               dated(make_record(status="failed"), 2)]  # the last two started at the same second
    sweep = {"id": "5eed" * 8, "workload": "conv", "started_at": records[1].started_at, "status": "finished",
             "axes": {"shards": [2]}, "base": {}, "steps": 3, "points": [{"values": {"shards": 2},
                                                                          "runs": [records[1].id]}]}
    schema_2_db(path, records, sweep)
    store = Store(path)
    page = store.page()
    assert [r.id for r in page.rows] == [records[2].id, records[1].id, records[0].id]  # newest, then last saved
    assert page.rows[1] == RunRow.of(records[1]) and page.rows[1].backend == "jax" and page.rows[1].shards == 2
    assert page.rows[1].median_s == pytest.approx(0.25) and page.rows[2].device_kind == "cpu"
    assert all(store.get(r.id) == r for r in records)  # the records themselves, unchanged
    assert [s.to_json() for s in store.sweeps()] == [SweepRecord.from_json(sweep).to_json()]
    assert set(store.sweep_runs(store.sweeps()[0])) == {records[1].id}
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        assert [c[1] for c in con.execute("PRAGMA table_info(runs)")] == list(COLUMNS)  # no JSON in the listing
        indexes = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {"runs_started", "runs_same", "runs_work"} <= indexes
    assert Store(path).count() == 3  # opened again: nothing migrates twice


def test_a_schema_3_store_opens_as_the_current_schema_and_reads_its_records(tmp_path):
    """Schema 4 adds the profile (and a workload's figures) to the summary and the host gap to the index: a schema-3
    database gains the column, its records read back as they were written, with no profile and no figures."""
    path = tmp_path / "three.db"
    records = [dated(make_record(median=0.5), 1), dated(make_record(2, 0.25, backend="jax"), 2)]
    Store(path).page()  # the tables, as this tpulab makes them; then taken back to what schema 3 wrote
    with sqlite3.connect(path) as con:
        con.execute("ALTER TABLE runs DROP COLUMN host_gap_share")
        con.execute("DROP INDEX runs_points")
        con.execute("ALTER TABLE runs DROP COLUMN intensity")  # schema 8's
        con.execute("ALTER TABLE run_data DROP COLUMN bulk")  # schema 8's: before, each record whole in `record`
        con.execute("DROP TABLE run_steps")
        con.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
        columns = [c[1] for c in con.execute("PRAGMA table_info(runs)")]
        for r in records:
            old = r.to_json()
            old["schema"] = 3
            del old["summary"]["profile"], old["summary"]["figures"]
            row = {k: v for k, v in derive(r).items() if k in columns}
            con.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
            con.execute("INSERT INTO run_data VALUES (?, ?, ?)", (r.id, "{}", json.dumps(old)))
    store = Store(path)
    got = [store.get(r.id) for r in records]
    assert [g.schema for g in got] == [3, 3] and [g.summary.median for g in got] == [0.5, 0.25]
    assert all(g.summary.profile is None and g.summary.figures == {} for g in got)
    assert [r.host_gap_share for r in store.page().rows] == [None, None]
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        assert [c[1] for c in con.execute("PRAGMA table_info(runs)")] == list(COLUMNS)
    profiled = make_record(profile=Profile(steps=3, step_seconds=0.02, host_gap=0.005, host_gap_share=0.25))
    store.save(profiled)
    assert store.page(limit=1).rows[0].host_gap_share == 0.25


def test_pruning_a_profiled_run_removes_its_trace(store):
    """A profiled run's raw trace lies under tpulab's home, named by its id: it goes when the run does, and
    only its (a kept sweep's runs keep theirs)."""
    kept, pruned, swept = dated(make_record(), 40), dated(make_record(), 1), dated(make_record(), 41)
    for r in (kept, pruned, swept):
        store.save(r)
        (traces() / r.id / "plugins").mkdir(parents=True)
        (traces() / r.id / "plugins" / "host.xplane.pb").write_bytes(b"trace")
    store.save_sweep(SweepRecord.from_json({"id": "5eed" * 8, "workload": "conv", "started_at": swept.started_at,
                                            "status": "finished", "axes": {"shards": [1]}, "base": {}, "steps": 3,
                                            "points": [{"values": {"shards": 1}, "runs": [swept.id]}]}))
    assert store.prune(make_filter(before="2026-01-10"))[0] == 1
    assert not (traces() / pruned.id).exists()
    assert all((traces() / r.id / "plugins" / "host.xplane.pb").exists() for r in (kept, swept))


def test_a_new_column_is_derived_again_from_the_records(store, db):
    """RunRow gaining a column re-derives the index from the records, keeping their order."""
    records = history(store, 4)
    with sqlite3.connect(db) as con:
        con.execute("ALTER TABLE runs DROP COLUMN compile_s")  # as if compile_s were the new line
    rows = Store(db).page().rows
    assert [r.id for r in rows] == [r.id for r in reversed(records)]
    assert all(r.compile_s == 2.0 for r in rows)
    assert [Store(db).get(r.id) for r in records] == records  # each whole again, its steps kept apart as they were
    assert [Store(db).timed_repeats(r) for r in records] == [timed_repeats(r) for r in records]


STEADY = [0.01 * (1 + 0.05 * ((i * 7919) % 13) / 13) for i in range(60)]  # 60 steps that vary, none alike


def repeated(times: list[float], processes: int = 2, **made) -> RunRecord:
    """A record whose steps came from `processes` fresh processes (`--repeat`): where each one's steps begin."""
    r = make_record(steps=times, **made)
    r.repeats = [i * len(r.steps) // processes for i in range(processes)]
    assert len(timed_repeats(r)) == processes
    return r


def test_a_schema_7_store_keeps_its_records_split_and_their_step_times_compact(tmp_path):
    """Schema 8 keeps a record's steps and telemetry apart from the rest and its steady step times compact, and
    indexes its intensity: a schema-7 database's records are split as it opens, each read back whole as written,
    without its steps where asked, and its step times as its steps give them, each process's apart."""
    path = tmp_path / "seven.db"
    records = [dated(make_record(steps=STEADY), 1), dated(repeated([x * 1.2 for x in STEADY], backend="jax"), 2),
               dated(make_record(status="failed"), 3)]
    records[0].summary.intensity = 2.5
    Store(path).page()  # the tables, as this tpulab makes them; then taken back to what schema 7 wrote
    with sqlite3.connect(path) as con:
        con.execute("DROP INDEX runs_points")
        con.execute("ALTER TABLE runs DROP COLUMN intensity")
        con.execute("ALTER TABLE run_data DROP COLUMN bulk")
        con.execute("DROP TABLE run_steps")
        con.execute("DROP TABLE floors")
        con.execute("UPDATE meta SET value='7' WHERE key='schema_version'")
        columns = [c[1] for c in con.execute("PRAGMA table_info(runs)")]
        for r in records:
            row = {k: v for k, v in derive(r).items() if k in columns}
            con.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
            con.execute("INSERT INTO run_data VALUES (?, ?, ?)", (r.id, json.dumps(row_of(r)), json.dumps(r.to_json())))
    store = Store(path)
    assert [store.get(r.id) for r in records] == records  # whole, as written
    assert [store.get(r.id, light=True) for r in records] == [replace(r, steps=[], telemetry=[]) for r in records]
    assert [store.timed_repeats(r) for r in records] == [timed_repeats(r) for r in records]
    assert [len(store.timed_repeats(r)) for r in records] == [1, 2, 1] and store.timed_repeats(records[0]) == [STEADY]
    assert {r.id: r.intensity for r in store.page().rows} == {records[0].id: 2.5, records[1].id: None, records[2].id: None}
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        assert [c[1] for c in con.execute("PRAGMA table_info(runs)")] == list(COLUMNS)
        assert [c[1] for c in con.execute("PRAGMA table_info(run_data)")] == ["id", "row", "record", "bulk"]
        for rest, bulk in con.execute("SELECT record, bulk FROM run_data"):
            assert set(BULK).isdisjoint(json.loads(rest)) and set(json.loads(bulk)) == set(BULK)
        assert con.execute("SELECT COUNT(*) FROM run_steps").fetchone() == (3,)
        assert con.execute("SELECT COUNT(*) FROM floors").fetchone() == (0,)  # the other table schema 8 adds
    assert [r.id for r in Store(path).records()] == [r.id for r in reversed(records)]  # opened again: nothing migrates


def test_a_comparison_of_records_read_without_steps_gives_what_whole_records_give(store):
    """`results compare` reads each run without its steps and takes their times from `run_steps`: its speedups, its
    intervals and its verdicts are those the whole records give, by time and by a rate, a run repeated or not."""
    base = make_record(steps=STEADY)
    same_work = [make_record(steps=[x * 1.3 for x in STEADY]), repeated([x * 0.97 for x in STEADY], processes=3),
                 make_record(steps=STEADY[::-1])]
    other_work = make_record(steps=[x * 3 for x in STEADY], batch=32, flops=4e9)  # compared by GFLOP/s
    for r in (base, *same_work, other_work):
        store.save(r)
    floor = Floor(0.05, "a quiet machine's")
    for group in ([base, *same_work], [base, other_work]):
        whole = compare(group, floor=floor)
        light = [store.get(r.id, light=True) for r in group]
        assert all(not r.steps and not r.telemetry for r in light)
        found = compare(light, floor=floor, timings=store.timed_repeats)
        assert (found.by, found.speedups, found.changes) == (whole.by, whole.speedups, whole.changes)
        assert (found.header, found.warnings) == (whole.header, whole.warnings)
        assert all(c is not None and c.low is not None for c in found.changes[1:])  # each with its interval
        assert [row_of(r) for r in light] == [row_of(r) for r in group]  # `compare --json`'s rows
    assert compare([base, *same_work]).by == TIME and compare([base, other_work]).by != TIME
    assert [c.word for c in compare([base, *same_work], floor=floor).changes[1:]] == [SLOWER, SAME, SAME]  # type: ignore[union-attr]
    unsaved = make_record(steps=STEADY[:30])
    assert store.timed_repeats(unsaved) == timed_repeats(unsaved)  # a record not kept: its own steps


def test_a_roofline_reads_a_devices_newest_points_from_the_index(store):
    """`results show` draws its run's device's newest runs of known intensity from the index alone: on that device
    only (its name, any number of devices), newest first, as many as asked."""
    for day in range(12):
        r = dated(make_record(shards=1 + day % 2, median=0.1), day)
        r.summary.intensity = None if day == 5 else 1.0 + day
        if day == 3:
            r.device = Device(kind="cpu", name="test CPU Pro")  # a name the device's begins
        store.save(r)
    rows = store.on_roofline(Device(kind="cpu", name="test CPU"), 6)
    assert [r.intensity for r in rows] == [12.0, 11.0, 10.0, 9.0, 8.0, 7.0]
    assert {r.device for r in rows} == {"CPU test CPU", "CPU test CPU x2"}
    assert [r.intensity for r in store.on_roofline(Device(kind="cpu", name="test CPU"), 100)][-3:] == [3.0, 2.0, 1.0]
    assert [r.intensity for r in store.on_roofline(Device(kind="cpu", name="test CPU Pro"), 100)] == [4.0]
    assert store.on_roofline(Device(kind="gpu", name="test CPU"), 100) == []


# --- paging and filters -------------------------------------------------------------------------
def test_pages_continue_where_the_last_one_ended(store):
    records = history(store, 25)
    first = store.page(limit=10)
    second = store.page(limit=10, after=first.after)
    last = store.page(limit=10, after=second.after)
    ids = [r.id for r in first.rows + second.rows + last.rows]
    assert ids == [r.id for r in reversed(records)] and len(last.rows) == 5 and last.after is None
    assert store.count() == 25 and store.page(limit=25).after is not None  # a full page may have more


@pytest.mark.parametrize("named, expect", [
    ({"workload": "fashion-mnist"}, lambda r, i: r.workload == "fashion-mnist"),
    ({"device": "gpu"}, lambda r, i: r.device is not None and r.device.kind == "gpu"),
    ({"device": "t4"}, lambda r, i: r.device is not None and r.device.kind == "gpu"),
    ({"backend": "jax"}, lambda r, i: r.backend == "jax"),
    ({"status": "cancelled"}, lambda r, i: r.status == "cancelled"),
    ({"sweep": "abcd"}, lambda r, i: r.sweep is not None),
    ({"since": "2026-01-20"}, lambda r, i: i >= 19),
    ({"before": "2026-01-05"}, lambda r, i: i < 4),
    ({"since": "2026-01-10", "backend": "tensorflow"}, lambda r, i: i >= 9 and r.backend == "tensorflow"),
])
def test_each_filter_picks_its_runs(store, named, expect):
    records = runs(24)
    records[4].device = Device(kind="gpu", name="Tesla T4")
    records[7].sweep = "abcd" * 8
    records[8] = dated(make_record(workload="fashion-mnist"), 8)
    for r in records:
        store.save(r)
    wanted_ids = [r.id for i, r in reversed(list(enumerate(records))) if expect(r, i)]
    filt = make_filter(**named)
    assert wanted_ids and [r.id for r in store.page(filt).rows] == wanted_ids
    assert store.count(filt) == len(wanted_ids)
    assert [r.id for r in store.records(filt)] == wanted_ids  # export reads the same selection, whole


def test_the_labs_filter_field_reads_the_same_filters():
    assert parse_filter("workload:conv jax since:2026-01-02") == RunFilter(
        workload="conv", since="2026-01-02T00:00:00+00:00", words=("jax",))
    recent = parse_filter("since:7d").since
    assert recent is not None and recent > (datetime.now(timezone.utc) - timedelta(days=8)).isoformat()
    with pytest.raises(FilterError, match="since 'soon'"):
        parse_filter("since:soon")
    with pytest.raises(FilterError, match="one of finished"):
        make_filter(status="done")


def test_words_match_any_descriptive_column(store):
    records = history(store, 6)
    assert {r.id for r in store.page(parse_filter("jax")).rows} == {r.id for r in records if r.backend == "jax"}
    assert [r.id for r in store.page(parse_filter(records[2].id[:6])).rows] == [records[2].id]
    assert store.page(parse_filter("cancel jax")).rows[0].id == records[0].id


# --- the command --------------------------------------------------------------------------------
def test_list_shows_a_screen_and_says_how_many_more(store, db):
    records = history(store, 40)
    db = str(db)
    out = run_cli("results", "--db", db, env={"COLUMNS": "80", "LINES": "24"})
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len(lines) <= 23  # with the prompt, one screen
    assert records[-1].short_id in lines[2] and "newest 17 of 40 runs" in out.stdout
    assert run_cli("results", "--db", db, "list", "--limit", "3").stdout.count("\n") < 8
    assert records[0].short_id in run_cli("results", "--db", db, "list", "--all").stdout
    filtered = run_cli("results", "--db", db, "list", "--backend", "jax", "--since", "2026-01-31")
    assert "4 run(s) matching backend jax, since 2026-01-31" in filtered.stdout  # days 31, 34, 37, 40
    bad = run_cli("results", "--db", db, "list", "--since", "soon")
    assert bad.returncode == 2 and "since 'soon'" in bad.stderr and "Traceback" not in bad.stderr


def test_list_json_keeps_its_shape_and_its_paging(store, db):
    records = history(store, 12)
    db = str(db)
    out = run_cli("results", "--db", db, "--json", "list", "--limit", "5")
    rows = json.loads(out.stdout)
    assert [r["id"] for r in rows] == [r.id for r in reversed(records)][:5]
    assert rows[0]["median_s"] == pytest.approx(records[-1].median) and rows[0]["params"]["batch_size"] == 8
    assert "newest 5 of 12 runs" in out.stderr
    assert len(json.loads(run_cli("results", "--db", db, "list", "--json", "--all").stdout)) == 12


def test_at_80_columns_ids_and_figures_stay_whole(store, db):
    multi = make_record(2, 0.0218)
    multi.device = Device(kind="cpu", name="test CPU", replicas=2, hosts=2)
    store.save(dated(multi, 1))
    store.save(dated(make_record(workload="fashion-mnist", median=0.6841), 2))
    out = run_cli("results", "--db", str(db), env={"COLUMNS": "80"})
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert multi.short_id in out.stdout and "21.8 ms" in out.stdout and "684.1 ms" in out.stdout
    assert "fashion-mnist" in out.stdout  # the workload stays whole: only the device gave way
    assert "CPU," in out.stdout and "CPU, 2 hosts x 1 devices" not in out.stdout


def test_prune_asks_then_removes_and_reclaims_the_space(store, db):
    records = history(store, 60)
    sweep = {"id": "5eed" * 8, "workload": "conv", "started_at": records[0].started_at, "status": "finished",
             "axes": {}, "base": {}, "steps": 3, "points": [{"values": {}, "runs": [records[1].id]}]}
    store.save_sweep(SweepRecord.from_json(sweep))
    size = store.size()
    refused = run_cli("results", "--db", str(db), "prune", "--before", "2026-02-01", input="n\n")
    assert refused.returncode == 0 and "remove 31 run(s) matching before 2026-02-01" in refused.stdout  # no failure
    assert "nothing removed" in refused.stdout and store.count() == 60
    unanswered = run_cli("results", "--db", str(db), "prune", "--before", "2026-02-01", input="")
    assert unanswered.returncode == 0 and "--yes" in unanswered.stdout and store.count() == 60
    confirmed = run_cli("results", "--db", str(db), "prune", "--before", "2026-02-01", input="y\n")
    assert confirmed.returncode == 0 and "removed 31 run(s)" in confirmed.stdout and "MiB reclaimed" in confirmed.stdout
    assert store.count() == 29 and [r.id for r in store.records()] == [r.id for r in reversed(records[31:])]
    assert store.sweeps() == []  # its only run went: the sweep with it
    assert store.size() < size * 0.7
    scripted = run_cli("results", "--db", str(db), "prune", "--backend", "jax", "--yes")
    assert scripted.returncode == 0 and store.count(RunFilter(backend="jax")) == 0 and store.count() == 20
    with sqlite3.connect(db) as con:  # each run's record and step times went with it
        assert con.execute("SELECT COUNT(*) FROM run_data").fetchone() == con.execute(
            "SELECT COUNT(*) FROM run_steps").fetchone() == (20,)
    nothing = run_cli("results", "--db", str(db), "prune", "--yes")
    assert nothing.returncode == 2 and "--all" in nothing.stderr and store.count() == 20


def test_compare_at_80x24_leads_with_the_answer(store, db):
    a, b = make_record(1, 2.0), make_record(4, 0.5, backend="jax")
    for r in (a, b):
        store.save(r)
    out = run_cli("results", "--db", str(db), "compare", a.short_id, b.short_id,
                  env={"COLUMNS": "80", "LINES": "24"})
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and max(len(line) for line in lines) <= 80
    assert "speedup = the first run's median time / this run's" in lines[0]  # the basis
    first_rows = [line for line in lines if line.startswith("│")][:4]
    assert "speedup" in first_rows[0] and "1.00x" in first_rows[0] and "4.00x" in first_rows[0]
    assert "verdict" in first_rows[1] and "too few steps" in first_rows[1]  # 4 steps a run: no interval
    assert "median" in first_rows[2]  # the figure the ratio is of, then the settings
    assert lines.index(first_rows[0]) < next(i for i, line in enumerate(lines) if "backend" in line)


# --- the estimate's one query -------------------------------------------------------------------
def test_the_estimates_candidates_give_what_every_kept_run_would(store, cpu_machine):
    """The indexed query returns a handful of rows; the estimate from them equals the estimate from all."""
    report = cpu_machine
    conv, limits = registry()["conv"], EIGHT_CPUS
    plan = conv.resolve({"device": "cpu", "backend": "tensorflow"}, limits)
    flops = conv.flops_per_step(plan)
    kinds = [(flops * 3, "tensorflow", 0.5), (flops / 3, "tensorflow", 0.2), (flops * 3, "tensorflow", 0.4),
             (flops * 2, "jax", 0.1), (flops * 10, "tensorflow", 0.05), (flops, "tensorflow", 5.0)]
    for day, (f, backend, median) in enumerate(kinds):
        store.save(dated(make_record(median=median, batch=128, flops=f, backend=backend, report=report), day))
    store.save(dated(make_record(median=0.01, batch=128, flops=flops, status="cancelled", report=report), 9))
    every = store.page().rows
    for p in (plan, {**plan, "backend": "jax"}, {**plan, "batch_size": 512}, {**plan, "batch_size": 16}):
        found = store.candidates(wanted(conv, p, limits))
        assert len(found) <= 3
        assert estimate(conv, p, limits, report, found) == estimate(conv, p, limits, report, every), p
    same = estimate(conv, plan, limits, report, store.candidates(wanted(conv, plan, limits)))
    assert same.kind == "run" and every[1].short_id in same.basis  # the newest of the nearest work
    assert wanted(conv, plan, limits).within == SIMILAR_WORK


def test_a_record_that_cannot_be_indexed_is_named_and_the_old_store_kept(tmp_path):
    path = tmp_path / "old.db"
    good = make_record()
    schema_2_db(path, [good], {"id": "5eed", "workload": "conv", "started_at": good.started_at, "points": []})
    with sqlite3.connect(path) as con:
        con.execute("INSERT INTO runs VALUES ('bad1', 'conv', 'finished', '2026', '{\"id\": \"bad1\"}')")
    out = run_cli("results", "--db", str(path))
    assert out.returncode == 1 and "cannot index run bad1" in out.stderr and "Traceback" not in out.stderr
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("2",)
        assert con.execute("SELECT COUNT(*) FROM runs").fetchone() == (2,)
