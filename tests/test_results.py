"""The results store: real SQLite, real files, real concurrent processes, the real CLI."""

from __future__ import annotations

import copy
import csv
import json
import sqlite3
import subprocess
import sys

import pytest

from tpulab.base.basis import differ
from tpulab.base.errors import EXIT_USAGE
from tpulab.base.events import SCHEMA, OpRow, Profile
from tpulab.engine.store import (SCHEMA_VERSION, Exported, Imported, Store, StoreError, compare, export_csv,
                                  export_json, read_export)

from .helpers import ROOT, copies, json_events, kept_roofline, make_record, run_cli


def test_round_trip_through_export_and_import(tmp_path, store):
    records = [make_record(1, 2.0), make_record(2, 1.0), make_record(4, 0.6, status="cancelled")]
    for r in records:
        store.save(r)
    out = tmp_path / "runs.json"
    export_json(store.records(), out)
    empty = Store(tmp_path / "b.db")
    assert empty.import_records(read_export(out)) == Imported(3, 0, 0)
    by_id = {r.id: r for r in empty.records()}
    assert by_id == {r.id: r for r in records}
    assert empty.import_records(read_export(out)) == Imported(0, 0, 3)  # no duplicates
    assert len(empty.records()) == 3


def test_a_profile_goes_out_and_comes_back_with_its_op_table(tmp_path, store):
    """Export and import carry the op table, each op's figures and the verdicts, as they were kept."""
    profiled = make_record(profile=Profile(
        steps=3, step_seconds=0.01, host_gap=0.004, host_gap_share=0.4, trace_path="/t/x", profiler="jax.profiler",
        where="/host:CPU", ops=[OpRow(name="dot.1", type="dot", category="matmul/conv", calls=1, seconds=0.005,
                                      share=0.5, flops=2e9, bytes=1e6),
                                OpRow(name="other", calls=4, seconds=0.001, share=0.1)]))
    assert profiled.summary.profile is not None and profiled.summary.profile.ops[0].gflops_per_s == 400
    assert [f.code for f in profiled.summary.profile.verdicts] == ["host-bound", "one-op-dominates"]
    store.save(profiled)
    out = tmp_path / "runs.json"
    export_json(store.records(), out)
    other = Store(tmp_path / "b.db")
    assert other.import_records(read_export(out)) == Imported(1, 0, 0)
    assert other.get(profiled.id).summary.profile == profiled.summary.profile


def test_records_keep_every_step_and_the_runtime(store):
    r = make_record()
    store.save(r)
    got = store.get(r.id[:6])
    assert got == r and len(got.steps) == 4 and got.runtime["cpu"]["logical_cores"] >= 1
    assert got.summary.step_seconds is not None and got.summary.step_seconds.count == 4 and got.schema == SCHEMA


def test_schema_is_versioned(tmp_path):
    path = tmp_path / "a.db"
    Store(path).save(make_record())
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        con.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(StoreError, match=f"schema 99, newer than this tpulab's {SCHEMA_VERSION}"):
        Store(path).records()


def test_a_version_1_store_gains_sweeps_and_keeps_its_runs(tmp_path):
    """A database written by tpulab 0.1 (runs only, schema 1, records of schema 1) opens as it was."""
    path = tmp_path / "old.db"
    old = make_record().to_json()
    for key in ("backend", "backend_reason", "sweep"):
        del old[key]
    old["schema"] = 1
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        con.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, workload TEXT NOT NULL, status TEXT NOT NULL, "
                    "started_at TEXT NOT NULL, record TEXT NOT NULL)")
        con.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                    (old["id"], old["workload"], old["status"], old["started_at"], json.dumps(old)))
    store = Store(path)
    [run] = store.records()
    assert run.id == old["id"] and run.backend == "tensorflow" and run.schema == 1 and run.median == 1.0
    assert store.sweeps() == []
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)


SAVER = """
import sys
from tests.helpers import make_record
from tpulab.engine.store import Store
store = Store(sys.argv[1])
for _ in range(50):
    store.save(make_record())
"""


