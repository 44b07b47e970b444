"""`tpulab bench --ray`: the machine card on every alive node of a Ray cluster, kept as one fleet.

Ray is the cluster layer (an existing engine, never our own) and an extra (`tpulab[ray]`): it is imported inside
functions only. Each node's card is one Ray task pinned to its node (node affinity, not soft), holding the node's
CPUs and GPUs so that nothing else Ray schedules runs beside it, and running the bench there (`Bench`, with the
caller's suite, `--quick`, backend and budget) into a temporary store on the node; its card and its runs come back
to the caller's store. A node that declares fewer CPUs than its host has is measured as that many: the task
restricts itself, and so the runs it starts, to that many cores (`os.sched_setaffinity`), and its card says so
(`machine.cpus`, `machine.affinity`).

Cards made side by side on one host would measure each other: nodes of one address (several raylets on one
machine, as in the tests) run their cards one after another; nodes of different hosts at once. The fleet says so
(`Fleet.schedule`). Each task says where it is through a small actor on the caller's node (`Hub`), which the caller
reads as the cards go: each node's progress, and the fleet's time left, at most (each running node's budget left and
the budgets of the nodes still waiting for their host).

Ctrl+C (`cancel`) cancels every node's card (the hub's word, which each task reads as it waits: it stops its bench
after the run in flight and returns its card so far, marked partial; a task not yet started is cancelled by Ray); a
node whose task does not answer within `GRACE_S` is stopped by force.
A node that dies, whose task fails, or whose task never starts (`start_timeout_s`: its resources held by other
work, its runtime environment never set up) is named in the fleet with its reason, and the other cards are kept.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tpulab.base.errors import UsageError, first_line
from tpulab.engine import bench
from tpulab.engine.bench_run import Progress
from tpulab.engine.card import Card, CardNode, CardSuite, Fleet, FleetNode
from tpulab.engine.card import from_json as card_from_json
from tpulab.engine.record import now_iso
from tpulab.engine.store import Store, load_record

INSTALL = "pip install 'tpulab[ray]'"
START_TIMEOUT_S = 300.0  # a node whose card has not started this long after it was asked for never started
GRACE_S = 30.0  # after a cancel, how long a node has to hand back its partial card before its task is killed
POLL_S = 0.25  # the caller's reading of the nodes' news
CANCEL_POLL_S = 1.0  # a node's card asking the hub whether the fleet was cancelled


class RayMissing(UsageError):
    """Ray is not installed here (exit 2)."""


def ray_module() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissing(f"Ray is not installed here: {INSTALL}") from None
    return ray


@dataclass(frozen=True)
class NodeInfo:
    """An alive node as Ray lists it."""

    node_id: str
    address: str
    hostname: str | None
    resources: dict[str, float]
    labels: dict[str, str]
    label: str = ""

    @property
    def cpus(self) -> int:
        return int(self.resources.get("CPU", 0))


def listed(nodes: list[dict[str, Any]]) -> list[NodeInfo]:
    """Ray's `ray.nodes()` as the alive nodes, each named by its address and its place ('10.0.0.5 #2')."""
    alive = [n for n in nodes if n.get("Alive")]
    return [NodeInfo(node_id=str(n["NodeID"]), address=str(n.get("NodeManagerAddress", "?")),
                     hostname=n.get("NodeManagerHostname"),
                     resources={str(k): float(v) for k, v in (n.get("Resources") or {}).items()},
                     labels={str(k): str(v) for k, v in (n.get("Labels") or {}).items()},
                     label=f"{n.get('NodeManagerAddress', '?')} #{i}") for i, n in enumerate(alive, 1)]


def matches(node: NodeInfo, spec: str | None) -> bool:
    """Whether `--nodes SPEC` picks the node: SPEC is one or more, comma-separated, of a resource the node has more
    than 0 of (`GPU`), a label (`key=value`) or an address (`10.0.0.5`); a node matching any of them is picked."""
    if not spec:
        return True
    for part in (p.strip() for p in spec.split(",")):
        if "=" in part:
            key, value = part.split("=", 1)
            if node.labels.get(key.strip()) == value.strip():
                return True
        elif part and (node.resources.get(part, 0) > 0 or node.address == part):
            return True
    return False


