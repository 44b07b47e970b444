"""The Python API and the notebook: values checked, real worker runs kept in a real store, HTML that
holds the figures, a report that loads nothing from the network, and a real Jupyter kernel running
the example notebook."""

from __future__ import annotations

import _thread
import os
import re
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

import tpulab
from tpulab.base.events import Compiled, Device, Started, Step
from tpulab.base.timing import median
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec
from tpulab.engine.store import Store, default_path
from tpulab.machine.detect import detect
from tpulab.notebook import api
from tpulab.notebook.live import Throttled, progress_line
from tpulab.notebook.results import RunResult
from tpulab.workloads import registry
from tpulab.workloads.base import ParamError

from .helpers import ROOT, TF, make_record, run_cli, v5e_tree

HEAVY = ("keras", "tensorflow", "jax", "textual", "IPython", "matplotlib", "pandas", "torch")
URL_ATTR = re.compile(r"""(?:src|href|@import|url\()\s*=?\s*["']?\s*(?:https?:)?//""", re.I)


def test_import_tpulab_and_its_api_names_load_no_framework_ui_or_plotting():
    code = ("import sys, tpulab; names = [tpulab.run, tpulab.sweep, tpulab.results, tpulab.compare, tpulab.detect, "
            "tpulab.RunResult]; print(sorted(m for m in " + repr(HEAVY) + " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert set(tpulab.__all__) == {"__version__", *tpulab._LAZY}
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        tpulab.nothing  # noqa: B018


def test_bad_values_raise_one_error_naming_the_parameter_and_its_range():
    with pytest.raises(ParamError, match=r"^batch_size must be an integer from 1 to 4096 \(got '0'\)$") as e:
        tpulab.run("conv", preset="smoke", batch_size=0)
    assert e.value.param == "batch_size" and isinstance(e.value, ValueError)
    with pytest.raises(ParamError, match="conv has no parameter 'zzz': it takes batch_size, image_size"):
        tpulab.run("conv", zzz=8)
    with pytest.raises(ParamError, match="preset must be one of smoke, article"):
        tpulab.run("conv", preset="huge")
    with pytest.raises(ParamError, match="workload must be one of conv, fashion-mnist"):
        tpulab.sweep("zzz", batch_size=[8, 16])
    with pytest.raises(ParamError, match=r"^padding must be one of SAME, VALID"):
        tpulab.sweep("conv", preset="smoke", padding=["SAME", "FULL"])
    with pytest.raises(ParamError, match="steps must be an integer from 1 to 100000"):
        tpulab.sweep("conv", preset="smoke", steps=0, batch_size=[8, 16])
    with pytest.raises(ParamError, match="status must be one of finished, failed, cancelled"):
        tpulab.results(status="done")
    assert not default_path().exists()  # nothing ran, nothing was kept


def test_a_typo_is_answered_with_the_nearest_name_as_the_command_line_does():
    with pytest.raises(ParamError, match=r"^unknown workload 'convv'; did you mean conv\?$") as e:
        tpulab.run("convv")
    assert e.value.param == "workload"
    with pytest.raises(ParamError, match=r"^unknown workload 'resnet'; did you mean resnet50\?$"):
        tpulab.sweep("resnet", batch_size=[8, 16])
    with pytest.raises(ParamError, match=r"^conv has no parameter 'batchsize'; did you mean batch_size\?$") as e:
        tpulab.run("conv", batchsize=8)
    assert e.value.param == "batchsize"


def test_a_mistyped_preset_is_answered_with_the_nearest_one():
    """Issue 64, item 18: `preset="smok"` named the presets but not the one meant, where other names had the nearest."""
    with pytest.raises(ParamError, match=r"^preset must be one of smoke, article, article-sharded \(got 'smok'\); "
                                         r"did you mean smoke\?$") as e:
        tpulab.run("conv", preset="smok")
    assert e.value.param == "preset"
    with pytest.raises(ParamError, match=r"did you mean smoke\?$"):
        tpulab.sweep("conv", preset="smok", batch_size=[8, 16])


def test_print_of_a_run_and_of_the_results_fits_the_terminal(monkeypatch):
    """Issue 64, item 18: at COLUMNS=80, `print(r)` and `print(tpulab.results())` drew 99-column tables; now as wide
    as the terminal says, the listing fitted as the command line fits it (its id and figures whole)."""
    store = Store(default_path())
    for backend in ("tensorflow", "llamacpp", "torch"):
        store.save(make_record(workload="decode", backend=backend))
    store.save(make_record(1, 0.5))
    for width in (80, 60, 120):
        monkeypatch.setenv("COLUMNS", str(width))
        runs = tpulab.results()
        drawn = {"listing": repr(runs), "run": repr(runs[0]), "comparison": repr(tpulab.compare(runs[1], runs[2]))}
        for what, shown in drawn.items():
            assert max(map(len, shown.splitlines())) <= width, (what, width, shown)
        assert all(r.short_id in drawn["listing"] for r in runs) and "median" in drawn["listing"]
    monkeypatch.setenv("COLUMNS", "80")
    assert "llama.cpp" in repr(tpulab.results()) and "backend" in repr(tpulab.results())  # item 15 there too


def test_a_kernel_holding_the_tpu_is_named_instead_of_a_worker_waiting(tmp_path, monkeypatch):
    monkeypatch.setattr("tpulab.machine.detect.detect",
                        lambda: detect(v5e_tree(tmp_path), {}, {**TF, "jax": "0.6.0", "libtpu": "0.0.15"}))
    bridge = types.ModuleType("jax._src.xla_bridge")
    bridge._backends = {"tpu": object()}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jax._src.xla_bridge", bridge)
    monkeypatch.delitem(sys.modules, "tensorflow.python.eager.context", raising=False)  # (whatever ran before)
    with pytest.raises(tpulab.AcceleratorBusy, match="initialised JAX, which now holds the TPU.*device='cpu'"):
        tpulab.run("conv", preset="smoke", device="tpu", backend="jax")
    assert api.kernel_holds("cpu") is None and api.kernel_holds("gpu") is None
    bridge._backends = {}  # type: ignore[attr-defined]  # JAX imported but not initialised: the TPU is free
    assert api.kernel_holds("tpu") is None


def test_the_kernel_check_asks_each_backend_whether_it_holds_the_tpu(monkeypatch):
    """TensorFlow's eager context, faked at the edge: its backend says it holds the TPU, JAX's does not."""
    from tpulab.backends import get

    monkeypatch.delitem(sys.modules, "jax._src.xla_bridge", raising=False)
    context = types.ModuleType("tensorflow.python.eager.context")
    context.context = lambda: types.SimpleNamespace(_context_handle=object())  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tensorflow.python.eager.context", context)
    assert get("tensorflow").holds_device() and not get("jax").holds_device()
    assert "has initialised TensorFlow, which now holds the TPU" in api.kernel_holds("tpu")
    context.context = lambda: types.SimpleNamespace(_context_handle=None)  # type: ignore[attr-defined]
    assert not get("tensorflow").holds_device() and api.kernel_holds("tpu") is None


def test_run_html_holds_the_figures_and_its_charts():
    r = RunResult(make_record(1, 0.5))
    page = r._repr_html_()
    assert f"conv run {r.record.short_id}: finished" in page
    assert "500.0 ms (p10" in page and "first call (trace+compile)" in page and "16 examples/s" in page
    assert page.count("<svg") == 1 and "ms per iteration" in page and "GFLOP/s" in page
    assert not URL_ATTR.search(page)
    assert r.step_seconds.tolist() == [0.45, 0.5, 0.55, 0.5]
    assert r.throughput.tolist() == pytest.approx([8 / 0.45, 16.0, 8 / 0.55, 16.0])
    assert r.to_dict()["id"] == r.id and r.params["batch_size"] == 8  # the record's fields, through the result
    assert r.to_pandas()["seconds"].tolist() == [0.45, 0.5, 0.55, 0.5]
    assert "conv run" in repr(r) and "steady iteration time" in repr(r)


def test_a_runs_summary_says_how_big_its_problem_was():
    """'1.9 GFLOP/s, 0.9% of peak' on a 32 px conv is a tiny problem, not a slow machine: the summary (this HTML,
    the terminal's table, the lab's) says the size the workload declares; one that declares none, nothing."""
    record = make_record()
    record.params.update(image_size=32, filters=16)
    page = RunResult(record)._repr_html_()
    assert "problem size" in page and "image size 32 px, channels 3, filters 16, kernel size 5 px, stride 2 px" in page
    assert "problem size" not in RunResult(make_record(workload="fashion-mnist"))._repr_html_()


def test_comparison_html_and_a_report_that_loads_nothing_from_the_network(tmp_path):
    store = Store(default_path())
    a, b = make_record(1, 2.0), make_record(4, 0.5, backend="jax")
    for r in (a, b):
        store.save(r)
    cmp = tpulab.compare(a.id[:8], RunResult(b))
    assert cmp.speedups.tolist() == [1.0, 4.0]
    assert "4.00x" in cmp._repr_html_() and "<svg" in cmp._repr_html_()
    assert [row["speedup"] for row in cmp.to_dict()["rows"]] == [1.0, 4.0]
    cnn = make_record(1, 0.25, workload="fashion-mnist")  # another model: side by side by the rate of its work
    across = tpulab.compare(a, cnn)
    assert across.by == "GFLOP/s" and across.speedups.tolist() == [1.0, 8.0]
    assert across.warnings == ["workloads differ: conv vs fashion-mnist"] and "different models" in across.header
    out = tmp_path / "cmp.html"
    done = run_cli("results", "report", a.id[:8], b.id[:8], "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and f"comparison of run {a.short_id}, run {b.short_id}" in page
    assert "speedup" in page and "4.00x" in page and page.count("<table") == 3 and page.count("<svg") == 3
    assert not URL_ATTR.search(page) and "<script" not in page and "<link" not in page
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {"http://www.w3.org/2000/svg",
                                                              "http://www.w3.org/1999/xlink"}
    missing = run_cli("results", "report", "feedbeef", "-o", str(tmp_path / "x.html"))
    assert missing.returncode == 2 and "no run or sweep 'feedbeef'" in missing.stderr
    assert not (tmp_path / "x.html").exists()


def test_results_are_newest_first_filtered_and_paged():
    store = Store(default_path())
    records = [make_record(1, 1.0 + i / 10) for i in range(5)] + [make_record(status="cancelled")]
    for r in records:
        store.save(r)
    newest = [r.id for r in store.records()]
    page = tpulab.results(limit=2, offset=1)
    assert [r.id for r in page] == newest[1:3] and "(2-3 of 6)" in page.caption
    assert [r.status for r in tpulab.results(status="cancelled")] == ["cancelled"]
    assert len(tpulab.results(workload="fashion-mnist")) == 0
    assert page._repr_html_().count("<tr>") == 1 + 2 and page.to_pandas()["id"].tolist() == newest[1:3]


def test_live_updates_are_throttled_and_the_last_state_is_drawn():
    """A thousand fast steps do not flood the cell: one update per interval, plus the forced ones."""
    pytest.importorskip("IPython")
    now = [0.0]
    drawn: list[str] = []
    handle = types.SimpleNamespace(update=lambda obj: drawn.append(obj.data))
    view = Throttled(handle, lambda: f"at {now[0]:.3f}", interval=1.0, clock=lambda: now[0])
    view(force=True)
    for _ in range(999):
        now[0] += 0.002  # 2 ms steps: just under two seconds in all
        view()
    assert len(drawn) == 1 + 1 and view.pending  # the start, then one a second
    view(force=True)
    assert drawn[-1] == "at 1.998" and not view.pending


def test_the_live_line_shows_the_median_timing_reports_on_an_even_count():
    """Four steady steps: the median is the mean of the middle two, as every summary has it."""
    w = registry()["conv"]
    rec = RunRecorder(RunSpec(w, {**w.defaults(), "device": "cpu"}, "tensorflow", "asked for", "cpu"), detect())
    rec.feed(Started(workload="conv", device=Device(kind="cpu", name="test CPU", replicas=1), dtype="float32",
                     flops_per_step=1e9, steps_total=9, per_replica_batch=8, backend="tensorflow"))
    rec.feed(Compiled(seconds=1.0))
    for i, s in enumerate((0.1, 0.2, 0.4, 0.8), 1):
        rec.feed(Step(step=i, seconds=s))
    assert median(rec.steady_seconds()) == pytest.approx(0.3)
    assert "median 300.0 ms" in progress_line(rec)


@pytest.mark.slow
def test_run_goes_through_a_worker_and_is_kept():
    seen: list[str] = []
    r = tpulab.run("conv", preset="smoke", device="cpu", backend="jax", iterations=3,
                   on_event=lambda e: seen.append(e.name))
    assert r.status == "finished" and seen[0] == "started" and seen[-1] == "finished"
    assert len(r.step_seconds) == 3 and (r.step_seconds > 0).all() and r.median is not None
    assert Store(default_path()).get(r.id) == r.record
    assert tpulab.results()[0].id == r.id


@pytest.mark.slow
def test_a_convs_steps_are_its_own_phase_in_the_frame():
    """The convolution times a forward op through the timer's predict hooks: its steps are its one phase (""), not
    "predict", which a training run's inference phase is."""
    r = tpulab.run("conv", preset="smoke", device="cpu", backend="jax", iterations=3, live=False, save=False)
    assert r.to_pandas()["phase"].tolist() == [""] * 4  # the warm-up, then 3


@pytest.mark.slow
def test_interrupting_stops_after_the_step_keeps_the_run_and_reraises():
    """Ctrl+C in the caller's thread, as a notebook's interrupt: the worker ends its step, the record is kept."""
    steps: list[Step] = []

    def on_event(event):
        if isinstance(event, Step):
            steps.append(event)
            if len(steps) == 2:
                threading.Timer(0.01, _thread.interrupt_main).start()

    # Python's own Ctrl+C, as a kernel has it: a suite started in the background (`make test &`) inherits SIGINT
    # ignored, and interrupt_main then does nothing
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt, match="is kept as cancelled"):
            tpulab.run("conv", preset="smoke", device="cpu", backend="jax", iterations=100000, warmup=0,
                       on_event=on_event)
    finally:
        signal.signal(signal.SIGINT, before)
    [kept] = Store(default_path()).records()
    assert kept.status == "cancelled" and 2 <= len(kept.steps) < 100000


@pytest.mark.slow
def test_sweep_runs_each_point_and_keeps_it_with_the_sweep():
    s = tpulab.sweep("conv", preset="smoke", device="cpu", backend="jax", batch_size=[8, 128], steps=2)
    assert s.status == "finished" and s.axes == {"batch_size": [8, 128]}
    assert len(s.points) == 2  # 128 is the article's batch: no extra point
    assert s.best is not None and s.best.examples_per_s == max(s.throughput)
    store = Store(default_path())
    assert store.get_sweep(s.id).id == s.id and len(store.records()) == 2
    assert all(r.record.sweep == s.id for r in s.runs)
    page = s._repr_html_()
    assert page.count("<tr") == 1 + 2 and "examples/s against batch size" in page and "<svg" in page
    assert s.to_pandas()["batch_size"].tolist() == [8, 128]
    out = default_path().parent / "sweep.html"
    done = run_cli("results", "report", s.id[:8], "-o", str(out))
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert f"tpulab: sweep {s.id[:8]}" in page and page.count("<svg") == 1 and "best: batch_size" in page


def _execute(nb_path: Path, params: str, workdir: Path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(nb_path, as_version=4)
    [cell] = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    cell.source = params
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(workdir)}}).execute()
    return nb


