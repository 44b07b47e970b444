"""Runs, a sweep and a machine card exported to a real MLflow SQLite store, and read back with MLflow's own API."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpulab.base.events import OpRow, Profile
from tpulab.cli.main import main
from tpulab.engine.card import Card, CardCeiling, CardEntry, CardSuite
from tpulab.engine.store import Store

from .helpers import ROOT, make_record



@pytest.fixture(scope="module")
def mlflow():
    """MLflow, imported by the tests that use it (its import is seconds: never at collection)."""
    return pytest.importorskip("mlflow")


@pytest.fixture(scope="module")
def tracking(mlflow, tmp_path_factory) -> Path:
    """A folder whose MLflow SQLite store (`mlflow.db`, MLflow's default name) is made: its tables once per module
    (MLflow's migrations take seconds)."""
    folder = tmp_path_factory.mktemp("mlflow")
    here = os.getcwd()
    os.chdir(folder)  # MLflow keeps its store for the process, and its artifacts (./mlruns) where it was made
    try:
        mlflow.MlflowClient(f"sqlite:///{folder}/mlflow.db").search_experiments()
    finally:
        os.chdir(here)
    return folder


@pytest.fixture(scope="module")
def kept(tmp_path_factory, request) -> Path:
    """A store with two real calibration runs on JAX (sizes 32 and 16), a real sweep of two points and a machine
    card: the runs and the sweep in worker processes at once, while MLflow makes its store."""
    folder = tmp_path_factory.mktemp("kept")
    db = folder / "r.db"
    env = {**os.environ, "TPULAB_HOME": str(folder / "home"), "TPULAB_STANDBY": "off", "COLUMNS": "200"}
    tiny = ("--preset", "smoke", "--backend", "jax", "--device", "cpu", "--db", str(db))
    commands = [("run", "calibration", "--no-ui", *tiny), ("run", "calibration", "--no-ui", "--size", "16", *tiny),
                ("sweep", "calibration", "--json", "--size", "16,32", "--steps", "5", *tiny)]
    procs = [subprocess.Popen([sys.executable, "-m", "tpulab", *c], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for c in commands]
    request.getfixturevalue("tracking")
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-3000:]
    Store(db).save_card(Card(
        id="c0ffee00" * 4, created_at="2026-12-01T00:00:00+00:00", ended_at="2026-12-01T00:05:00+00:00",
        suite=CardSuite(name="quick", version=1, quick=True), machine={"label": "machine A"}, backends=["jax"],
        ceilings=[CardCeiling(device="cpu: A", kind="compute", dtype="float32", value=100e9, unit="FLOP/s",
                              source="roofline run x")],
        entries=[CardEntry(name="conv", workload="conv", backend="jax", status="ok", unit="GFLOP/s", median=50.0,
                           low=48.0, high=52.0, n=10, ceiling_fraction=0.5, verdicts=["host-bound: waits"])]))
    return db


def export(*args: str) -> int:
    """`tpulab results export` run as the command line runs it: its exit code."""
    try:
        return main(["results", "export", *args])
    except SystemExit as e:
        return int(e.code or 0)


def by_tag(runs, key: str) -> dict:
    return {row[f"tags.{key}"]: row for _, row in runs.iterrows()}


@pytest.mark.slow
def test_runs_a_sweep_and_a_card_go_into_mlflow_once(mlflow, kept, tracking, monkeypatch, capsys):
    monkeypatch.chdir(tracking)  # MLflow's default store is ./mlflow.db, its artifacts ./mlruns
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tracking}/mlflow.db"
    assert export("--format", "mlflow", "--db", str(kept)) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert said.startswith("exported 4 run(s), 1 sweep(s) and 1 card(s) to MLflow experiment 'tpulab' at sqlite:")
    assert f"mlflow ui --backend-store-uri {uri}`" in said  # MLflow's default, in the folder it was run from

    store = Store(kept)
    [sweep] = store.sweeps()
    records = {r.id: r for r in store.records()}
    runs = mlflow.search_runs(experiment_names=["tpulab"], output_format="pandas")
    client = mlflow.MlflowClient(uri)
    kept_by_id = by_tag(runs, "tpulab.id")
    assert set(kept_by_id) == {*records, sweep.id, "c0ffee00" * 4}
    for rid, r in records.items():
        row = kept_by_id[rid]
        assert row["tags.tpulab.kind"] == "run" and row["status"] == "FINISHED"
        assert (row["params.size"], row["params.backend"], row["params.device"], row["params.dtype"]) == \
            (str(r.params["size"]), "jax", "cpu", "float32")
        s = r.summary
        assert s.step_seconds is not None and s.step_seconds.low is not None
        assert (row["metrics.step_median"], row["metrics.step_low"], row["metrics.step_high"]) == \
            pytest.approx((s.step_seconds.median, s.step_seconds.low, s.step_seconds.high), rel=1e-12)
        assert (row["metrics.throughput"], row["metrics.peak_fraction"]) == \
            pytest.approx((s.throughput, s.peak_fraction), rel=1e-12)
        assert {k[len("tags.tpulab.flag."):]: v for k, v in row.items() if k.startswith("tags.tpulab.flag.")
                and isinstance(v, str)} == {f.code: f.message for f in s.flags}
        steady = [(x.step, x.seconds) for x in r.steps if not x.warmup]
        history = sorted((m.step, m.value) for m in client.get_metric_history(row["run_id"], "step_seconds"))
        assert history == steady and len(steady) == s.step_seconds.count
        exported = client.download_artifacts(row["run_id"], "record.json", str(tracking / rid))
        assert json.loads(Path(exported).read_text()) == r.to_json()

    parent = kept_by_id[sweep.id]
    assert parent["tags.tpulab.kind"] == "sweep" and parent["params.swept.size"] == "16,32"
    children = {row["tags.tpulab.id"] for _, row in runs.iterrows()
                if row["tags.mlflow.parentRunId"] == parent["run_id"]}
    assert children == set(sweep.run_ids()) and len(children) == 2
    assert all(not isinstance(kept_by_id[i]["tags.mlflow.parentRunId"], str) for i in set(records) - children)

    card = kept_by_id["c0ffee00" * 4]
    assert card["tags.tpulab.kind"] == "card" and card["params.machine"] == "machine A"
    assert (card["metrics.conv/jax/median"], card["metrics.conv/jax/ceiling_fraction"]) == (50.0, 0.5)
    assert card["metrics.ceiling/cpu/float32"] == 100e9
    assert card["tags.tpulab.verdict.conv/jax"] == "host-bound: waits"

    one = kept_by_id[next(iter(children))]["run_id"]
    steps_before = len(client.get_metric_history(one, "step_seconds"))
    assert export("--format", "mlflow", "--tracking-uri", uri, "--db", str(kept)) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert said.startswith("exported 0 run(s) to MLflow experiment 'tpulab'") and "(6 already there)" in said
    again = mlflow.search_runs(experiment_names=["tpulab"], output_format="pandas")
    assert sorted(again["run_id"]) == sorted(runs["run_id"])
    assert len(client.get_metric_history(one, "step_seconds")) == steps_before


def test_the_notebook_sends_a_profiled_run_with_its_trace_and_verdicts(mlflow, tracking, tmp_path):
    import tpulab


    trace = tmp_path / "trace"
    (trace / "plugins" / "profile").mkdir(parents=True)
    (trace / "plugins" / "profile" / "host.xplane.pb").write_bytes(b"trace")
    record = make_record(profile=Profile(
        steps=3, step_seconds=0.01, host_gap=0.004, host_gap_share=0.4, trace_path=str(trace), profiler="jax.profiler",
        where="/host:CPU", ops=[OpRow(name="dot.1", type="dot", category="matmul/conv", calls=1, seconds=0.005,
                                      share=0.5, flops=2e9, bytes=1e6),
                                OpRow(name="other", calls=4, seconds=0.001, share=0.1)]))
    db = tmp_path / "r.db"
    Store(db).save(record)
    uri = f"sqlite:///{tracking}/mlflow.db"
    sent = tpulab.results(db=db).to_mlflow(uri, experiment="notebook")
    assert (sent.runs, sent.sweeps, sent.present) == (1, 0, 0)
    client = mlflow.MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name("notebook").experiment_id])
    assert run.data.tags["tpulab.id"] == record.id and run.data.params["backend"] == "tensorflow"
    assert {k for k in run.data.tags if k.startswith("tpulab.verdict.")} == \
        {"tpulab.verdict.host-bound", "tpulab.verdict.one-op-dominates"}
    assert [a.path for a in client.list_artifacts(run.info.run_id, "trace/plugins/profile")] == \
        ["trace/plugins/profile/host.xplane.pb"]
    assert run.info.artifact_uri.startswith(str(tracking / "mlruns"))
    assert tpulab.results(db=db).to_mlflow(uri, experiment="notebook").present == 1