def chosen(nodes: list[NodeInfo], spec: str | None) -> tuple[list[NodeInfo], list[tuple[NodeInfo, str]]]:
    """The nodes a card runs on, and those picked that cannot hold one (with why)."""
    picked = [n for n in nodes if matches(n, spec)]
    if not picked:
        raise UsageError(f"no alive node matches --nodes {spec!r}: give a resource (GPU), a label (key=value) or an "
                         "address; `ray status` lists the nodes")
    run = [n for n in picked if n.cpus >= 1]
    skipped = [(n, "it declares no CPU to Ray (a head node kept for scheduling): no card") for n in picked if n.cpus < 1]
    if not run:
        raise UsageError("no picked node declares a CPU to Ray: a card needs at least one")
    return run, skipped


def schedule(nodes: list[NodeInfo]) -> tuple[dict[str, deque[NodeInfo]], list[str]]:
    """The nodes by host (one address), each host's run one after another; and the fleet's words for it."""
    hosts: dict[str, deque[NodeInfo]] = {}
    for n in nodes:
        hosts.setdefault(n.address, deque()).append(n)
    said = [f"{address}: {len(q)} nodes share one host, so their cards ran one after another "
            f"({', '.join(n.label for n in q)}): cards side by side would measure each other"
            for address, q in hosts.items() if len(q) > 1]
    said.append(f"{len(hosts)} hosts: their cards ran at once" if len(hosts) > 1 else "one host")
    return hosts, said


def restrict(cpus: int) -> tuple[int, str | None]:
    """This process (and what it starts) on the node's CPU count: the first `cpus` of the cores it may use, where the
    node declares fewer than the host gives it. Where it declares more than its processes may use (a raylet started
    under `taskset`, a container's cpuset), it is measured on the cores it has. The cores it measures on, and the
    words for it (None: all of them, as declared)."""
    have = sorted(os.sched_getaffinity(0))
    if 1 <= cpus < len(have):
        os.sched_setaffinity(0, have[:cpus])
        return cpus, (f"cores {', '.join(map(str, have[:cpus]))} of the {len(have)} this host gave it: the node "
                      f"declares {cpus} CPU{'s' if cpus > 1 else ''}")
    if cpus > len(have):
        return len(have), (f"core{'s' if len(have) > 1 else ''} {', '.join(map(str, have))}: the node declares {cpus} "
                           f"CPUs, but its processes may run on {len(have)} (their CPU affinity), so it was measured "
                           "on those")
    return len(have), None


