"""Extension points: workloads and backends found by entry point, a plugin's failure kept to one line,
a third backend and a plugin workload run from the command line to the store, and the architecture's rules."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpulab.base import plugins
from tpulab.engine.store import Store

from .helpers import ROOT

EXAMPLE = ROOT / "examples" / "plugin"


def dist_info(where: Path, name: str, version: str, entry_points: dict[str, dict[str, str]]) -> Path:
    """What installing a package leaves for importlib.metadata: its metadata and its entry points."""
    info = where / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in entry_points.items()))
    return where


def tpulab(*args: str, path: list[Path], home: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [ROOT, *path])), "TPULAB_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "tpulab", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=home)


def test_builtin_entries_are_the_ones_pyproject_declares():
    tomllib = pytest.importorskip("tomllib")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert {group: dict(entries) for group, entries in declared.items()} == \
        {group: plugins.builtin(group) for group in (plugins.WORKLOADS, plugins.BACKENDS)}


@pytest.mark.slow
def test_the_hello_plugin_runs_from_the_cli_and_is_kept_with_its_name(tmp_path):
    site = dist_info(tmp_path / "site", "tpulab-hello", "0.1.0", {plugins.WORKLOADS: {"hello": "tpulab_hello:HELLO"}})
    listed = tpulab("--help", path=[EXAMPLE, site], home=tmp_path)
    assert listed.returncode == 0 and "hello" in listed.stdout
    done = tpulab("--run", "hello", "--no-ui", "--preset", "smoke", "--backend", "jax", path=[EXAMPLE, site],
                  home=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    record = Store(tmp_path / "results.db").records()[0]
    assert record.workload == "hello" and record.status == "finished" and record.backend == "jax"
    assert record.plugins == {"workload": "tpulab-hello 0.1.0"}
    assert record.summary.flops_per_step == 2 * 64**3 and record.summary.step_seconds.count == 3


@pytest.mark.slow
def test_a_plugin_workloads_own_figures_show_in_every_front_end_with_no_core_edit(tmp_path):
    """hello declares two figures of its own (`Workload.figures`): the sweep's table, the summary, a comparison,
    the CSV export and the notebook's result each show them as declared, and no module of tpulab names them."""
    import csv

    site = dist_info(tmp_path / "site", "tpulab-hello", "0.1.0", {plugins.WORKLOADS: {"hello": "tpulab_hello:HELLO"}})
    path = [EXAMPLE, site]
    swept = tpulab("sweep", "hello", "--size", "32,64", "--steps", "3", "--backend", "jax", path=path, home=tmp_path)
    assert swept.returncode == 0, swept.stderr[-2000:]
    assert "slowest product" in " ".join(swept.stdout.split())  # a column of the sweep's table
    records = sorted(Store(tmp_path / "results.db").records(), key=lambda r: r.params["size"])
    for r in records:
        steps = [s.seconds for s in r.steps if not s.warmup]
        assert r.summary.figures == {"matrix_bytes": 4.0 * r.params["size"] ** 2, "slowest_s": max(steps)}
    small, large = records
    shown = tpulab("results", "show", small.id, path=path, home=tmp_path)
    assert shown.returncode == 0 and "matrix" in shown.stdout and "4.0 KiB" in shown.stdout  # 32 x 32 x 4 bytes
    assert "slowest product" in shown.stdout
    compared = tpulab("results", "compare", small.id, large.id, path=path, home=tmp_path)
    row = next(line for line in compared.stdout.splitlines() if "slowest product" in line)
    assert row.count(" ms") + row.count(" us") + row.count(" s ") >= 2  # a cell per run, in seconds
    out = tmp_path / "runs.csv"
    assert tpulab("results", "export", "-o", str(out), "--format", "csv", path=path, home=tmp_path).returncode == 0
    rows = sorted(csv.DictReader(out.open()), key=lambda row: int(json.loads(row["params"])["size"]))
    assert [float(row["matrix_bytes"]) for row in rows] == [4.0 * 32**2, 4.0 * 64**2]
    script = "import tpulab; r = tpulab.results()[0]; print(r.figures['matrix_bytes']); print(repr(r))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [ROOT, *path])), "TPULAB_HOME": str(tmp_path)}
    notebook = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert notebook.returncode == 0, notebook.stderr[-2000:]
    assert notebook.stdout.split("\n")[0] == str(4.0 * 64**2) and "slowest product" in notebook.stdout


