"""The fleet card (`tpulab bench --ray`): a card on every node of a real Ray cluster on loopback (its nodes raylets
of one host, with different CPUs), kept as one fleet; the node with half the CPUs named the straggler, with why; a
node killed mid-card named failed; a cancel keeping what came back. Then the fleet's view on hand-made cards (no
Ray): stragglers only beyond the noise, groups by hardware, two fleets compared as two cards are."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest
from rich.console import Console

from tpulab.engine import bench
from tpulab.engine.card import Card, CardCeiling, CardEntry, CardSuite, Fleet, FleetNode
from tpulab.engine.fleet import FleetBench, FleetProgress, NodeInfo, RayMissing, listed, matches, schedule
from tpulab.engine.fleet_view import analyse, median_cards
from tpulab.engine.store import SCHEMA_VERSION, Store
from tpulab.views import card as card_view
from tpulab.views import fleet as fleet_view

from .helpers import run_cli

# A tiny suite: the smoke roofline (it sets no ceiling, and says why) and a conv of tens of milliseconds a step: a
# node on one busy core is detectably slower.
SUITE = bench.Suite("test-fleet", 1, ceilings=bench.Entry("roofline", {"preset": "smoke"}, {}, (), ()), entries=(
    bench.Entry("conv", {"preset": "smoke", "batch_size": 32, "image_size": 256, "filters": 64}, {"iterations": 10},
                (bench.Headline("conv", "gflops_per_s", "GFLOP/s"),), ("iterations",)),))
FAST_DEATH = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three raylets on this host: the head with 2 CPUs (resource `big`), a node with 1 (`small`), and a node that
    declares 2 but was started on one core (`pinned`); the nodes' tpulab keeps its files in a folder of the tests'."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as m:
        m.setenv("TPULAB_HOME", str(tmp_path_factory.mktemp("nodes-home")))
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"big": 1},
                                                          "_system_config": FAST_DEATH})
        c.add_node(num_cpus=1, resources={"small": 1})
        mask = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(mask)})  # as `taskset -c 0`: the raylet and every process it starts inherit it
        try:
            c.add_node(num_cpus=2, resources={"pinned": 1})
        finally:
            os.sched_setaffinity(0, mask)
        c.wait_for_nodes()
    yield c
    c.shutdown()


class BusyCore:
    """A process spinning on core 0 while the 1-CPU node's card runs there (from its start to its card back): that
    node has half the CPUs and a busy neighbour on its one core. Half the CPUs alone is not reliably slower on a
    2-core host that anything else loads (its two cores are then shared too, and a single-threaded step gains
    nothing from a second core); one core of two beside a busy process is, for steps longer than the scheduler's
    slices (the conv's here, tens of milliseconds)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.small: str | None = None  # the 1-CPU node's label

    def __call__(self, p: FleetProgress) -> None:
        if p.kind == "started" and p.node == self.small and self.proc is None:
            first = min(os.sched_getaffinity(0))  # the core the 1-CPU node measures on
            self.proc = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{first}}})\nwhile True: pass"])
        elif p.kind in ("card", "failed", "cancelled") and p.node == self.small:
            self.stop()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