def test_two_processes_saving_at_once_lose_nothing(tmp_path):
    path = tmp_path / "shared.db"
    procs = [subprocess.Popen([sys.executable, "-c", SAVER, str(path)], cwd=ROOT) for _ in range(2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    assert len(Store(path).records()) == 100


def test_corrupt_database_is_named_and_left_untouched(tmp_path):
    path = tmp_path / "results.db"
    garbage = b"this is not a database, but somebody's file" * 100
    path.write_bytes(garbage)
    with pytest.raises(StoreError) as e:
        Store(path).records()
    assert str(path) in str(e.value) and "mv " in str(e.value) and "--db" in str(e.value)
    with pytest.raises(StoreError):
        Store(path).save(make_record())
    assert path.read_bytes() == garbage
    out = run_cli("results", "--db", str(path))
    assert out.returncode == 1 and "Traceback" not in out.stderr and str(path) in out.stderr


@pytest.mark.parametrize("content, why", [
    ("not json at all", "is not a tpulab JSON export"),
    ('{"hello": 1}', "no 'records' list"),
    ('[{"id": "abc"}]', "record 1 (id abc): missing workload"),
])
def test_malformed_imports_import_nothing(tmp_path, store, content, why):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(StoreError, match="nothing was imported") as e:
        store.import_records(read_export(path))
    assert why in str(e.value)
    assert store.records() == []


def test_one_bad_record_among_good_ones_imports_nothing(tmp_path, store, db):
    good = make_record().to_json()
    bad = copy.deepcopy(make_record().to_json())
    bad["steps"][1]["seconds"] = "fast"
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps({"format": "tpulab-results", "schema": 1, "records": [good, bad]}))
    out = run_cli("results", "--db", str(db), "import", str(path))
    assert out.returncode == EXIT_USAGE
    assert f"record 2 (id {bad['id']}): steps[1].seconds should be a number, found a string; nothing was imported" \
        in out.stderr
    assert store.records() == []


def test_compare_ratios_and_warnings():
    a, b = make_record(1, 2.0), make_record(4, 0.5, backend="jax")
    result = compare([a, b])
    assert result.by == "time" and result.speedups == [1.0, 4.0]
    assert result.warnings == []  # shards and backend differ by design: no warning
    with pytest.raises(StoreError, match="one workload"):
        compare([a, make_record(workload="fashion-mnist")])
    with pytest.raises(StoreError, match="at least two"):
        compare([a])


def test_different_work_is_compared_by_throughput_never_by_time():
    """Batch 8 against batch 128: a ratio of step times would read as a speedup of different work."""
    small = make_record(median=0.01, batch=8, flops=1e9)
    large = make_record(median=0.8, batch=128, flops=16e9)
    result = compare([small, large])
    # The same model at another batch: the same work per example, so compared by examples/s (compare and
    # sweeps decide this in one place).
    assert result.by == "examples/s" and "the work per step differs" in result.header
    # 16x the work in 80x the time: a fifth of the rate, not 80x slower and not 0.0125x.
    assert result.speedups[1] == pytest.approx((16e9 / 0.8) / (1e9 / 0.01))
    assert result.warnings == ["batch size differs: 8 vs 128"]


def test_a_warning_agrees_with_the_parameter_it_names():
    small, large = make_record(), make_record()
    small.params.update(image_size=32, filters=16)
    assert compare([small, large]).warnings == ["filters differ: 16 vs 256", "image size differs: 32 vs 256"]
    assert differ("steps_per_epoch", [5, 100]) == "steps per epoch differ: 5 vs 100"
    assert differ("precision", ["float32", "mixed_bfloat16"]) == "precision differs: float32 vs mixed_bfloat16"


def test_a_missing_id_or_a_compare_of_one_run_is_bad_input(store, db):
    kept = make_record()
    store.save(kept)
    missing = run_cli("results", "--db", str(db), "show", "nonexistent")
    assert missing.returncode == EXIT_USAGE and "no run 'nonexistent'" in missing.stderr and "Traceback" not in missing.stderr
    one = run_cli("results", "--db", str(db), "compare", kept.short_id)
    assert one.returncode == EXIT_USAGE and "compare needs at least two runs (got 1)" in one.stderr


def test_csv_export(tmp_path):
    path = tmp_path / "runs.csv"
    export_csv([make_record(2, 1.0)], path)
    lines = path.read_text().splitlines()
    assert lines[0].startswith("id,workload,status") and len(lines) == 2
    (row,) = csv.DictReader(lines)
    assert (row["shards"], row["batch_size"], row["per_replica_batch"]) == ("2", "8", "4")
    assert row["step_median"] == "1.0" and row["compile_seconds"] == "2.0"  # each field by its declared name


@pytest.mark.slow
def test_cli_two_real_runs_compared(tmp_path):
    db = str(tmp_path / "r.db")
    tiny = ["--batch-size", "8", "--image-size", "32", "--filters", "16", "--iterations", "3", "--warmup", "1",
            "--backend", "jax"]  # the CLI's results, not a framework's: JAX's worker starts fastest
    ids = []
    for shards in ("1", "2"):
        out = run_cli("--run", "conv", "--no-ui", "--json", "--db", db, "--shards", shards, *tiny)
        assert out.returncode == 0, out.stderr
        ids.append(json_events(out.stdout)[-1]["id"])
    listing = run_cli("results", "--db", db)
    assert listing.returncode == 0 and ids[0][:8] in listing.stdout and ids[1][:8] in listing.stdout
    assert listing.stdout.index(ids[1][:8]) < listing.stdout.index(ids[0][:8])  # newest first
    shown = run_cli("results", "--db", db, "compare", ids[0][:8], ids[1][:8])
    assert shown.returncode == 0 and "speedup" in shown.stdout and "1.00x" in shown.stdout
    warned = [line for line in shown.stdout.splitlines() if line.startswith("warning")]
    assert "CPU" in shown.stdout and all("was disturbed" in line for line in warned)  # alike: only the load may differ
    as_json = json.loads(run_cli("results", "--db", db, "compare", "--json", ids[0], ids[1]).stdout)
    assert as_json["rows"][0]["speedup"] == 1.0 and as_json["rows"][1]["shards"] == 2
    assert as_json["rows"][1]["params"]["shards"] == 2 and isinstance(as_json["rows"][1]["flags"], list)
    assert as_json["by"] == "time"
    verdict = as_json["rows"][1]["change"]  # each run's against the first: its word, interval and threshold's source
    assert as_json["rows"][0]["change"] is None and verdict["word"] == "no difference detected"
    assert "too few steps" in verdict["why"] and verdict["low"] is None and "not calibrated" in verdict["source"]
    # At 80 columns the runs become columns: every figure and the speedup stay whole.
    narrow = run_cli("results", "--db", db, "compare", ids[0][:8], ids[1][:8], env={"COLUMNS": "80"})
    assert narrow.returncode == 0 and max(len(line) for line in narrow.stdout.splitlines()) <= 80
    for figure in ("median", "p10-p90", "throughput", "GFLOP/s", "peak", "speedup", "1.00x", ids[1][:8]):
        assert figure in narrow.stdout, figure
    assert "…" not in narrow.stdout
    exported = tmp_path / "out.json"
    assert run_cli("results", "--db", db, "export", "-o", str(exported)).returncode == 0
    other = str(tmp_path / "other.db")
    imported = run_cli("results", "--db", other, "import", str(exported))
    assert imported.returncode == 0 and "2 run(s) and 0 sweep(s) added" in imported.stdout
    again = run_cli("results", "--db", other, "import", str(exported))
    assert "0 run(s) and 0 sweep(s) added, 2 already present" in again.stdout
    missing = run_cli("results", "--db", db, "show", "ffffffff")
    assert missing.returncode == 2 and "no run 'ffffffff'" in missing.stderr


def test_export_to_an_unwritable_path_names_it(tmp_path, store, db):
    store.save(make_record())
    out = run_cli("results", "--db", str(db), "export", "-o", str(tmp_path / "missing" / "x.json"))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"cannot write {tmp_path / 'missing' / 'x.json'}" in out.stderr and "-o FILE" in out.stderr


@pytest.mark.parametrize("damage, why", [
    (lambda r: r["steps"][0].pop("step"), "missing steps[0].step"),
    (lambda r: r.update(device="a GPU"), "device should be an object, found a string"),
])
def test_an_import_that_would_break_the_listing_is_refused(tmp_path, store, damage, why):
    bad = make_record().to_json()
    damage(bad)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "tpulab-results", "schema": 2, "records": [bad]}))
    with pytest.raises(StoreError, match="nothing was imported") as e:
        store.import_records(read_export(path))
    assert why in str(e.value) and store.records() == []