class Hub:
    """A Ray actor on the caller's node: each task's lines, read by the caller as they come; and the fleet's cancel,
    which each task reads as it waits for its bench (a word it asks for, not a signal that may land anywhere)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, Any]] = []
        self.stop = False

    def cancel(self) -> None:
        self.stop = True

    def stopping(self) -> bool:
        return self.stop

    def put(self, node: str, kind: str, payload: Any = None) -> None:
        self.lines.append((node, kind, payload))

    def take(self) -> list[tuple[str, str, Any]]:
        out, self.lines = self.lines, []
        return out


def node_card(plan: dict[str, Any], hub: Any) -> dict[str, Any]:
    """One node's card, on that node (a Ray task): the bench run in a thread, stopped by a cancel (Ray raises
    KeyboardInterrupt here) after its run in flight; its card so far and its runs, as JSON. The task itself waits
    (it asks the hub for a cancel once every `CANCEL_POLL_S`): it must not compete with what its card measures, and
    its card says how much CPU it used (`machine.card_cpu_s`)."""
    import resource
    import tempfile

    from tpulab.engine.bench_run import Bench
    from tpulab.machine.detect import detect

    label = plan["label"]
    hub.put.remote(label, "started", None)
    cores, affinity = restrict(int(plan["cpus"]))
    with tempfile.TemporaryDirectory(prefix="tpulab-fleet-") as tmp:
        db = Path(tmp) / "node.db"
        runner = Bench(detect(), db, plan["backend"], plan["quick"], suite=plan["suite"], budget_s=plan["budget_s"],
                       on_progress=lambda p: hub.put.remote(label, "progress", p), devices=plan["devices"],
                       reference=plan["reference"])
        runner.card.machine.update(cpus=cores, affinity=affinity)
        runner.card.node = CardNode(**plan["node"])
        made: list[Card] = []
        failed: list[BaseException] = []
        done = threading.Event()

        def make() -> None:
            try:
                made.append(runner.run())
            except BaseException as e:  # noqa: BLE001 (re-raised below: the caller says it as the node's reason)
                failed.append(e)
            finally:
                done.set()

        used = resource.getrusage(resource.RUSAGE_SELF)
        threading.Thread(target=make, name="tpulab-node-card", daemon=True).start()
        import ray

        try:
            while not done.wait(CANCEL_POLL_S):
                if ray.get(hub.stopping.remote()):  # the fleet was cancelled: the bench stops after its run in flight
                    runner.cancel()
                    break
            done.wait()
        except BaseException:  # noqa: BLE001 (Ray's own cancel: KeyboardInterrupt or TaskCancelledError)
            runner.cancel()
            done.wait()
        if failed:
            raise failed[0]
        card = made[0] if made else runner.card
        now = resource.getrusage(resource.RUSAGE_SELF)  # this process's own threads, not the runs it started
        card.machine["card_cpu_s"] = round(now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime, 2)
        runs = [r.to_json() for r in Store(db).records()]
    return {"card": card.to_json(), "runs": runs}


@dataclass(frozen=True)
class FleetProgress:
    """Where a fleet is: one node's news (`kind`: started, progress, card, failed, cancelled), and the fleet's time
    left, at most."""

    node: str  # its label: '10.0.0.5 #2'
    kind: str
    line: str  # in words
    eta: float | None
    progress: Progress | None = None  # the node's bench progress (an entry just finished: its `finished`)


@dataclass
class _Flight:
    node: NodeInfo
    ref: Any
    asked: float
    started: float | None = None
    eta: float | None = None  # its bench's time left, as it last said
    cancelled_at: float | None = None


@dataclass
class FleetBench:
    """One fleet: `run()` makes a card on every chosen node and returns the fleet and its cards (kept in `db` as they
    come back); `cancel()` from another thread (Ctrl+C) stops every node's card and keeps what came back."""

    db: Path
    address: str = "auto"
    backend: str = "auto"
    quick: bool = False
    suite: bench.Suite | None = None
    budget_s: float | None = None
    nodes: str | None = None  # `--nodes SPEC`
    on_progress: Callable[[FleetProgress], None] | None = None
    start_timeout_s: float = START_TIMEOUT_S
    runtime_env: dict[str, Any] | None = None  # how tpulab gets onto the nodes: {"pip": ["tpulab[jax]"]}
    devices: str = "one"
    reference: bool = True
    cancelled: bool = False
    fleet: Fleet | None = None
    cards: list[Card] = field(default_factory=list)
    _budget: float = field(default=0.0, init=False, repr=False)
    _hosts: dict[str, deque[NodeInfo]] = field(default_factory=dict, init=False, repr=False)
    _flights: dict[Any, _Flight] = field(default_factory=dict, init=False, repr=False)

    def cancel(self) -> None:
        self.cancelled = True

    def _say(self, node: str, kind: str, line: str, progress: Progress | None = None) -> None:
        if self.on_progress is not None:
            self.on_progress(FleetProgress(node, kind, line, self._eta(), progress))

    def _eta(self) -> float | None:
        """The fleet's seconds left, at most: per host, its running node's budget left plus each waiting node's whole
        budget (a finished card's time, once one came back); the longest host's."""
        per = next((c.wall_s for c in self.cards if c.wall_s), None) or self._budget
        left = [sum(per for _ in q) + sum(f.eta if f.eta is not None else per for f in self._flights.values()
                                          if f.node.address == host) for host, q in self._hosts.items()]
        return max(left, default=0.0)

    def run(self) -> tuple[Fleet, list[Card]]:
        ray = ray_module()
        suite = self.suite or bench.SUITE
        self._budget = self.budget_s if self.budget_s is not None else suite.budget(self.quick)
        owns = not ray.is_initialized()
        if owns:
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level="ERROR")
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise UsageError(f"no Ray cluster at {self.address}: {first_line(str(e))[:200]}; start one (`ray start "
                                 "--head`) or give its address (--ray ADDRESS)") from None
        try:
            return self._run(ray, suite)
        finally:
            if owns:
                ray.shutdown()

    def _run(self, ray: Any, suite: bench.Suite) -> tuple[Fleet, list[Card]]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        store = Store(self.db)
        picked, skipped = chosen(listed(ray.nodes()), self.nodes)
        self._hosts, words = schedule(picked)
        fleet = self.fleet = Fleet(
            id=uuid.uuid4().hex, created_at=now_iso(), cluster=self.address, backend=self.backend,
            suite=CardSuite(name=suite.name, version=suite.version, quick=self.quick), budget_s=self._budget,
            schedule=words, nodes=[FleetNode(label=n.label, node_id=n.node_id, address=n.address, status="cancelled",
                                             reason="not started", cpus=n.resources.get("CPU"), resources=n.resources,
                                             labels=n.labels) for n in picked])
        fleet.nodes += [FleetNode(label=n.label, node_id=n.node_id, address=n.address, status="skipped", reason=why,
                                  cpus=n.resources.get("CPU"), resources=n.resources, labels=n.labels)
                        for n, why in skipped]
        entry = {n.label: e for n, e in zip(picked, fleet.nodes)}
        store.save_fleet(fleet)
        here = ray.get_runtime_context().get_node_id()
        options: dict[str, Any] = {"runtime_env": self.runtime_env} if self.runtime_env else {}
        hub = ray.remote(num_cpus=0)(Hub).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True), **options).remote()
        task = ray.remote(max_calls=1)(node_card)  # a fresh worker each card: none keeps another's affinity
        self._flights = {}
        start = time.monotonic()
        host_time: dict[str, float] = {}

        def submit(node: NodeInfo) -> None:
            plan = {"label": node.label, "cpus": node.cpus, "backend": self.backend, "quick": self.quick,
                    "suite": suite, "budget_s": self.budget_s, "devices": self.devices, "reference": self.reference,
                    "node": {"fleet": fleet.id, "label": node.label, "node_id": node.node_id, "address": node.address,
                             "hostname": node.hostname, "resources": node.resources, "labels": node.labels}}
            ref = task.options(
                num_cpus=node.resources.get("CPU", 0), num_gpus=node.resources.get("GPU", 0),
                resources={k: node.resources[k] for k in ("TPU",) if node.resources.get(k)},
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False), max_retries=0,
                name=f"tpulab card {node.label}", **options).remote(plan, hub)
            self._flights[ref] = _Flight(node, ref, time.monotonic())
            self._say(node.label, "asked", "asked for its card")

        def next_of(host: str) -> None:
            if self._hosts[host] and not self.cancelled:
                submit(self._hosts[host].popleft())

        def ended(flight: _Flight, status: str, reason: str | None, card: Card | None = None) -> None:
            e = entry[flight.node.label]
            e.status, e.reason = status, reason
            e.seconds = time.monotonic() - (flight.started or flight.asked)
            host_time[flight.node.address] = host_time.get(flight.node.address, 0.0) + \
                time.monotonic() - flight.asked
            if card is not None:
                e.card = card.id
            store.save_fleet(fleet)
            self._say(flight.node.label, "card" if card is not None else status,
                      f"card {card.short_id} {card.status}" if card is not None else f"{status}: {reason}")
            next_of(flight.node.address)

        for host in list(self._hosts):
            next_of(host)
        cancelling = False
        while self._flights:
            ready, _ = ray.wait(list(self._flights), num_returns=1, timeout=POLL_S)
            self._drain(ray, hub)
            now = time.monotonic()
            for ref in ready:
                flight = self._flights.pop(ref)
                try:
                    got = ray.get(ref)
                except Exception as e:  # noqa: BLE001 (any failure of the task is the node's reason)
                    cancelled = type(e).__name__ == "TaskCancelledError"
                    ended(flight, "cancelled" if cancelled else "failed",
                          "cancelled before its card started" if cancelled and flight.started is None else
                          "cancelled: its task was stopped before it handed back its card" if cancelled else
                          died(ray, flight.node, e))
                    continue
                card = card_from_json(got["card"])
                for run in got["runs"]:
                    store.save(load_record(run))
                store.save_card(card)
                self.cards.append(card)
                ended(flight, "ok", {"complete": None, "partial": "its card is partial (stopped by the cancel)",
                                     "failed": "an entry of its card failed",
                                     "incomplete": "its card is incomplete: its budget left entries out"
                                     }.get(card.status, card.status), card)
            if self.cancelled and not cancelling:
                cancelling = True
                hub.cancel.remote()  # each started card stops after its run in flight, and hands back what it has
                for flight in self._flights.values():
                    flight.cancelled_at = now
                    if flight.started is None:  # not started: never will
                        ray.cancel(flight.ref)
                for q in self._hosts.values():
                    for n in q:
                        entry[n.label].reason = "the fleet was cancelled before its turn"
                    q.clear()
            for ref, flight in list(self._flights.items()):
                if flight.started is None and not self.cancelled and now - flight.asked > self.start_timeout_s:
                    ray.cancel(ref, force=True)
                    del self._flights[ref]
                    alive = any(n.node_id == flight.node.node_id for n in listed(ray.nodes()))
                    ended(flight, "failed", f"never started: no card began within {self.start_timeout_s:.0f} s of "
                          "asking" + ("" if alive else " (the node left the cluster)") +
                          " (its CPUs held by other work, or its runtime environment not yet set up?)")
                elif flight.cancelled_at is not None and now - flight.cancelled_at > GRACE_S:
                    ray.cancel(ref, force=True)
                    del self._flights[ref]
                    ended(flight, "cancelled", f"cancelled: its card did not stop within {GRACE_S:.0f} s, and was killed")
        self._drain(ray, hub)
        fleet.wall_s = time.monotonic() - start
        fleet.slowest_s = max(host_time.values(), default=None)
        fleet.ended_at = now_iso()
        failed = any(n.status == "failed" for n in fleet.nodes) or any(c.status == "failed" for c in self.cards)
        fleet.status = "partial" if self.cancelled else "failed" if failed else "complete"
        store.save_fleet(fleet)
        ray.kill(hub)
        return fleet, self.cards

    def _drain(self, ray: Any, hub: Any) -> None:
        """The tasks' lines so far: each node's start and progress."""
        try:
            lines = ray.get(hub.take.remote(), timeout=10)
        except Exception:  # noqa: BLE001 (a late line is no reason to lose the fleet)
            return
        by_label = {f.node.label: f for f in self._flights.values()}
        for node, kind, payload in lines:
            flight = by_label.get(node)
            if kind == "started":
                if flight is not None:
                    flight.started = time.monotonic()
                self._say(node, kind, "its card started")
            elif kind == "progress" and isinstance(payload, Progress):
                if flight is not None:
                    flight.eta = payload.eta
                self._say(node, kind, payload.what, payload)


def died(ray: Any, node: NodeInfo, e: BaseException) -> str:
    """A failed task's reason in one line: the node died, its worker died, or what the bench raised."""
    name = type(e).__name__
    alive = any(n.node_id == node.node_id for n in listed(ray.nodes()))
    cause = getattr(e, "cause", None)
    said = first_line(str(cause if cause is not None else e))
    if name == "NodeDiedError" or not alive:
        return f"the node died while its card ran ({name}: {said[:160]})"
    if name == "WorkerCrashedError":
        return f"its task's worker process died ({said[:160]})"
    if name == "RuntimeEnvSetupError":
        return f"its runtime environment could not be set up: {said[:200]}"
    return f"{type(cause).__name__ if cause is not None else name}: {said[:200]}"
