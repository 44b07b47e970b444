"""`tpulab top`: the real app under pilot at 80x24, and who holds the accelerators, from fake /proc and /dev trees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import psutil
import pytest
from textual.widgets import DataTable, Static

import tpulab.engine.worker
from tpulab.base import fmt
from tpulab.lab.top import HelpPanel, TopApp, bar, core_lines
from tpulab.machine.holders import GpuHolders, Holder, tpu_holders

from .helpers import ROOT

SIZE = (80, 24)
GiB = 2**30
WORKER = [sys.executable, "-m", tpulab.engine.worker.__name__]  # how RunHandle starts a run's process
CONV = json.dumps({"workload": "conv", "backend": "jax", "params": {"batch_size": 8}})


async def wait_for(pilot, condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.1)


def process(root: Path, pid: int, argv: list[str], fds: dict[str, str]) -> None:
    """A fake /proc/PID: its command line and its open files (fd number: where the link points)."""
    (root / f"proc/{pid}/fd").mkdir(parents=True)
    (root / f"proc/{pid}/cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    for fd, target in fds.items():
        os.symlink(target, root / f"proc/{pid}/fd/{fd}")


def tpu_machine(root: Path) -> Path:
    """A TPU VM's /dev and /proc: a tpulab run holds accel0, a script holds VFIO group 1."""
    for node in ("dev/accel0", "dev/accel1", "dev/vfio/1", "dev/vfio/vfio", "dev/null"):
        (root / node).parent.mkdir(parents=True, exist_ok=True)
        (root / node).touch()
    process(root, 4242, [*WORKER, CONV], {"0": "/dev/null", "7": "/dev/accel0"})  # as the kernel writes it
    process(root, 4300, ["python3", "train.py"], {"3": str(root / "dev/vfio/1"), "4": str(root / "dev/vfio/vfio")})
    process(root, 4400, ["bash"], {"0": "/dev/null"})
    return root


# --- the app -----------------------------------------------------------------------------------
async def test_per_core_bars_come_from_psutil_and_the_chart_fills():
    app = TopApp([], interval_s=0.25)
    async with app.run_test(size=SIZE) as pilot:
        plot = app.charts["CPU"]
        await wait_for(pilot, lambda: len(plot.points("busy")) >= 3 and "┤" in plot.render().plain)  # drawn, with its axis
        lines = str(app.query_one("#cpu", Static).content).splitlines()
        assert len(app.cores) == psutil.cpu_count()
        assert lines[0].startswith(f"CPU ({psutil.cpu_count()} cores)")
        shown = " ".join(lines[1:])
        for i, busy in enumerate(app.cores):
            assert f"{i} " in shown and fmt.pct(busy) in shown
        memory = [y for _, y in plot.points("mem")]
        vm = psutil.virtual_memory()
        assert abs(memory[-1] - (vm.total - vm.available) / vm.total * 100) < 5  # the host's memory in use
        assert "━ busy  ━ mem" in plot.render().plain.splitlines()[0]  # the header names both lines
        assert "no accelerator detected" in str(app.query_one("#holders-title", Static).content)


async def test_q_quits_and_question_mark_opens_the_help_escape_closes_it():
    app = TopApp([], interval_s=1.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpPanel)
        assert "quit" in str(app.screen.query_one("#top-help", Static).content)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpPanel)
        await pilot.press("question_mark", "question_mark")  # ? again closes it too
        assert not isinstance(app.screen, HelpPanel)
        footer = [key for key, active in app.active_bindings.items() if active.binding.show]
        assert footer[:2] == ["q", "question_mark"]  # the most important keys first
        await pilot.press("q")
        await pilot.pause()
        assert app.return_code == 0 and not app.is_running


async def test_count_closes_the_app_after_that_many_samples():
    app = TopApp([], interval_s=0.25, count=2)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: not app.is_running)
    assert app.taken == 2


