"""A run's processes started by Ray (`--processes N --ray [ADDRESS]`): no ssh loop, the cluster places them.

Process 0 runs here, where its events stream into the record, as with `--processes N`; the others are Ray tasks,
one per bundle of a placement group (`reservation`: a CPU each, and on a GPU or a TPU its share of the devices, so
that Ray places it where they are and holds them for it; spread over the nodes, one per node where there are enough,
or each on its own node with `--per-host`: Ray's STRICT_SPREAD, refused at once where the cluster has too few),
each starting a worker on its node with the cluster's environment. They join process 0 over the network (its host's
address as Ray knows it, a free port), and a task that fails, whose node dies, or whose worker dies, fails the run
naming its process, as a local process's death does (`tpulab.engine.runner.Run`). Ray is imported here alone, in
the process that starts the run (`tpulab[ray]`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterator

from tpulab.backends import Cluster
from tpulab.base.errors import UsageError, first_line
from tpulab.base.events import Event, Failed, Sample, event_from_json
from tpulab.engine.worker import RunHandle, free_port

if TYPE_CHECKING:
    from tpulab.engine.job import RunJob

INSTALL = "pip install 'tpulab[ray]'"
POLL_S = 0.5  # how often the run reads what a process other than 0 said
PLACED_WITHIN_S = 60  # the processes' bundles must be placed by then (a cluster without the CPUs for them)


def connect(address: str) -> Any:
    """Ray, joined to the cluster at `address` ('auto': the one this machine belongs to); one line where Ray is
    missing or no cluster answers."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"--ray starts the processes as Ray tasks: install Ray with: {INSTALL}") from None
    if not ray.is_initialized():
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise UsageError(f"--ray {address}: no Ray cluster there ({first_line(str(e))[:160]}): start one with "
                             "`ray start --head`, or give its address") from None
    return ray


def reservation(device: str, share: int) -> dict[str, float]:
    """What one process holds on its node: a CPU, and on a GPU or a TPU its `share` of the devices."""
    held = {"CPU": 1.0}
    if device in ("gpu", "tpu"):
        held[device.upper()] = float(share)
    return held


def reserve(ray: Any, processes: int, device: str, share: int, per_host: bool) -> Any:
    """The placement group of the processes other than 0, placed (or one line saying why not): spread over the
    nodes, or each on its own node (`per_host`), refused at once where fewer alive nodes have what one needs."""
    from ray.util.placement_group import placement_group

    followers, held = processes - 1, reservation(device, share)
    said = ", ".join(f"{v:g} {k}" for k, v in held.items())
    if per_host:
        able = [n for n in ray.nodes() if n["Alive"] and all(n["Resources"].get(k, 0) >= v for k, v in held.items())]
        if len(able) < followers:
            raise UsageError(f"--processes {processes} --ray --per-host: {followers} process(es) other than 0 each on its "
                             f"own node, of {said} each, but {len(able)} node(s) have that (`ray status` shows them)")
    group = placement_group([held] * followers, strategy="STRICT_SPREAD" if per_host else "SPREAD")
    if not group.wait(PLACED_WITHIN_S):
        ray.util.remove_placement_group(group)
        raise UsageError(f"--processes {processes} --ray: the cluster did not place {followers} process(es) of {said} "
                         f"each within {PLACED_WITHIN_S} s (`ray status` shows what it has)")
    return group


def start(job: RunJob, processes: int, replicas: int, address: str, per_host: bool = False) -> list[Any]:
    """Process 0's worker here and a Ray task for each other process: the run's handles, process 0's first."""
    ray = connect(address)
    from ray.util.placement_group import placement_group_table
    from ray.util.queue import Queue
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    followers = processes - 1
    share = max(1, replicas // processes)
    spec = job.spec
    group = reserve(ray, processes, spec.device, share, per_host)
    here = ray.util.get_node_ip_address()
    hosts = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    placed = [hosts.get(node, "") for node in placement_group_table(group)["bundles_to_node_id"].values()]
    local = all(host == here for host in placed)  # every process on this machine: the CPU's peak counted once
    coordinator = f"{here}:{free_port()}"
    held = reservation(spec.device, share)  # the task holds its bundle whole: Ray then shows it its devices
    task = ray.remote(num_cpus=1, num_gpus=held.get("GPU", 0), resources={k: v for k, v in held.items() if k == "TPU"},
                      max_retries=0)(follow)
    queues = [Queue(actor_options={"num_cpus": 0}) for _ in range(followers)]
    refs = [task.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i))
            .remote(job.to_json(), spec.backend, spec.device, share,
                    Cluster(coordinator, processes, i + 1, local=local).env(), queues[i]) for i in range(followers)]
    leader = RunHandle.start(job, Cluster(coordinator, processes, 0, local=local), share)
    return [leader, *(Follower(ray, ref, queues[i], group, placed[i]) for i, ref in enumerate(refs))]