def test_compare_says_when_first_calls_differ_in_kind():
    cold, warm = make_record(), make_record()
    cold.summary.cache_hit, warm.summary.cache_hit = False, True
    result = compare([cold, warm])
    assert f"first calls differ in kind: {cold.short_id} compiled, {warm.short_id} compiled (cache)" in result.warnings
    assert not any("first calls" in w for w in compare([make_record(), make_record()]).warnings)


def test_a_run_on_stand_in_data_says_what_the_data_is_for_its_workload():
    """The transformer's synthetic data is tokens, not images; its only metric is the loss."""
    from tpulab.base.events import Compiled, Device, Started, Step
    from tpulab.engine.record import RunRecorder
    from tpulab.engine.spec import RunSpec
    from tpulab.machine.detect import detect
    from tpulab.views.narrate import header
    from tpulab.workloads import registry

    w = registry()["transformer"]
    rec = RunRecorder(RunSpec(w, {**w.defaults(), **w.presets["smoke"]}, "jax", "you chose jax", "cpu"), detect())
    started = Started(workload=w.name, device=Device(kind="cpu", name="test CPU", replicas=1), dtype="float32",
                      flops_per_step=1e9, steps_total=4, per_replica_batch=4, backend="jax", synthetic=True)
    for e in (started, Compiled(seconds=1.0), *(Step(step=i, seconds=0.01, synthetic=True) for i in range(2, 5))):
        rec.feed(e)
    rec.finish("finished")
    assert "SYNTHETIC DATA: random tokens: the loss means nothing" in header(started, rec)
    assert [f.message for f in rec.record().summary.flags if f.code == "synthetic-data"] == [
        "trained on random tokens: the loss means nothing"]
    decode = registry()["decode"]  # a workload that does not train ran on its stand-in data
    rec = RunRecorder(RunSpec(decode, decode.preset("smoke"), "jax", "you chose jax", "cpu"), detect())
    rec.feed(Started(workload="decode", device=Device(kind="cpu", name="test CPU"), dtype="float32",
                     flops_per_step=1e6, steps_total=4, per_replica_batch=2, synthetic=True))
    assert [f.message for f in rec.summary().flags if f.code == "synthetic-data"] == [
        "ran on random prompts, and random weights unless a model's own were read: only the speed means something"]