@pytest.mark.slow
@pytest.mark.alone
def test_every_node_gives_a_card_kept_as_one_fleet_and_the_node_with_half_the_cpus_is_the_straggler(
        cluster, tmp_path):
    import ray

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("a node with half the CPUs of another needs a host of 2 cores or more")
    db = tmp_path / "r.db"
    seen: list[FleetProgress] = []
    busy = BusyCore()
    ray.init(address=cluster.address)  # (the fleet uses a connection it finds, and leaves it open)
    try:
        busy.small = next(n.label for n in listed(ray.nodes()) if n.cpus == 1)
        fleet, cards = FleetBench(db, cluster.address, "jax", quick=True, suite=SUITE, budget_s=20, nodes="big,small",
                                  on_progress=lambda p: (seen.append(p), busy(p))).run()
    finally:
        busy.stop()
        ray.shutdown()
    assert fleet.status == "complete" and fleet.exit_code == 0 and len(cards) == 2
    store = Store(db)
    kept = store.get_fleet(fleet.id[:8])
    assert [n.status for n in kept.nodes] == ["ok", "ok"] and {n.card for n in kept.nodes} == {c.id for c in cards}
    by_cpus = {c.machine["cpus"]: c for c in cards}
    assert set(by_cpus) == {1, 2}
    small, big = by_cpus[1], by_cpus[2]
    cores = sorted(os.sched_getaffinity(0))  # what this host gives: the nodes take the first of them
    measured_on = f"cores {cores[0]} of the {len(cores)} this host gave it"
    assert small.machine["affinity"] == f"{measured_on}: the node declares 1 CPU"
    assert big.machine["affinity"] == (None if len(cores) == 2 else
                                       f"cores {cores[0]}, {cores[1]} of the {len(cores)} this host gave it: the node "
                                       "declares 2 CPUs")
    for c in cards:  # each card with its node's fingerprint and the fleet's id, and its runs kept here too
        assert store.get_card(c.id).node == c.node and c.node is not None and c.node.fleet == fleet.id
        assert c.node.resources["CPU"] == c.machine["cpus"] and c.node.address == kept.nodes[0].address
        assert store.get(c.entries[0].run_id).workload == "conv"
    assert "small" in small.node.resources and "big" in big.node.resources
    assert ("node's CPUs", f"1 ({measured_on}: the node declares 1 CPU)") in card_view.machine_rows(small)
    assert any("share one host, so their cards ran one after another" in s for s in kept.schedule)
    for c in cards:  # each node's progress, under its own name
        mine = [p for p in seen if p.node == c.node.label]
        assert [p.kind for p in mine][:2] == ["asked", "started"] and mine[-1].kind == "card"
        assert any(p.progress is not None and p.progress.what == "conv" for p in mine)
        assert all(p.eta is not None and p.eta >= 0 for p in mine)
    view = analyse(kept, [store.get_card(c.id) for c in cards])
    stragglers = view.stragglers()
    assert [(name, cell.node.label) for name, cell in stragglers] == [("conv", small.node.label)]
    cell = stragglers[0][1]
    assert cell.change is not None and cell.change.word == "slower" and cell.ratio < 1
    assert f"1 CPU (the others' median 2): {measured_on}" in cell.why
    assert "no compute ceiling (float32 matmul) on its card" in cell.why  # the smoke roofline refused it
    assert "load beside it: other processes used" in cell.why  # the busy neighbour, as its telemetry saw it
    shown = run_cli("cards", "fleet", fleet.id[:8], "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    assert f"{small.node.label} is a straggler on conv" in " ".join(shown.stdout.split())


@pytest.mark.slow
@pytest.mark.alone
def test_a_fleet_is_written_by_o_shown_as_json_and_imported_into_another_history(cluster, tmp_path, monkeypatch):
    """`tpulab bench --ray ADDRESS -o FILE` writes the fleet with its cards (it wrote nothing before); the file
    imports into another history, whose `cards fleet ID --format json` shows the same groups."""
    from tpulab.cli.main import main

    monkeypatch.setattr(bench, "SUITE", SUITE)
    db, out = tmp_path / "r.db", tmp_path / "fleet.json"
    code = main(["bench", "--ray", cluster.address, "--quick", "--backend", "jax", "--budget", "20", "--nodes", "big",
                 "--no-reference", "-o", str(out), "--db", str(db)])
    assert code == 0
    data = json.loads(out.read_text())
    assert [n["status"] for n in data["nodes"]] == ["ok"] and len(data["cards"]) == 1
    assert [row["name"] for row in data["groups"][0]["rows"]] == ["conv"]
    elsewhere = tmp_path / "elsewhere.db"
    imported = run_cli("cards", "import", str(out), "--db", str(elsewhere))
    assert imported.returncode == 0, imported.stderr
    assert f"imported fleet {data['id'][:8]} of 1 node, with its 1 card" in " ".join(imported.stdout.split())
    shown = run_cli("cards", "fleet", data["id"][:8], "--format", "json", "--db", str(elsewhere))
    assert json.loads(shown.stdout)["groups"] == data["groups"]


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.skip(reason="open (issue 64, item 11): on the pinned node, reaping a finished worker at times spins in the "
                  "kernel (wait4 > release_task > d_invalidate of its /proc entries) for seconds to minutes, on the "
                  "card's one core: the card then overruns its budget; this test is its reproduction")
def test_a_node_with_fewer_cores_than_it_declares_is_measured_on_them_within_its_budget_and_is_the_straggler(
        cluster, tmp_path, monkeypatch):
    """`tpulab bench --ray ADDRESS` over the head (2 CPUs) and the node started on one core that declares 2 (as
    `taskset -c 0`): each card, every stage of it, ends within its budget (a budget this small runs no drift probe,
    and says so); the pinned node's card says the cores it had, its own process waits rather than competes, and its
    compute entry names it the straggler with its cores as the why."""
    from tpulab.cli.main import main
    from tpulab.engine.card import from_json

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("a node pinned to fewer cores than another's needs a host of 2 cores or more")
    # A compute entry that runs on every core it may use (XLA's CPU convolution runs on one: the pinned node's would
    # be no slower), and every stage a card has
    matmul = bench.Entry("calibration", {"size": 1024, "matmuls": 1, "iterations": 20}, {},
                         (bench.Headline("matmul", "gflops_per_s", "GFLOP/s"),), ("iterations",))
    monkeypatch.setattr(bench, "SUITE", replace(SUITE, entries=(matmul,), drift=bench.SUITE.drift))
    db, out = tmp_path / "r.db", tmp_path / "fleet.json"
    core = min(os.sched_getaffinity(0))
    code = main(["bench", "--ray", cluster.address, "--quick", "--backend", "jax", "--budget", "30", "--nodes",
                 "big,pinned", "--no-reference", "-o", str(out), "--db", str(db)])
    assert code == 0
    data = json.loads(out.read_text())
    cards = [from_json(c) for c in data["cards"]]
    assert [n["status"] for n in data["nodes"]] == ["ok", "ok"] and len(cards) == 2
    for c in cards:
        assert c.budget_s == 30 and c.wall_s is not None and c.wall_s <= c.budget_s, (c.wall_s, c.entries)
        assert c.machine["card_cpu_s"] < 0.25 * c.wall_s  # the card's own process waits on its runs
        assert c.drift and all("30s budget leaves no room for the drift probes" in (d.why or "") for d in c.drift)
    pinned = next(c for c in cards if c.node is not None and "pinned" in c.node.resources)
    assert pinned.machine["cpus"] == 1 and pinned.machine["affinity"] == (
        f"core {core}: the node declares 2 CPUs, but its processes may run on 1 (their CPU affinity), so it was "
        "measured on those")
    [row] = data["groups"][0]["rows"]
    assert row["name"] == "matmul" and [c["node"] for c in row["cells"] if c["straggler"]] == [pinned.node.label]
    assert "1 CPU (the others' median 2): core" in next(c["why"] for c in row["cells"] if c["straggler"])


@pytest.mark.slow
@pytest.mark.alone
def test_a_node_killed_mid_card_is_named_failed_and_the_others_are_kept(cluster, tmp_path):
    """Killed as its card starts (its worker's start, the roofline and a conv of 200 steps to come: seconds), so the
    node dies mid-card."""
    victim = cluster.add_node(num_cpus=1, resources={"victim": 1})
    cluster.wait_for_nodes()
    started = threading.Event()
    runner: FleetBench

    def progress(p: FleetProgress) -> None:
        victims = {n.label for n in runner.fleet.nodes if n.node_id == victim.node_id}
        if p.node in victims and p.kind == "started":
            started.set()

    long_conv = replace(SUITE, entries=(replace(SUITE.entries[0], quick={"iterations": 200}),))
    db = tmp_path / "r.db"
    made: list = []
    runner = FleetBench(db, cluster.address, "jax", quick=True, suite=long_conv, budget_s=10, nodes="victim,big",
                        on_progress=progress)
    thread = threading.Thread(target=lambda: made.append(runner.run()))
    thread.start()
    assert started.wait(120), "the victim's card never started"
    cluster.remove_node(victim)
    thread.join(120)
    fleet, cards = made[0]
    dead = next(n for n in fleet.nodes if n.node_id == victim.node_id)
    assert dead.status == "failed" and dead.card is None
    assert dead.reason.startswith("the node died while its card ran"), dead.reason
    alive = next(n for n in fleet.nodes if n.node_id != victim.node_id)
    assert alive.status == "ok" and [c.id for c in cards] == [alive.card]
    assert Store(db).get_card(alive.card).node.node_id == alive.node_id
    assert fleet.status == "failed" and fleet.exit_code == 1 and Store(db).get_fleet(fleet.id).status == "failed"
    said = " ".join(fleet_view.lines(analyse(fleet, cards)))
    assert f"{dead.label}: failed: the node died while its card ran" in said


@pytest.mark.slow
@pytest.mark.alone
def test_a_cancel_stops_every_card_and_keeps_what_came_back(cluster, tmp_path):
    """Cancelled as the second node's card starts (its conv of 100 steps: seconds, longer than a cancel takes to
    reach it): the first's card is kept whole, the second's as far as it got."""
    runner: FleetBench

    def progress(p: FleetProgress) -> None:  # (a late line of the first node's may come after its card)
        kept = {n.label for n in runner.fleet.nodes if n.status == "ok"}
        if p.kind in ("started", "progress") and kept and p.node not in kept:
            runner.cancel()

    db = tmp_path / "r.db"
    longer = replace(SUITE, entries=(replace(SUITE.entries[0], quick={"iterations": 100}),))
    runner = FleetBench(db, cluster.address, "jax", quick=True, suite=longer, budget_s=7, nodes="big,small",
                        on_progress=progress)
    began = time.monotonic()
    fleet, cards = runner.run()
    assert time.monotonic() - began < 60
    assert fleet.status == "partial" and fleet.exit_code == 130
    first, second = fleet.nodes
    assert first.status == "ok" and Store(db).get_card(first.card).status == "complete"
    # the second card stopped after its run in flight: kept as partial
    assert second.status == "ok" and second.reason == "its card is partial (stopped by the cancel)", second
    assert Store(db).get_card(second.card).status == "partial"


@pytest.mark.slow
@pytest.mark.alone
def test_the_notebooks_fleet_keeps_what_came_back_when_the_cell_is_interrupted(cluster, tmp_path, monkeypatch):
    """`tpulab.bench(cluster=...)`, interrupted (Python's own Ctrl+C, as a kernel has it) once the first node's card
    is kept: that card stays whole, the second node is named cancelled, and the fleet draws itself in the cell."""
    import _thread
    import signal

    import tpulab

    monkeypatch.setattr(bench, "SUITE", SUITE)
    db = tmp_path / "r.db"
    stop = threading.Event()

    def interrupt_once_a_card_is_kept() -> None:
        while not stop.wait(0.1):
            fleets = Store(db).fleets() if db.exists() else []
            if fleets and any(n.status == "ok" for n in fleets[0].nodes):
                _thread.interrupt_main()
                return

    watcher = threading.Thread(target=interrupt_once_a_card_is_kept)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    watcher.start()
    try:
        result = tpulab.bench(cluster=cluster.address, quick=True, backend="jax", db=db, budget_s=7,
                              nodes="big,small")
    finally:
        stop.set()
        watcher.join()
        signal.signal(signal.SIGINT, before)
    fleet = result.fleet
    assert fleet.status == "partial" and fleet.exit_code == 130 and Store(db).get_fleet(fleet.id).status == "partial"
    first, second = fleet.nodes
    assert first.status == "ok" and [c.id for c in result.cards] == [first.card]
    assert Store(db).get_card(first.card).status == "complete"
    if second.card is None:  # the cancel came before its task started (as a rule: a fresh Ray worker takes a second)
        assert second.status == "cancelled"
        assert second.reason in ("the fleet was cancelled before its turn", "cancelled before its card started")
    else:  # ... or just after: its card stopped at once, kept as partial
        assert second.status == "ok" and Store(db).get_card(second.card).status == "partial"
    page = result._repr_html_()
    assert page.startswith('<div class="tpulab">') and f"fleet {fleet.short_id}" in page and "partial" in page
    assert f"{second.label}: cancelled" in page or f"{second.label}: card {second.card[:8]}" in page


# --- no Ray: its absence, node picking, the view on hand-made cards ---------------------------------------
def test_without_ray_the_fleet_says_how_to_install_it_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: its import fails
    with pytest.raises(RayMissing) as e:
        FleetBench(tmp_path / "r.db").run()
    assert str(e.value) == "Ray is not installed here: pip install 'tpulab[ray]'" and e.value.exit_code == 2


def test_nodes_are_picked_by_resource_label_or_address_and_one_host_runs_one_at_a_time():
    gpu = NodeInfo("a" * 8, "10.0.0.5", None, {"CPU": 8, "GPU": 1}, {"zone": "a"}, "10.0.0.5 #1")
    cpu = NodeInfo("b" * 8, "10.0.0.5", None, {"CPU": 4}, {"zone": "b"}, "10.0.0.5 #2")
    other = NodeInfo("c" * 8, "10.0.0.6", None, {"CPU": 4, "GPU": 0}, {}, "10.0.0.6 #3")
    assert [n.label for n in (gpu, cpu, other) if matches(n, "GPU")] == ["10.0.0.5 #1"]
    assert [n.label for n in (gpu, cpu, other) if matches(n, "zone=b,10.0.0.6")] == ["10.0.0.5 #2", "10.0.0.6 #3"]
    hosts, said = schedule([gpu, cpu, other])
    assert [[n.label for n in q] for q in hosts.values()] == [["10.0.0.5 #1", "10.0.0.5 #2"], ["10.0.0.6 #3"]]
    assert said[0].startswith("10.0.0.5: 2 nodes share one host, so their cards ran one after another")
    assert said[1] == "2 hosts: their cards ran at once"


def steps(level: float, jitter: float = 0.02) -> list[list[float]]:
    """Two repeats of 20 step times around `level` seconds."""
    return [[level * (1 + jitter * ((i * 7) % 5 - 2) / 2) for i in range(20)]] * 2


def node_card(i: int, step: float, flops: float = 100e9, cpus: int = 2, model: str = "Xeon",
              accelerators: list | None = None, disturbed: str | None = None) -> Card:
    work = 1.0  # GFLOP a step: the rate is work over time
    return Card(id=f"{i:02d}" * 16, created_at="2026-12-01T00:00:00+00:00", suite=CardSuite(name="t", version=1,
                quick=True), machine={"label": model, "cpu": {"model": model, "threads": 2}, "cpus": cpus,
                                      "affinity": None if cpus == 2 else "cores 0 of the 2 this host gave it",
                                      "accelerators": accelerators or []},
                ceilings=[CardCeiling(device="cpu: x", kind="compute", dtype="float32", value=flops, unit="FLOP/s",
                                      source="roofline")],
                entries=[CardEntry(name="conv", workload="conv", backend="jax", status="ok", unit="GFLOP/s",
                                   median=work / step, n=40, samples=steps(step), bound="compute", disturbed=disturbed)])


def fleet_of(cards: list[Card], failed: int = 0, fleet_id: str = "f1ee7" * 6 + "00") -> Fleet:
    nodes = [FleetNode(label=f"10.0.0.{i} #{i}", node_id=f"n{i}", address=f"10.0.0.{i}", status="ok", card=c.id)
             for i, c in enumerate(cards, 1)]
    nodes += [FleetNode(label=f"10.0.0.9{k} #{len(cards) + k + 1}", node_id=f"dead{k}", address="10.0.0.99",
                        status="failed", reason="the node died while its card ran (NodeDiedError: ...)")
              for k in range(failed)]
    return Fleet(id=fleet_id, created_at="2026-12-01T00:00:00+00:00", cluster="auto",
                 suite=CardSuite(name="t", version=1, quick=True), nodes=nodes, status="failed" if failed else "complete",
                 schedule=["4 hosts: their cards ran at once"])


def test_a_node_detectably_slower_than_its_group_is_the_straggler_with_why_and_noise_is_not_one():
    cards = [node_card(1, 0.010), node_card(2, 0.0102), node_card(3, 0.0104),
             node_card(4, 0.020, flops=52e9, cpus=1, disturbed="other processes used 0.90 of 2 cores (45%)"),
             node_card(5, 0.0107)]  # 7% slower than the others: within the noise, no straggler
    view = analyse(fleet_of(cards, failed=1), cards)
    assert len(view.groups) == 1
    row = view.groups[0].rows[0]
    assert row.name == "conv" and row.median == pytest.approx(1 / 0.0104)
    assert [round(c.ratio, 2) for c in row.cells] == [1.04, 1.02, 1.0, 0.52, 0.97]
    (name, cell), = view.stragglers()
    assert (name, cell.node.label) == ("conv", "10.0.0.4 #4") and cell.change.word == "slower"
    assert cell.why == ("compute ceiling (float32 matmul) 0.52x the fleet's median; compute-bound; load beside it: "
                        "other processes used 0.90 of 2 cores (45%); 1 CPU (the others' median 2): cores 0 of the 2 "
                        "this host gave it")
    assert row.cells[4].change.word == "no difference detected" and not row.cells[4].straggler
    said = fleet_view.lines(view)
    assert said[0].startswith("10.0.0.4 #4 is a straggler on conv: 0.5") and "slower; compute ceiling" in said[0]
    assert "10.0.0.90 #6: failed: the node died while its card ran (NodeDiedError: ...)" in said
    shown = io.StringIO()
    Console(file=shown, width=160).print(fleet_view.terminal(view))
    assert "50.0 (0.52x) straggler" in shown.getvalue()
    assert "| conv [GFLOP/s] | 96.2 |" in fleet_view.markdown(view)
    page = fleet_view.page(view)
    assert page.startswith("<!DOCTYPE html>") and "straggler on conv" in page


def test_nodes_of_two_kinds_of_hardware_are_two_populations():
    """Four CPU nodes and two GPU nodes twice as fast: no GPU node is anyone's straggler, and within the GPU group
    the slower one is."""
    gpu = [{"kind": "gpu", "name": "NVIDIA H100"}] * 8
    cards = [node_card(1, 0.010), node_card(2, 0.010), node_card(3, 0.0101), node_card(4, 0.0099),
             node_card(5, 0.005, model="EPYC", accelerators=gpu), node_card(6, 0.008, model="EPYC", accelerators=gpu)]
    view = analyse(fleet_of(cards), cards)
    assert [(g.hardware, len(g.nodes)) for g in view.groups] == [("Xeon", 4), ("EPYC + 8x NVIDIA H100", 2)]
    assert [c.node.label for _, c in view.stragglers()] == ["10.0.0.6 #6"]
    assert any(line.startswith("2 hardware groups, each its own population") for line in fleet_view.lines(view))


def test_two_fleets_compare_as_two_cards_do_by_their_median_cards(tmp_path):
    db = tmp_path / "r.db"
    store = Store(db)
    before = [node_card(1, 0.010), node_card(2, 0.0102), node_card(3, 0.0098)]
    after = [replace(node_card(i, 0.020, flops=50e9), id=f"{i:02d}" * 15 + "ff") for i in (1, 2, 3)]
    for cards, fid in ((before, "a" * 32), (after, "b" * 32)):
        for c in cards:
            store.save_card(c)
        fleet = fleet_of(cards, fleet_id=fid)
        store.save_fleet(fleet)
    a, = median_cards(analyse(store.get_fleet("aaaa"), before))
    assert a.entries[0].median == pytest.approx(100.0) and len(a.entries[0].samples) == 6
    assert a.label() == "fleet aaaaaaaa: Xeon (3 nodes, median)" and a.ceilings[0].value == 100e9
    done = run_cli("cards", "compare", "aaaa", "bbbb", "--db", str(db))
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "conv: 0.50x [" in said and "] slower" in said and "compute ceiling (float32 matmul) 0.5x: explained by compute" in said
    listed = run_cli("cards", "fleet", "--db", str(db))
    assert listed.returncode == 0 and "aaaaaaaa" in listed.stdout and "3/3" in listed.stdout


def test_a_schema_6_store_gains_the_fleets_table_and_keeps_its_cards(db):
    store = Store(db)
    none = run_cli("cards", "fleet", "--db", str(db))
    assert none.returncode == 0 and "no fleet kept yet: `tpulab bench --ray` makes one" in " ".join(none.stdout.split())
    store.save_card(node_card(1, 0.01))
    with sqlite3.connect(db) as con:  # as tpulab before fleets left it
        con.execute("DROP TABLE fleets")
        con.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    again = Store(db)
    assert again.fleets() == [] and again.get_card("0101").id == node_card(1, 0.01).id
    again.save_fleet(fleet_of([node_card(1, 0.01)]))
    assert [f.nodes[0].card for f in Store(db).fleets()] == [node_card(1, 0.01).id]
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)