async def test_a_tpu_shows_its_chart_and_the_run_holding_it(tmp_path, monkeypatch):
    """libtpu's monitoring SDK faked at the edge (one chip, 40% busy, 8 of 16 GiB), the machine's tree faked."""
    metrics = {"tensorcore_util": ["40.0"], "duty_cycle_pct": ["55.0"], "hbm_capacity_usage": [str(8 * GiB)],
               "hbm_capacity_total": [str(16 * GiB)]}
    monitoring = types.SimpleNamespace(list_supported_metrics=lambda: list(metrics),
                                       get_metric=lambda name: types.SimpleNamespace(data=lambda: metrics[name]))
    sdk = types.ModuleType("libtpu.sdk")
    sdk.tpumonitoring = monitoring  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "libtpu", types.ModuleType("libtpu"))
    monkeypatch.setitem(sys.modules, "libtpu.sdk", sdk)
    app = TopApp(["tpu"], interval_s=0.25, root=tpu_machine(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one("#holders", DataTable)
        await wait_for(pilot, lambda: "TPU 0" in app.charts and table.row_count == 2)
        plot = app.charts["TPU 0"]
        await wait_for(pilot, lambda: plot.points("mem"))
        assert plot.points("busy")[-1][1] == 40.0 and plot.points("mem")[-1][1] == 50.0
        # once laid out: what fits in half of 80 columns beside the series' names
        await wait_for(pilot, lambda: plot.title == "TPU 0: 40%, 8.0/16 GiB", timeout=5)
        await wait_for(pilot, lambda: "┤" in plot.render().plain)
        assert "100┤" in plot.render().plain and " 0┤" in plot.render().plain  # percentages: 0 to 100, not 40 to 50
        rows = [list(map(str, table.get_row_at(i))) for i in range(table.row_count)]  # cells are Text
        assert rows[0] == ["/dev/accel0", "4242", "-", "conv on jax", " ".join([*WORKER, CONV])]
        assert rows[1] == ["/dev/vfio/1", "4300", "-", "-", "python3 train.py"]
        assert str(app.query_one("#holders-title", Static).content) == "Processes on the accelerators: 2"


def test_top_imports_no_framework():
    """It must never hold a device a run needs: the app, run to its end, imported no framework."""
    code = ("import asyncio, sys; from tpulab.cli.top import cmd_top; from tpulab.lab.top import TopApp; "
            "app = TopApp([], 0.25, count=1); asyncio.run(app.run_async(headless=True)); "
            "print(app.taken, sorted(m for m in ('tensorflow', 'jax', 'keras', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "[]"]


def test_bars_fill_in_eighths_of_a_cell_and_many_cores_get_a_column_each():
    assert bar(50, 10) == "█████     "
    assert bar(6.25, 2) == "▏ "
    assert bar(100, 4) == "████" and bar(0, 3) == "   "
    assert [line.plain for line in core_lines([25.0, 100.0], 78)] == [f"0 {bar(25, 31)}  25% 1 {bar(100, 31)} 100% "]  # 39 columns each
    many = core_lines([0.0, 50.0, 100.0] * 70, 78)  # 210 cores: as bars they would take 70 rows
    assert len(many) == 3 and many[0].plain.startswith("  0  ▄█ ▄█") and many[1].plain.startswith(" 74 ")
    assert all(len(line) <= 78 for line in many)


# --- who holds a TPU -----------------------------------------------------------------------------
def test_tpu_holders_are_the_processes_with_a_tpu_node_open(tmp_path):
    found = tpu_holders(tpu_machine(tmp_path))
    assert found.found == [
        Holder("/dev/accel0", 4242, " ".join([*WORKER, CONV]), "conv on jax"),
        Holder("/dev/vfio/1", 4300, "python3 train.py", None),  # the VFIO container node is no chip
    ]


def test_no_tpu_node_means_no_scan(tmp_path):
    process(tmp_path, 4242, [*WORKER, CONV], {"7": "/dev/accel0"})  # a link, but no such node here
    assert tpu_holders(tmp_path).found == []


@pytest.mark.parametrize("args, run", [
    ([CONV], "conv on jax"),
    (["--standby", "tensorflow"], "a tensorflow run (pre-started worker)"),
    (["--probe", "jax"], "jax probe"),
])
def test_each_kind_of_tpulab_worker_is_named(tmp_path, args, run):
    tpu_machine(tmp_path)
    process(tmp_path, 5000, [*WORKER, *args], {"3": "/dev/accel1"})
    assert [h.run for h in tpu_holders(tmp_path).found if h.pid == 5000] == [run]


# --- who holds a GPU -----------------------------------------------------------------------------
def fake_nvml(processes: dict[int, list[tuple[int, int | None]]]) -> types.ModuleType:
    """nvidia-ml-py as far as tpulab asks it: compute processes per device index, (pid, bytes used); every
    GPU 75% busy, 20 of 80 GiB, 250 W, 60 C (no clock, no energy counter: said unavailable)."""
    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = lambda: None  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCount = lambda: len(processes)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetComputeProcesses = lambda h: [  # type: ignore[attr-defined]
        types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in processes[h[1]]]
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=75)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=20 * GiB, total=80 * GiB)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetPowerUsage = lambda h: 250_000  # type: ignore[attr-defined]  # mW
    nvml.nvmlDeviceGetTemperature = lambda h, sensor: 60  # type: ignore[attr-defined]
    nvml.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
    return nvml


def gpu_machine(root: Path) -> Path:
    """Two GPUs' nodes; a tpulab run uses GPU 1; PID 77 here is sshd, no GPU user."""
    for node in ("dev/nvidia0", "dev/nvidia1", "dev/nvidiactl", "dev/null"):
        (root / node).parent.mkdir(parents=True, exist_ok=True)
        (root / node).touch()
    process(root, 4242, [*WORKER, CONV], {"5": "/dev/nvidiactl", "6": "/dev/nvidia1"})
    process(root, 77, ["sshd"], {"0": "/dev/null"})
    return root


NVML_PROCESSES = {0: [(77, 3 * GiB)], 1: [(4242, GiB), (90001, None)]}  # 77 and 90001: the host's PIDs


def test_gpu_holders_come_from_nvml_attributed_by_device(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(NVML_PROCESSES))
    found = GpuHolders(gpu_machine(tmp_path)).read().found
    assert found == [
        Holder("GPU 0", 77, None, None, 3.0 * GiB),  # this namespace's 77 holds no GPU: not NVML's 77
        Holder("GPU 1", 4242, " ".join([*WORKER, CONV]), "conv on jax", 1.0 * GiB),
        Holder("GPU 1", 90001, None, None, None),  # no such process here, its memory not known
    ]


async def test_gpus_show_their_charts_and_processes(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(NVML_PROCESSES))
    app = TopApp(["gpu"], interval_s=0.25, root=gpu_machine(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one("#holders", DataTable)
        await wait_for(pilot, lambda: "GPU 1" in app.charts and table.row_count == 3)
        rows = [list(map(str, table.get_row_at(i))) for i in range(table.row_count)]  # cells are Text
        assert rows == [["GPU 0", "77", "3.0 GiB", "-", "-"],
                        ["GPU 1", "4242", "1.0 GiB", "conv on jax", " ".join([*WORKER, CONV])],
                        ["GPU 1", "90001", "-", "-", "-"]]
        plot = app.charts["GPU 1"]
        await wait_for(pilot, lambda: plot.title == "GPU 1: 75%, 20/80 GiB", timeout=5)  # 250 W does not fit
        assert plot.points("busy")[-1][1] == 75.0 and plot.points("mem")[-1][1] == 25.0


async def test_without_nvidia_ml_py_the_processes_say_why(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    app = TopApp(["gpu"], interval_s=0.25, root=gpu_machine(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        title = app.query_one("#holders-title", Static)
        await wait_for(pilot, lambda: "unavailable" in str(title.content))
        assert str(title.content) == "GPU processes unavailable: nvidia-ml-py is not installed: pip install 'tpulab[gpu]'"
        assert list(app.charts) == ["CPU"]  # no GPU figures either, and no chart of dashes