def test_the_listing_shows_each_runs_work_and_its_sweep_at_80_columns(store, db):
    """Two conv runs at batch 128: 1.9 ms at the smoke preset's sizes (a sweep's point), 485 ms at the
    article's. The listing says why: their work per step, and which one a sweep ran."""
    from tpulab.workloads import registry

    conv = registry()["conv"]
    smoke = make_record(median=0.0019, batch=128, flops=conv.flops_per_step({**conv.preset("smoke"), "batch_size": 128}))
    smoke.sweep = "5eed" + "0" * 28
    article = make_record(median=0.485, batch=128, flops=conv.flops_per_step(conv.defaults()))
    for r in (smoke, article):
        store.save(r)
    out = run_cli("results", "--db", str(db), env={"COLUMNS": "80"})
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and max(len(line) for line in lines) <= 80
    assert lines[0].split()[-5:] == ["batch", "GFLOP", "sweep", "median", "peak"]
    row = {line.split()[0]: line.split() for line in lines[2:4]}
    assert row[smoke.short_id][-6:-2] == ["128", "0.0786", "5eed0", "1.9"]
    assert row[article.short_id][-5:-2] == ["128", "80.5", "485.0"]  # no sweep: the cell is empty


def test_a_kept_run_this_tpulab_cannot_read_is_one_line_naming_the_field(tmp_path):
    """A record edited in the database by hand (a figure made a word) is refused where it is read, in one line that
    names the field, and `results show` exits 1 with no traceback; the other runs still list."""
    db = tmp_path / "r.db"
    store, good, bad = Store(db), make_record(), make_record(2)
    store.save(good), store.save(bad)
    data = bad.to_json()
    data["summary"]["step_seconds"]["median"] = "fast"
    with sqlite3.connect(db) as con:
        con.execute("UPDATE run_data SET record = ? WHERE id = ?", (json.dumps(data), bad.id))
    with pytest.raises(StoreError, match=r"cannot be read by this tpulab \(summary\.step_seconds\.median "):
        store.get(bad.id)
    assert store.get(good.id) == good
    shown = run_cli("results", "--db", str(db), "show", bad.id[:8])
    assert shown.returncode == 1 and len(shown.stderr.splitlines()) == 1 and "Traceback" not in shown.stderr
    assert "summary.step_seconds.median should be a number, found a string" in shown.stderr
    assert bad.short_id in run_cli("results", "--db", str(db), "list").stdout