def test_each_process_of_a_repeated_run_continues_its_series_index():
    from tpulab.engine.mlflow_export import step_series

    one = make_record(steps=[0.1, 0.2, 0.3])  # steps 2, 3, 4
    two = dataclasses.replace(one, steps=[*one.steps, *one.steps], repeats=[0, 3])  # as `--repeat 2` keeps them
    assert [(m.key, m.step, m.value) for m in step_series(two, 0)] == \
        [("step_seconds", i, x) for i, x in zip(range(2, 8), [0.1, 0.2, 0.3] * 2)]


def test_without_mlflow_the_export_says_how_to_install_it_in_one_line(tmp_path, monkeypatch, capsys):
    db = tmp_path / "r.db"
    Store(db).save(make_record())
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed: its import fails
    assert export("--format", "mlflow", "--db", str(db)) == 2
    err = capsys.readouterr().err
    assert err == "tpulab: error: exporting to MLflow needs mlflow-skinny: pip install 'tpulab[mlflow]'\n"


@pytest.mark.parametrize("args, said", [
    (("--format", "mlflow", "-o", "x.json"), "--format mlflow writes to a tracking store, not a file: drop -o"),
    (("--format", "json"), "export --format json needs -o FILE"),
    (("--tracking-uri", "sqlite:///x.db", "-o", "x.json"), "--tracking-uri and --experiment go with --format mlflow"),
    (("--format", "mlflow", "--tracking-uri", "nowhere://x"), "--tracking-uri nowhere://x: "),
])
def test_a_bad_export_line_is_one_line_and_exit_2(args, said, tmp_path, capsys):
    db = tmp_path / "r.db"
    Store(db).save(make_record())
    assert export(*args, "--db", str(db)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tpulab: error: {said}") and err.count("\n") == 1


def test_mlflow_is_imported_only_when_an_export_asks_for_it():
    code = ("import sys, tpulab.cli.main, tpulab.cli.results, tpulab.notebook.api, tpulab.engine.mlflow_export; "
            "sys.exit('mlflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
