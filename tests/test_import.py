"""`results import` of files other people wrote: counted twice the same, and hostile ones refused whole.

The real CLI in a child process, real SQLite, real files."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from tpulab.base.errors import EXIT_USAGE
from tpulab.base.events import SweepRecord
from tpulab.engine.store import MAX_IMPORT_BYTES, export_json

from .helpers import make_record, run_cli


def swept_store(store) -> tuple[list, SweepRecord]:
    runs = [make_record(), make_record(2, 0.6)]
    sweep = SweepRecord.from_json({"id": "5eed" * 8, "workload": "conv", "started_at": runs[0].started_at,
                                   "status": "finished", "axes": {"shards": [1, 2]}, "base": {}, "steps": 3,
                                   "points": [{"values": {"shards": 1}, "runs": [runs[0].id]},
                                              {"values": {"shards": 2}, "runs": [runs[1].id]}]})
    for r in runs:
        store.save(r)
    store.save_sweep(sweep)
    return runs, sweep


def test_a_second_import_adds_nothing_and_counts_sweeps_as_runs(tmp_path, store):
    runs, sweep = swept_store(store)
    out = tmp_path / "x.json"
    export_json(runs, out, [sweep])
    other = str(tmp_path / "other.db")
    first = run_cli("results", "--db", other, "import", str(out))
    second = run_cli("results", "--db", other, "import", str(out))
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.strip() == f"from {out}: 2 run(s) and 1 sweep(s) added"
    assert second.stdout.strip() == f"from {out}: 0 run(s) and 0 sweep(s) added, 3 already present"
    listed = json.loads(run_cli("results", "--db", other, "sweep", "--json").stdout)
    assert [s["id"] for s in listed] == [sweep.id]


def test_a_runs_json_output_imports_as_its_record(tmp_path, store):
    """What `--json` printed (event lines, the result last) is enough to keep the run later."""
    r = make_record()
    lines = [json.dumps({"event": "started", "t": 1.0}), json.dumps({"event": "result", **r.to_json()})]
    out = tmp_path / "run.jsonl"
    out.write_text("\n".join(lines) + "\n")
    done = run_cli("results", "--db", str(store.path), "import", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"from {out}: 1 run(s) and 0 sweep(s) added"
    assert store.get(r.id) == r


def test_a_diverged_loss_goes_out_and_comes_back(tmp_path, store):
    """NaN is what a diverged training measured: a metric may hold it (a timing may not)."""
    r = make_record()
    r.steps[-1].metrics = {"loss": float("nan")}
    store.save(r)
    out = tmp_path / "x.json"
    export_json([r], out)
    other = str(tmp_path / "other.db")
    assert run_cli("results", "--db", other, "import", str(out)).returncode == 0


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def damaged(change) -> dict:
    r = copy.deepcopy(make_record().to_json())
    change(r)
    return r


HOSTILE = {  # what each file holds, and a part of the one line that refuses it
    "deep nesting past the parser": ('{"records": ' + "[" * 100_000 + "]" * 100_000 + "}", "nests too deep"),
    "deep nesting the parser takes": (
        {"format": "tpulab-results", "records": [damaged(lambda r: r["params"].update(x=nested(200)))]},
        "nests deeper than 32 levels"),
    "NaN as a time": ({"format": "tpulab-results", "records": [damaged(lambda r: r["steps"][0].update(
        seconds=float("nan")))]}, "steps[0].seconds should be a finite number, found nan"),
    "Infinity as a figure": ({"format": "tpulab-results", "records": [damaged(lambda r: r["summary"].update(
        gflops_per_s=float("inf")))]}, "summary.gflops_per_s should be a finite number, found inf"),
    "1e400": ('{"format": "tpulab-results", "records": [' + json.dumps(make_record().to_json()).replace(
        '"compile_seconds": 2.0', '"compile_seconds": 1e400') + "]}", "summary.compile_seconds should be a finite"),
    "a 5,000-digit number": ('{"records": [' + "9" * 5000 + "]}", "Exceeds the limit (4300 digits)"),
    "a 400-digit count": ({"format": "tpulab-results", "records": [damaged(lambda r: r.update(
        per_replica_batch=10**400))]}, "per_replica_batch is too large a number"),
    "a huge number in params": ({"format": "tpulab-results", "records": [damaged(lambda r: r["params"].update(
        batch_size=10**30))]}, "params.batch_size is too large a number"),
    "a string for a figure": ({"format": "tpulab-results", "records": [damaged(lambda r: r["summary"].update(
        gflops_per_s="fast"))]}, "summary.gflops_per_s should be a number, found a string"),
    "a list for the summary": ({"format": "tpulab-results", "records": [damaged(lambda r: r.update(summary=[]))]},
                               "summary should be an object, found a list"),
    "a number for the device": ({"format": "tpulab-results", "records": [damaged(lambda r: r.update(device=3))]},
                                "device should be an object, found a number"),
    "a string for the stats": ({"format": "tpulab-results", "records": [damaged(lambda r: r["summary"].update(
        step_seconds="1 s"))]}, "summary.step_seconds should be an object, found a string"),
    "a bool for a count": ({"format": "tpulab-results", "records": [damaged(lambda r: r["summary"][
        "step_seconds"].update(count=True))]}, "summary.step_seconds.count should be a whole number, found a boolean"),
    "an object for a flag": ({"format": "tpulab-results", "records": [damaged(lambda r: r["summary"].update(
        flags=[{"code": 1}]))]}, "summary.flags[0].code should be a str, found a number"),
    "a string for a metric": ({"format": "tpulab-results", "records": [damaged(lambda r: r["steps"][0].update(
        metrics={"loss": "low"}))]}, "steps[0].metrics.loss should be a number, found a string"),
    "null for the workload": ({"format": "tpulab-results", "records": [damaged(lambda r: r.update(workload=None))]},
                              "workload should be a str, found null"),
    "a string for the sweeps": ({"format": "tpulab-results", "records": [], "sweeps": "all"},
                                "'sweeps' should be a list"),
    "a sweep's point as a number": ({"format": "tpulab-results", "records": [], "sweeps": [{
        "id": "5eed", "workload": "conv", "started_at": "2026", "status": "finished", "axes": {}, "base": {},
        "steps": 3, "points": [7]}]}, "points[0] should be an object, found a number"),
    "a sweep's steps as NaN": ({"format": "tpulab-results", "records": [], "sweeps": [{
        "id": "5eed", "workload": "conv", "started_at": "2026", "status": "finished", "axes": {"x": [float("nan")]},
        "base": {}, "steps": 3, "points": []}]}, "axes.x[0] should be a finite number, found nan"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_file_is_refused_in_one_line_and_imports_nothing(tmp_path, store, name):
    content, why = HOSTILE[name]
    good = make_record()
    store.save(good)
    before = hashlib.sha256(store.path.read_bytes()).hexdigest()
    if isinstance(content, dict):  # a good record first: all or nothing
        content = json.dumps({**content, "records": [good.to_json() | {"id": "ab" * 16}, *content["records"]]})
    path = tmp_path / "hostile.json"
    path.write_text(content)
    out = run_cli("results", "--db", str(store.path), "import", str(path))
    assert out.returncode == EXIT_USAGE
    assert out.stdout == "" and len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr
    assert why in out.stderr and "nothing was imported" in out.stderr
    assert [r.id for r in store.records()] == [good.id] and store.sweeps() == []
    assert hashlib.sha256(store.path.read_bytes()).hexdigest() == before


def test_a_file_too_large_to_read_is_refused_before_it_is_read(tmp_path, store):
    path = tmp_path / "huge.json"
    with path.open("wb") as f:  # 100 MB, sparse: nothing reads it
        f.truncate(100 * 10**6)
    assert path.stat().st_size > MAX_IMPORT_BYTES
    out = run_cli("results", "--db", str(store.path), "import", str(path))
    assert out.returncode == EXIT_USAGE and len(out.stderr.splitlines()) == 1
    assert out.stderr == (f"tpulab: error: {path} is 95 MiB, more than the 64 MiB an import reads of a file that is "
                          "not an export of lines: export it again with this tpulab (`tpulab results export`); "
                          "nothing was imported\n")
    assert store.records() == []


@pytest.mark.parametrize("answer", ["n\n", "\n", ""])
def test_declining_a_prune_removes_nothing_and_is_no_failure(store, answer):
    kept = make_record()
    store.save(kept)
    out = run_cli("results", "--db", str(store.path), "prune", "--all", input=answer)
    assert out.returncode == 0, out.stderr
    assert "nothing removed" in out.stdout and [r.id for r in store.records()] == [kept.id]


def test_an_export_past_the_file_limit_round_trips_line_by_line_all_or_nothing(tmp_path, monkeypatch):
    """An export of a history larger than an import would read whole (the limit lowered here, as 100,000 runs of
    about 6 KB pass 64 MiB) imports into an empty store, every run; one bad record, the last, imports none; a
    record past the per-record limit is named by its line."""
    from tpulab.engine import store as store_module
    from tpulab.engine.store import BadImport, Exported, Store, read_export

    from .helpers import copies

    source = Store(tmp_path / "source.db")
    source.import_records(Exported(copies(make_record(), 300), []))
    path = tmp_path / "all.json"
    assert export_json(source.each_record(), path) == 300
    monkeypatch.setattr(store_module, "MAX_IMPORT_BYTES", path.stat().st_size // 10)
    moved = Store(tmp_path / "moved.db")
    done = moved.import_records(read_export(path))
    assert (done.runs, done.present, moved.count()) == (300, 0, 300)
    assert {r.id for r in moved.records()} == {r.id for r in source.records()}

    lines = path.read_text().splitlines()
    bad = tmp_path / "bad.json"
    bad.write_text("\n".join([*lines[:-1], json.dumps({"record": {"id": "not hex"}})]) + "\n")
    empty = Store(tmp_path / "empty.db")
    with pytest.raises(BadImport, match="record 300: .*nothing was imported"):
        empty.import_records(read_export(bad))
    assert empty.count() == 0

    monkeypatch.setattr(store_module, "MAX_RECORD_BYTES", len(lines[1]) // 2)
    with pytest.raises(BadImport, match="line 2: more than the .* one record may hold; nothing was imported"):
        empty.import_records(read_export(path))
    assert empty.count() == 0