def test_results_show_reads_its_run_the_rooflines_and_the_index_never_every_record(store, db, monkeypatch, capsys):
    """`results show` reads its run without its steps, the ceilings from its device's rooflines (each read without
    its steps) and its device's newest runs from the index: no other record, however many are kept."""
    from tpulab.cli.main import main
    from tpulab.engine.runindex import RunFilter
    from tpulab.views.roofline import POINTS

    roof = kept_roofline("tensorflow", "2.20.0", "3.12")  # on make_record's device, both ceilings set
    shown = make_record()
    shown.summary.intensity = 4.0
    store.save(roof)
    store.save(shown)
    assert store.import_records(Exported(copies(shown, POINTS + 50), [])).runs == POINTS + 50
    read: list = []
    for name in ("records", "each_record", "get", "sweep_runs", "on_roofline"):
        real = getattr(Store, name)
        monkeypatch.setattr(Store, name, lambda self, *a, _real=real, _name=name, **k: read.append((_name, a, k))
                            or _real(self, *a, **k))
    assert main(["results", "--db", str(db), "show", shown.short_id]) == 0
    out = capsys.readouterr().out
    assert "roofline: GFLOP/s up" in out and "measured ceilings" in out and "*  runs" in out
    assert read == [("get", (shown.short_id,), {"light": True}),
                    ("records", (RunFilter(workload="roofline", device="cpu"),), {"light": True}),
                    ("on_roofline", (shown.device, POINTS), {})]
    assert len(store.on_roofline(shown.device, POINTS)) == POINTS  # type: ignore[arg-type]


def test_a_history_moved_to_another_machine_keeps_its_machine_cards(tmp_path):
    """Issue 64 (20): `results export` carried runs and sweeps, not the cards, so a history moved to a new machine
    lost them. Two TPULAB_HOMEs, the real CLI and SQLite: the card comes back whole, once; its text (anyone's file)
    prints as text; a bad card refuses the whole import."""
    from tpulab.engine.card import Card, CardEntry, CardSuite

    first, second = tmp_path / "a", tmp_path / "b"
    run = make_record()
    card = Card(id="c0ffee00" * 4, created_at="2026-12-01T00:00:00+00:00", suite=CardSuite(name="tpulab-card",
                version=2, quick=True), machine={"label": "\x1b]0;owned\x07[bold]lab[/bold]"}, entries=[
                CardEntry(name="conv", workload="conv", backend="jax", status="ok", unit="GFLOP/s", median=50.0,
                          run_id=run.id, samples=[[0.01, 0.011, 0.012]])])
    kept = Store(first / "results.db")
    kept.save(run)
    kept.save_card(card)
    out = tmp_path / "history.json"
    exported = run_cli("results", "export", "-o", str(out), env={"TPULAB_HOME": str(first)})
    assert exported.returncode == 0 and f"exported 1 run(s) and 1 card(s) to {out}" in exported.stdout
    imported = run_cli("results", "import", str(out), env={"TPULAB_HOME": str(second)})
    assert imported.returncode == 0, imported.stderr
    assert f"from {out}: 1 run(s), 0 sweep(s) and 1 card(s) added" in imported.stdout
    moved = Store(second / "results.db")
    assert moved.get_card("c0ffee00").to_json() == card.to_json() and moved.get(run.id) == run
    again = run_cli("results", "import", str(out), env={"TPULAB_HOME": str(second)})
    assert "0 run(s) and 0 sweep(s) added, 2 already present" in again.stdout and len(moved.cards()) == 1
    listed = run_cli("cards", "list", env={"TPULAB_HOME": str(second)})
    assert listed.returncode == 0 and "\x1b" not in listed.stdout
    assert "\\x1b]0;owned\\x07[bold]lab[/bold]" in listed.stdout  # shown as written, never obeyed

    lines = out.read_text().splitlines()
    bad = tmp_path / "bad.json"
    bad.write_text("\n".join([*lines[:-1], json.dumps({"card": {**card.to_json(), "entries": "x"}})]) + "\n")
    third = tmp_path / "c"
    refused = run_cli("results", "import", str(bad), env={"TPULAB_HOME": str(third)})
    assert refused.returncode == EXIT_USAGE and refused.stderr.count("\n") == 1 and "card 1: " in refused.stderr
    assert "nothing was imported" in refused.stderr
    assert Store(third / "results.db").count() == 0 and Store(third / "results.db").cards() == []
    late = tmp_path / "late.json"  # a run after the cards: refused (cards name runs imported before them)
    late.write_text("\n".join([lines[0], lines[2], lines[1]]) + "\n")
    refused = run_cli("results", "import", str(late), env={"TPULAB_HOME": str(third)})
    assert refused.returncode == EXIT_USAGE and "a record after the cards" in refused.stderr
