"""One run from the parent's side: start the worker(s) of its resolved spec, feed the events to the record.

Shared by the headless CLI, the lab and sweeps, so all record and judge a run the same way. A run
over several local processes (`processes` > 1) starts one worker per process, joined over loopback (or, with
`--ray`, process 0 here and the others as Ray tasks: `tpulab.engine.ray_processes`);
process 0's events are the run's, and a process that dies takes the run down with its name and
reason, never leaving the others waiting in a collective.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Iterator

from tpulab import backends
from tpulab.backends import Cluster
from tpulab.base.errors import EXIT_CANCELLED, EXIT_OK, exit_code_of
from tpulab.base.events import Event, Failed, Log, Sample
from tpulab.base.probe import probe
from tpulab.engine.ceilings import Ceilings
from tpulab.engine.job import RunJob, job_of
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec
from tpulab.engine.worker import RunHandle, free_port, worker_env
from tpulab.machine.detect import RuntimeReport

STANDBY_ENV = "TPULAB_STANDBY"  # "off": the lab keeps no worker ready (its import costs a core while you edit)
FOLLOWERS_GRACE_S = 10.0  # after process 0 ends, the others have this long to end by themselves



class Standby:
    """One worker started before the run it will be handed: its framework imported, no device opened.

    The lab keeps one for the form's backend and device while the user edits, so Enter starts the run at
    once. Never on a TPU host (one process holds a TPU: the worker starts when the run does), never for
    runs over several processes, nor where `TPULAB_STANDBY=off`. Idle, it waits on a pipe and costs no CPU (its
    framework's import costs a core first); `drop()` ends it.
    """

    def __init__(self) -> None:
        self.handle: RunHandle | None = None

    @staticmethod
    def fits(spec: RunSpec, runtime: RuntimeReport) -> bool:
        return runtime.tpu is None and spec.cluster is None and spec.processes == 1 and \
            os.environ.get(STANDBY_ENV, "on") != "off"

    def want(self, spec: RunSpec, runtime: RuntimeReport) -> None:
        """Keep a worker ready for runs like `spec`: one made for another backend or device is replaced."""
        if not self.fits(spec, runtime):
            self.drop()
            return
        env = worker_env(spec.backend, spec.device, spec.workload.replicas(spec.params))
        if self.handle is not None and self.handle.alive and self.handle.env == env:
            return
        self.drop()
        self.handle = RunHandle.standby(spec.backend, spec.device, spec.workload.replicas(spec.params))

    def take(self, job: RunJob) -> RunHandle | None:
        """The waiting worker, handed `job`, if it was made for it; else None (and it is kept)."""
        spec, handle = job.spec, self.handle
        env = worker_env(spec.backend, spec.device, spec.workload.replicas(spec.params))
        if handle is None or not handle.alive or handle.env != env or spec.processes != 1 or spec.cluster:
            return None
        self.handle = None
        return handle.hand(job)

    def drop(self) -> None:
        if self.handle is not None:
            self.handle.kill()
            self.handle.proc.wait()
            self.handle = None


class Run:
    control = staticmethod(probe)  # the machine timed before the run and after it, framework-free

    def __init__(self, job: RunJob, runtime: RuntimeReport, standby: Standby | None = None) -> None:
        """`job.spec.cluster`: this process is one of a multi-host run started elsewhere (a pod slice, or
        --coordinator); None with `processes` > 1 in the params starts them all here. `standby`: a worker
        waiting for this run is handed it, if it was made for it.
        """
        spec = job.spec
        self.standby = standby
        self.job = job
        self.spec = spec
        self.workload = spec.workload
        self.params = spec.params
        self.device = spec.device
        self.backend, self.backend_reason = spec.backend, spec.backend_reason
        self.recorder = RunRecorder(spec, runtime, job.ceilings, job.id)
        self.cluster: Cluster | None = spec.cluster
        self.handles: list[RunHandle] = []
        self.failures: list[tuple[float, str]] = []  # (when, why) of processes other than 0
        self._watchers: list[threading.Thread] = []
        self._stopping = False  # the run is ending: a process killed now is not a failure
        self._cancel_asked = False  # by `cancel`, perhaps before the workers were there: they are told once they are

    @property
    def following(self) -> bool:
        """This process follows process 0 of a run started elsewhere: process 0 keeps the record."""
        return self.cluster is not None and self.cluster.process_id != 0

    @property
    def handle(self) -> RunHandle | None:
        """Process 0's worker: the one whose events are the run's."""
        return self.handles[0] if self.handles else None

    def _start(self, first: bool = True) -> None:
        """The worker(s), each handed the job; a waiting worker only for the `first` of a run's repeats."""
        job = self.job
        processes, replicas = self.spec.processes, self.workload.replicas(self.params)
        if self.cluster is not None:  # one process of a run started elsewhere: its share of the devices
            local = max(1, replicas // self.cluster.processes)
            self.handles = [RunHandle.start(job, self.cluster, local)]
            return
        if processes == 1:
            waiting = self.standby.take(job) if self.standby is not None and first else None
            self.handles = [waiting or RunHandle.start(job)]
            return
        if self.spec.ray is not None:  # process 0 here, the others Ray tasks where the cluster places them
            from tpulab.engine import ray_processes

            self.handles = ray_processes.start(job, processes, replicas, self.spec.ray, self.spec.per_host)
            return
        coordinator = f"127.0.0.1:{free_port()}"
        local = replicas // processes  # each process its share of the host devices
        self.handles = [RunHandle.start(job, Cluster(coordinator, processes, i, local=True), local)
                        for i in range(processes)]

    def events(self) -> Iterator[Event]:
        """Start the worker(s) and yield process 0's events, each already fed to the record; with `repeat`, again
        in a fresh process after each that finished. Cancelled before it started, it starts none; cancelled as
        they start, they are told as soon as they are there. The control probe times the machine before and after."""
        if self._cancel_asked:
            self.recorder.finish("cancelled", "stopped by the user before it started")
            return
        self.recorder.probe.before_s = self.control()
        for k in range(self.spec.repeat):
            if k:
                if self.recorder.status != "finished" or self._cancel_asked:
                    break
                self.recorder.begin_repeat()
                said = Log(text=f"process {k + 1} of {self.spec.repeat}: the same run in a fresh process (--repeat)",
                           t=time.time())
                self.recorder.feed(said)
                yield said
            began = time.perf_counter()
            yield from self._process(first=k == 0)
            if k == 0 and self.spec.repeat > 1:  # what each further process adds beyond its steps: the time left's
                timed = sum(s.seconds * s.steps for s in self.recorder.steps)
                self.recorder.overhead_s = max(0.0, time.perf_counter() - began - timed)
        self.recorder.probe.after_s = self.control()

    def _process(self, first: bool) -> Iterator[Event]:
        """One process of the run (its workers, where it has several), its events fed to the record."""
        self._stopping = False
        self._watchers = []
        self._start(first)
        if self._cancel_asked and not any(handle.cancel_requested for handle in self.handles):
            for handle in self.handles:
                handle.cancel()
        for i, follower in enumerate(self.handles[1:], 1):
            watcher = threading.Thread(target=self._watch, args=(i, follower), daemon=True)
            watcher.start()
            self._watchers.append(watcher)
        leader = self.handles[0]
        leader_failed: tuple[float, str] | None = None
        for event in leader.events():
            if isinstance(event, Failed):
                leader_failed = (event.t or time.time(), event.error)
            self.recorder.feed(event)
            yield event
            if isinstance(event, Sample) and self.recorder.stopped is None:
                self.recorder.stopped = self.recorder.too_busy()
                if self.recorder.stopped is not None:  # said once, then the worker stops after its current call
                    said = Log(text=self.recorder.stopped, t=time.time())
                    self.recorder.feed(said)
                    yield said
                    self.cancel()
        self._end_followers()
        if self.recorder.status == "running":  # the worker died without a last word
            self.recorder.finish(*self._death(leader, 0))
        if self.failures and self.recorder.status == "failed":
            self.recorder.error = self._cause(leader_failed)

    def _watch(self, index: int, handle: RunHandle) -> None:
        """A process other than 0: when it fails, the run fails, naming it; the others are stopped."""
        said: tuple[float, str] | None = None
        for event in handle.events():
            if isinstance(event, Sample):  # each process samples its own host: kept per host
                self.recorder.feed(event)
            if isinstance(event, Failed):
                said = (event.t or time.time(), event.error)
        if self._stopping or handle.returncode in (EXIT_OK, EXIT_CANCELLED) or handle.cancel_requested:
            return  # ended with the run, or stopped by it
        # Killed from outside (the kernel's OOM killer, a user): a cause, never a consequence of another's
        # failure, even when the watcher hears of it after process 0 reported the broken collective.
        when = 0.0 if handle.returncode == -signal.SIGKILL else time.time()
        self.failures.append(said or (when, f"process {index}: " + self._death(handle, index)[1]))
        self._stop_all()  # process 0 would otherwise wait for it in a collective

    def _stop_all(self) -> None:
        self._stopping = True
        for handle in self.handles:
            handle.kill()

    def _end_followers(self) -> None:
        deadline = time.monotonic() + FOLLOWERS_GRACE_S
        for watcher in self._watchers:
            watcher.join(max(0.0, deadline - time.monotonic()))
        self._stopping = True
        for handle in self.handles[1:]:
            handle.kill()

    def _cause(self, leader_failed: tuple[float, str] | None) -> str:
        """The first process to fail (by its own clock) is the cause; the others' failures follow from it."""
        failures = sorted(self.failures + ([leader_failed] if leader_failed else []))
        first = failures[0][1]
        then = [why for _, why in failures[1:] if why != first]
        return first + (f" (then: {'; '.join(then)[:300]})" if then else "")

    def _death(self, handle: RunHandle, index: int) -> tuple[str, str]:
        code = handle.returncode
        if handle.cancel_requested:
            return "cancelled", "stopped by the user"
        if self.failures and index == 0:
            return "failed", min(self.failures)[1]
        if handle.lost:  # its launcher lost it (a Ray task whose node died): no exit code of its own to read
            return "failed", handle.lost
        words = handle.last_words()
        processes = self.cluster.processes if self.cluster else self.spec.processes
        said = backends.get(self.spec.backend).death(handle.stderr_text(), processes)
        if said:
            return "failed", f"process {index} {said}: {words}"
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            hint = " (out of memory? try a smaller batch or image size)" if name == "SIGKILL" else ""
            why = f"the worker was killed by {name}{hint}"
        else:
            why = f"the worker exited with code {code}"
        return "failed", why + (f"; its last words: {words}" if words else "")

    def cancel(self) -> None:
        """Every process stops after the current step (they agree on which); again: kill them."""
        self._cancel_asked = True
        for handle in self.handles:
            handle.cancel()

    @property
    def exit_code(self) -> int:
        return exit_code_of(self.recorder.status)


def run_job(spec: RunSpec, report: RuntimeReport, db: Path | None = None, *, ceilings: Ceilings | None = None,
            kept: bool = True, standby: Standby | None = None) -> Run:
    """A run ready to start, made from its job (`tpulab.engine.job.job_of`: the ceilings kept at `db`, or
    `ceilings`; its trace kept or not); `standby`: a worker waiting for this run is handed it."""
    return Run(job_of(spec, db, ceilings=ceilings, kept=kept), report, standby)