@pytest.mark.slow
def test_the_example_notebook_runs_in_a_real_kernel(tmp_path, monkeypatch, quick_compiles):
    """examples/colab.ipynb at tiny sizes, in a real Jupyter kernel importing this tpulab."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    # Every run on JAX, as Colab ships it (no TensorFlow), its programs compiled quickly (see conftest)
    tiny = ('CONV = dict(preset="smoke", iterations=3, warmup=1, backend="jax")\n'
            'CNN = dict(preset="smoke", epochs=1, steps_per_epoch=3, batch_size=32, validation=False, '
            'dataset="synthetic", backend="jax")\n'
            'SWEEP = dict(preset="smoke", batch_size=[8, 128], steps=2, backend="jax")\n'  # 128: no extra point
            'FIT_EXAMPLES = 128\n')
    nb = _execute(ROOT / "examples" / "colab.ipynb", tiny, tmp_path)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    htmls = [o.data["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert all('class="tpulab"' in h for h in htmls)  # every HTML output is tpulab's own, none a stray console's
    assert any("tpulab runtime" in h for h in htmls)
    [shown] = [o for o in outputs if o.output_type == "execute_result" and "speedup" in o.data.get("text/html", "")]
    assert "speedup" in shown.data["text/plain"]  # the plain repr too, for frontends without HTML
    assert any("conv run" in h and ": finished" in h and "<svg" in h for h in htmls)
    assert any("fashion-mnist run" in h and "final loss" in h for h in htmls)
    assert any("sweep " in h and "examples/s against batch size" in h for h in htmls)
    assert any("speedup" in h for h in htmls)
    assert any("fit run" in h and "small cnn" in h for h in htmls)
    assert any("runs in " in h and "newest first" in h for h in htmls)
    kept = Store(default_path()).records()
    accelerator = detect().default_device  # what the notebook's `rt.accelerator` decides on
    if accelerator == "cpu":  # this host has none: the cell says so and runs nothing
        assert "no accelerator here" in text
    else:  # this host has one: the cell runs conv on it
        assert "no accelerator here" not in text
        assert any(r.workload == "conv" and r.device and r.device.kind == accelerator for r in kept)
    assert {r.workload for r in kept} == {"conv", "fashion-mnist", "fit"}
    fit = next(r for r in kept if r.workload == "fit")
    assert fit.status == "finished" and fit.summary.examples_per_s and fit.summary.peak_fraction is None
    assert len(fit.steps) == 2 * (128 // 64) - 1 and fit.params["model"] == "small cnn"
    assert (tmp_path / "tpulab-report.html").read_text().count("<svg") >= 2


def _workers_of_this_process() -> list[str]:
    """The worker processes this test process started that are still alive."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and "tpulab.engine.worker" in cmdline:
            alive.append(cmdline)
    return alive