@pytest.mark.slow
def test_a_third_backend_registered_by_entry_point_runs_conv_to_the_store(tmp_path):
    site = dist_info(tmp_path / "site", "fake-numpy", "0.1",
                     {plugins.BACKENDS: {"numpy": "fake_numpy_backend:BACKEND"}})
    path = [ROOT / "tests" / "plugins", site]
    assert "numpy" in tpulab("--run", "conv", "--help", path=path, home=tmp_path).stdout  # a --backend choice
    done = tpulab("--run", "conv", "--no-ui", "--preset", "smoke", "--backend", "numpy", "--json", path=path,
                  home=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    record = Store(tmp_path / "results.db").records()[0]
    assert record.backend == "numpy" and record.status == "finished"
    assert record.plugins == {"backend": "fake-numpy 0.1"} and record.versions and "numpy" in record.versions
    assert record.summary.step_seconds.count == 5 and all(s.value is not None for s in record.steps)
    # What it cannot do is refused before a worker starts, in the backend's own words.
    refused = tpulab("--run", "conv", "--no-ui", "--preset", "smoke", "--backend", "numpy", "--processes", "2",
                     path=path, home=tmp_path)
    assert refused.returncode == 2 and "NumPy runs in one process" in refused.stderr
    unprofiled = tpulab("--run", "conv", "--no-ui", "--preset", "smoke", "--backend", "numpy", "--profile",
                        path=path, home=tmp_path)
    assert unprofiled.returncode == 2 and unprofiled.stderr.strip().splitlines() == [
        "tpulab: error: --profile means nothing on --backend numpy: it brings no profiler to trace a step with"]
    wrong = tpulab("--run", "fashion-mnist", "--no-ui", "--backend", "numpy", "--dataset", "synthetic",
                   path=path, home=tmp_path)
    assert wrong.returncode == 2 and "fashion-mnist does not run on --backend numpy" in wrong.stderr


@pytest.fixture
def host_jax(tmp_path) -> list[Path]:
    """A fourth backend, as a plugin installs it: one module and one entry point, nothing else."""
    site = dist_info(tmp_path / "site", "host-jax", "0.1", {plugins.BACKENDS: {"hostjax": "host_jax_backend:BACKEND"}})
    return [ROOT / "tests" / "plugins", site]


def test_tpulab_itself_knows_nothing_of_the_fourth_backend():
    named = [p for p in [ROOT / "pyproject.toml", *(ROOT / "tpulab").rglob("*.py")] if "hostjax" in p.read_text()]
    assert named == []


@pytest.fixture(scope="module")
def host_jax_sweep(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Store]:
    """A sweep of conv over two batch sizes on the fourth backend, 5 timed steps a point (the smoke preset's
    iterations), in a home of its own: what it said, its store. Each point is a conv run on that backend, kept as
    any run is."""
    home = tmp_path_factory.mktemp("host-jax-sweep")
    site = dist_info(home / "site", "host-jax", "0.1", {plugins.BACKENDS: {"hostjax": "host_jax_backend:BACKEND"}})
    done = tpulab("sweep", "conv", "--preset", "smoke", "--steps", "5", "--batch-size", "4,8", "--backend", "hostjax",
                  path=[ROOT / "tests" / "plugins", site], home=home)
    return done, Store(home / "results.db")


@pytest.mark.slow
def test_a_backend_on_jax_from_outside_runs_conv_to_the_store(host_jax_sweep):
    """The sweep's run of 8 images (`--run` itself with a plugin's backend: the third backend's test)."""
    done, store = host_jax_sweep
    assert done.returncode == 0, done.stderr[-2000:]
    [record] = [r for r in store.records() if r.params["batch_size"] == 8]
    assert record.backend == "hostjax" and record.status == "finished"
    assert record.plugins == {"backend": "host-jax 0.1"} and "jax" in record.versions
    assert record.device.strategy == "Mesh(1 x cpu)" and record.summary.step_seconds.count == 5


@pytest.mark.slow
def test_a_backend_on_jax_from_outside_trains_a_users_keras_model_to_the_store(tmp_path, host_jax):
    done = tpulab("--run", "model", "--model", str(ROOT / "examples" / "models" / "subclassed.py") + ":build",
                  "--input-shape", "64", "--no-ui", "--preset", "smoke", "--backend", "hostjax", path=host_jax,
                  home=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    record = Store(tmp_path / "results.db").records()[0]
    assert record.workload == "model" and record.backend == "hostjax" and record.status == "finished"
    assert record.model is not None and record.model["parameters"] == 64 * 256 + 256 + 256 * 10 + 10
    assert len(record.epochs) == 1 and record.epochs[0].metrics["loss"] > 0


@pytest.mark.slow
def test_a_backend_on_jax_from_outside_sweeps_conv_to_the_store(host_jax_sweep):
    done, store = host_jax_sweep
    assert done.returncode == 0, done.stderr[-2000:]
    [sweep] = store.sweeps()
    runs = store.sweep_runs(sweep)
    assert sweep.status == "finished" and sweep.axes == {"batch_size": [4, 8]}
    assert sorted((r.params["batch_size"], r.backend, r.status) for r in runs.values()) == \
        [(4, "hostjax", "finished"), (8, "hostjax", "finished")]


def test_a_broken_plugin_is_one_line_and_breaks_nothing_else(tmp_path):
    (tmp_path / "broken_plugin.py").write_text("import a_module_that_is_not_there\n")
    site = dist_info(tmp_path / "site", "broken-plugin", "0.3", {plugins.WORKLOADS: {"broken": "broken_plugin:W"}})
    path = [tmp_path, site]
    help_ = tpulab("--help", path=path, home=tmp_path, timeout=60)
    assert help_.returncode == 0 and "conv" in help_.stdout and "fashion-mnist" in help_.stdout
    line = ("workload 'broken' from broken-plugin 0.3 could not be loaded (broken_plugin:W): "
            "ModuleNotFoundError: No module named 'a_module_that_is_not_there'")
    assert line in " ".join(help_.stdout.split())
    detect = tpulab("detect", "--fast", path=path, home=tmp_path, timeout=60)
    assert detect.returncode == 0 and "broken-plugin 0.3" in detect.stdout
    assert "Traceback" not in help_.stderr + detect.stderr


def _modules() -> dict[str, Path]:
    return {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
            for p in (ROOT / "tpulab").rglob("*.py")}


def test_no_import_cycles_between_modules_lazy_and_type_checking_imports_included():
    """Two modules that need each other are one module, or a missing third; a cycle through an
    annotation is one too (its type belongs in a lower module)."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("tpulab", exclude_type_checking_imports=False, cache_dir=None)
    edges = {m: {i for i in graph.find_modules_directly_imported_by(m) if i.startswith("tpulab")}
             for m in graph.modules}
    assert strongly_connected(edges) == []


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other (Tarjan's algorithm), largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in list(edges):
        if v not in index:
            visit(v)
    return sorted(groups, key=len, reverse=True)


def backend_names() -> set[str]:
    """tpulab's own backends' names, and their short names ("tf")."""
    from tpulab.backends import registry

    found = [b for name, b in registry().items() if name in plugins.builtin(plugins.BACKENDS)]
    return {b.name for b in found} | {b.short for b in found}


def keyed_on_a_backend_name(source: str, names: set[str]) -> list[int]:
    """The lines of `source` where a backend's name is compared, branched on or looked up.

    A workload's `runners` mapping is the one place a name may appear: it is the declaration (the
    plugin API) of which function runs the workload on which backend, consulted by name only in
    `Workload.runner`.
    """
    tree = ast.parse(source)
    declared = {id(key) for node in ast.walk(tree) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "runners" for t in node.targets)
                for key in node.value.keys}
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in declared]


def per_backend(rel: str) -> bool:
    """A backend's own module, or a workload file written for one backend (`conv_tf.py`, `decode/jax.py`,
    `user_model_torch.py`)."""
    return rel.startswith("tpulab/backends/") or rel.endswith(("_tf.py", "_jax.py", "_torch.py", "/tf.py", "/jax.py",
                                                               "/torch.py", "_llamacpp.py", "/llamacpp.py"))


def test_nothing_outside_backends_and_per_backend_files_keys_on_a_backend_name():
    names = backend_names()
    assert {"tensorflow", "jax", "tf"} <= names
    found = [f"{rel}:{line}" for path in _modules().values()
             if not per_backend(rel := str(path.relative_to(ROOT)))
             for line in keyed_on_a_backend_name(path.read_text(), names)]
    assert found == []


def test_the_backend_name_check_finds_a_planted_comparison():
    names = backend_names()
    planted = 'def f(backend):\n    return backend == "jax"\n'
    assert keyed_on_a_backend_name(planted, names) == [2]
    assert keyed_on_a_backend_name('STEP = {"tf": 1}\nx = STEP.get("tensorflow")\n', names) == [1, 2]
    assert keyed_on_a_backend_name('runners = {"tensorflow": _tf, "jax": _jax}\n', names) == []
    assert per_backend("tpulab/workloads/conv_jax.py") and not per_backend("tpulab/workloads/conv.py")
    assert per_backend("tpulab/workloads/decode/jax.py") and not per_backend("tpulab/workloads/decode/loop.py")
    assert per_backend("tpulab/workloads/decode/llamacpp.py") and not per_backend("tpulab/workloads/shared/gguf_writer.py")


def test_a_workload_declares_what_its_charts_plot():
    """The lab knows no quantity by name: each chart of each workload plots from events alone."""
    from tpulab.base.charts import ChartContext
    from tpulab.base.events import PHASE_TRAIN, Step
    from tpulab.workloads.decode.figures import PHASE_DECODE, PHASE_PREFILL
    from tpulab.workloads.serve.live import Tally
    from tpulab.workloads import registry

    phases = ("", PHASE_TRAIN, PHASE_PREFILL, PHASE_DECODE)  # a step of each phase a run's steps come in
    load = Tally()  # and a serve run's load so far: two requests sent, one completed
    load.sent(0.0)
    load.sent(0.1)
    load.ended(Step(step=0, seconds=0.3, metrics={"ttft_s": 0.1, "tpot_s": 0.01}))
    for w in registry().values():
        ctx = ChartContext(w, flops_per_step=1e9, peak_flops=2e9)
        steps = [Step(step=3, seconds=0.5, examples_per_s=16.0, metrics={m.key: 0.5 for m in w.metrics}, phase=phase,
                      kernel={"kind": "matmul", "dtype": "float32", "size": 64, "flops": 2 * 64**3})
                 for phase in phases] + [load.step(0.5)]
        plotted = [[point for step in steps for point in chart.points(step, ctx)] for chart in w.charts]
        assert plotted and all(points for points in plotted), w.name


def test_the_article_backend_fills_records_from_before_backends_were_named(store):
    from tpulab.engine.store import Exported

    from .helpers import make_record

    old = make_record().to_json()
    del old["backend"]
    old["schema"] = 1

    store.import_records(Exported([old], []))
    assert store.get(old["id"]).backend == "tensorflow"


def test_the_plugin_example_is_what_the_contributors_guide_walks_through():
    guide = (ROOT / "CONTRIBUTING.md").read_text()  # development left the README for CONTRIBUTING.md
    for text in ("## Writing a workload", "## Writing a backend", "pip install ./examples/plugin",
                 "tpulab --run hello --no-ui"):
        assert text in guide
    assert 'hello = "tpulab_hello:HELLO"' in (EXAMPLE / "pyproject.toml").read_text()


# --- the backend contract -----------------------------------------------------------------------
class OldContract:
    """A backend written before `Runtime` was a class: its runtime is a module of functions."""

    name, title = "old", "Old"

    def runtime(self) -> object:
        return sys.modules[__name__]


def test_a_runtime_that_is_not_the_class_is_one_line_naming_what_is_missing():
    from tpulab.backends import Backend, BackendError

    class Old(OldContract, Backend):
        pass

    with pytest.raises(BackendError, match=r"^backend old: runtime\(\) returned module, not a tpulab.backends.Runtime: "
                                           r"subclass it \(define place and versions\)$"):
        Old().load()


def test_a_runtime_declares_everything_a_worker_asks_with_defaults_for_one_process():
    from tpulab.backends import DeviceError, Placement, Runtime

    class Minimal(Runtime):
        def place(self, device: str, shards: int) -> Placement:
            return Placement("cpu", "host", shards, "none", ["host"] * shards)

        def versions(self) -> dict[str, str]:
            return {"minimal": "1.0"}

    with pytest.raises(TypeError, match="place"):
        Runtime()  # type: ignore[abstract]
    rt = Minimal()
    assert rt.memory_stats() is None and rt.cache_hit() is None and rt.keras_step_cost(None, None, None) == (None, None)
    assert rt.gather([1.0, 2.0]) == [[1.0, 2.0]] and rt.probe() == {"minimal": "1.0"}
    assert rt.keras_jit(True) is True and rt.keras_jit(False) is False
    with pytest.raises(DeviceError, match="this backend brings no profiler"):
        rt.profiler()  # a backend that profiles says so once, as no_profiler = None, and brings one here


def test_jax_reads_a_worker_that_could_not_join_from_its_stderr():
    from tpulab.backends import get

    stderr = ("E1201 15:40:02.123456 4242 coordination_service_agent.cc:332] Coordination agent is set to be in "
              "error state: DEADLINE_EXCEEDED: Deadline Exceeded\nAdditional GRPC error information from remote "
              "target coordination_service while calling /tensorflow.CoordinationService/RegisterTask:\n")
    jax = get("jax")
    assert jax.death(stderr, 2) == ("could not join the other 1 process(es) in time (is every process started, "
                                    "with the same --coordinator?)")
    assert jax.death(stderr, 1) is None and jax.death("Killed\n", 2) is None
    assert get("tensorflow").death(stderr, 2) is None  # another framework's words mean nothing to it


def test_which_runner_runs_a_workload_has_one_answer():
    from tpulab.backends import get
    from tpulab.workloads import registry

    conv, mnist = registry()["conv"], registry()["fashion-mnist"]
    assert conv.runner(get("jax")) is conv.runners["jax"]  # its own declaration
    assert mnist.runner(get("tensorflow")) is mnist.runner(get("jax"))  # the shared Keras runner
    assert conv.runs_on(get("jax")) and conv.backends() == ["tensorflow", "jax", "torch"]