def test_a_card_made_before_fleets_reads_with_no_node():
    data = node_card(1, 0.01).to_json()
    del data["node"]
    from tpulab.engine.card import from_json

    assert from_json(data).node is None




@pytest.mark.slow
@pytest.mark.alone
async def test_the_labs_runtime_tab_makes_the_fleet_card_of_the_cluster_it_was_given(cluster, tmp_path, monkeypatch):
    """`tpulab --ray ADDRESS`: the Runtime tab's c makes the fleet's quick card (the tiny suite here), each node's
    news as it comes, then the fleet against its median, kept."""
    from textual.widgets import Static

    from tpulab.lab.app import TpulabApp

    from .helpers import SIZE, cpu_only, text, wait_for

    monkeypatch.setattr(bench, "SUITE", SUITE)
    monkeypatch.setattr(bench, "QUICK_BUDGET_S", 7.0)  # per node: the roofline, and a conv where it fits
    db = tmp_path / "r.db"
    app = TpulabApp(probe=False, report=cpu_only(tmp_path / "m"), db=db, cluster=cluster.address)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert f"c: the fleet card, a quick card on every node of the Ray cluster at {cluster.address}" in \
            text(app.query_one("#runtime-status", Static))
        app.query_one("#runtime-pane").focus()
        await pilot.press("c")
        assert app.runtime_pane.making_card
        shown = app.query_one("#runtime-card", Static)
        await wait_for(pilot, lambda: " #1: " in text(shown) or "kept as fleet" in text(shown), 60)  # a node's news
        await wait_for(pilot, lambda: "kept as fleet" in text(shown), 120)
    fleet = Store(db).fleets()[0]
    assert [n.status for n in fleet.nodes] == ["ok", "ok", "ok"] and fleet.short_id in text(shown)
    assert f"fleet {fleet.short_id} · 3 of 3 nodes' cards" in text(shown) and not app.runtime_pane.making_card