@pytest.mark.slow
def test_an_error_in_the_callers_display_ends_the_run_instead_of_leaving_its_worker():
    def on_event(event):
        if isinstance(event, Step):
            raise RuntimeError("the display broke")

    with pytest.raises(RuntimeError, match="the display broke"):
        tpulab.run("conv", preset="smoke", device="cpu", backend="jax", iterations=100000, warmup=0,
                   on_event=on_event)
    deadline = time.monotonic() + 30
    while _workers_of_this_process() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _workers_of_this_process() == []


@pytest.mark.slow
def test_interrupting_a_real_kernel_stops_the_loop_and_keeps_the_measured_run(monkeypatch):
    """The kernel's interrupt, as the notebook's stop button sends it, during a loop of long runs."""
    manager = pytest.importorskip("jupyter_client.manager")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    km, kc = manager.start_new_kernel(kernel_name="python3")
    try:
        msg_id = kc.execute("import tpulab\nfor _ in range(3):\n    tpulab.run('conv', preset='smoke', device='cpu', "
                            "backend='jax', iterations=100000, warmup=0)")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # until the live cell shows measured steps
            msg = kc.get_iopub_msg(timeout=180)
            html_out = msg["content"].get("data", {}).get("text/html", "")
            if msg["parent_header"].get("msg_id") == msg_id and "of 100001 iterations, median" in html_out:
                break
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=120)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=120)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
    [kept] = Store(default_path()).records()  # the loop stopped at its first run
    assert kept.status == "cancelled" and 1 <= len(kept.steps) < 100000