def follow(job: dict[str, Any], backend: str, device: str, share: int, cluster: dict[str, str],
           said: Any) -> dict[str, Any]:
    """A Ray task: one process's worker on this node, until it ends; how it ended. What the run keeps of a process
    other than 0 (its host's telemetry, its failure) goes to `said` (a Ray queue) as it comes. Cancelled (Ctrl+C,
    the run failing elsewhere), it kills its worker first."""
    import json

    from tpulab.engine.worker import worker_env

    handle = RunHandle([json.dumps(job)], {**worker_env(backend, device, share), **cluster})
    failed = None
    try:
        for event in handle.events():
            if isinstance(event, Failed):
                failed = event.error
            if isinstance(event, (Sample, Failed)):
                said.put(event.to_json())
    finally:
        handle.kill()
    return {"returncode": handle.returncode, "failed": failed, "last_words": handle.last_words(),
            "stderr": handle.stderr_text()[-20_000:]}


class Follower:
    """A process started by Ray, as the run watches one of its own (`RunHandle`'s part that `Run` reads): its end,
    and a failure of its own, of its task or of its node, in words."""

    def __init__(self, ray: Any, ref: Any, said: Any, group: Any, host: str) -> None:
        self.ray, self.ref, self.said, self.group, self.host = ray, ref, said, group, host
        self.cancel_requested = False
        self.ended: dict[str, Any] | None = None

    def events(self) -> Iterator[Event]:
        """What its task says as it runs (its telemetry, its failure), until the task ends."""
        from ray.util.queue import Empty

        done = False
        while not done:
            done = bool(self.ray.wait([self.ref], timeout=0)[0])  # then what it said before its end is read below
            try:
                for raw in self.said.get_nowait_batch(self.said.qsize()) or [self.said.get(timeout=POLL_S)]:
                    yield event_from_json(raw)
            except (Empty, self.ray.exceptions.RayError):
                pass  # nothing new; or the queue went with its node: the task's end says why
        try:
            self.ended = self.ray.get(self.ref)
        except Exception as e:  # noqa: BLE001 - Ray's errors (a task, its worker or its node gone) are said, whatever they are
            said = first_line(str(e)).split(". ")[0][:300]  # Ray's first sentence: what happened, not its advice
            self.ended = {"returncode": -9, "failed": None, "stderr": "", "last_words": "",
                          "lost": f"its Ray task on {self.host or 'its node'} ended: {said}"}

    @property
    def lost(self) -> str | None:
        """Why its task ended without it (its node died, Ray cancelled it), in words; None where it ran to its end."""
        return None if self.ended is None else self.ended.get("lost")

    @property
    def returncode(self) -> int | None:
        return None if self.ended is None else self.ended.get("returncode")

    def cancel(self) -> None:
        """First call: nothing of its own (process 0's stop reaches it in their next collective); again: kill it."""
        if self.cancel_requested:
            self.kill()
        self.cancel_requested = True

    def kill(self) -> None:
        if self.ended is None:
            self.ray.cancel(self.ref)  # its task kills its worker as it goes
        try:
            self.ray.util.remove_placement_group(self.group)
        except Exception:  # noqa: BLE001 - already removed, or the cluster gone: nothing more to free
            pass

    def stderr_text(self) -> str:
        return str((self.ended or {}).get("stderr", ""))

    def last_words(self) -> str:
        return str((self.ended or {}).get("last_words", ""))
