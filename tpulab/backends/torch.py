"""PyTorch: one device per process, eager or `torch.compile`, its own profiler, the doctor in its words; over
several processes (`--processes N`, torchrun's, `--coordinator`), DistributedDataParallel through torch.distributed.

The declaration (`BACKEND`) is framework-free: what the installed wheel is (its local version says
`+cpu`, `+cu128`, `+rocm6.2`) is read from metadata, so the doctor can tell a CPU-only build on a
GPU machine without importing it. The functions below it import torch and run only inside a
worker. Keras 3 runs on it too (`KERAS_BACKEND=torch`), so every Keras workload runs here through
the shared runner; the user's own `nn.Module` and the conv, roofline and decode loops have
runners of their own. `auto` prefers it least: it is chosen where asked for, or where no other
installed backend drives the device.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from tpulab.backends import (LAUNCHER_ENV, Backend, Cluster, DeviceError, Fitness, Placement, Profiler, Runtime,
                             keras_version)
from tpulab.backends.profile_table import (ELEMENTWISE, FRAMEWORK_OP, MATMUL, MOVEMENT, OTHER, REDUCTION, OpInfo, TraceEvent,
                                      TraceLine, TracePlane, build, category)
from tpulab.base import fmt
from tpulab.base.errors import first_line
from tpulab.base.figures import ALLREDUCE_BYTES, FigureValue, busbw
from tpulab.base.home import home
from tpulab.base.timing import Flag
from tpulab.machine.detect import detect
from tpulab.machine.fingerprint import physical_cores
from tpulab.machine.verdict import Verdict, version_tuple

if TYPE_CHECKING:
    from tpulab.base.events import Profile
    from tpulab.machine.detect import RuntimeReport

# PyPI's default torch wheel on Linux is the CUDA build (pytorch.org/get-started/locally lists the others).
TORCH_CUDA_INSTALL = "pip uninstall -y torch && pip install torch  # PyPI's default Linux wheel is the CUDA build"
# The oldest driver each CUDA major version runs on (NVIDIA's CUDA release notes, minor-version compatibility).
MIN_DRIVER = {11: (450, 80), 12: (525, 60), 13: (580, 0)}
NO_SHARDS = ("tpulab runs PyTorch on one device per process (--processes N: DistributedDataParallel, one device each): "
             "leave --shards out, or use --backend jax to shard")
NO_COMPILE = ("DistributedDataParallel's steps run eager here (tpulab does not compile a DDP step): use --compile off, "
              "or one process")
ALLREDUCE_REPEATS = 5  # the all-reduce probe's timed calls, after one untimed: their median is its time
ALONE_STEPS = 5  # one process's steps timed alone after a run over several (after one untimed), within the budget
ALONE_BUDGET_S = 10.0  # ... the steps it times alone stop past this (at least one is timed)
ALONE_WAIT_S = 600  # how long the other processes wait for it (gloo's monitored barrier; a step that long is no baseline)


def wheel_build(version: str | None) -> str | None:
    """The build a torch version's local part names: "cpu", "cuda 12.8", "rocm 6.2"; None where it names none
    (PyPI's default wheel: CUDA on Linux, CPU and MPS on a Mac)."""
    local = (version or "").partition("+")[2]
    if local == "cpu":
        return "cpu"
    cuda = re.fullmatch(r"cu(\d+)(\d)", local)
    if cuda:
        return f"cuda {cuda.group(1)}.{cuda.group(2)}"
    rocm = re.fullmatch(r"rocm([\d.]+)", local)
    return f"rocm {rocm.group(1)}" if rocm else None


def driver_too_old(cuda: str, driver: str | None) -> bool:
    """Whether an NVIDIA driver is older than the one a CUDA version (e.g. "12.8") needs."""
    need = MIN_DRIVER.get(version_tuple(cuda)[0] if version_tuple(cuda) else 0)
    return bool(need and driver and version_tuple(driver)[:2] < need)


class TorchBackend(Backend):
    name = "torch"
    fuser = "torch.compile"
    title = "PyTorch"
    short = "torch"
    distributions = ("torch",)
    install = "pip install 'tpulab[torch]'  # or: pip install torch --index-url https://download.pytorch.org/whl/cpu"
    keras = True  # Keras 3 on torch: eager unless --compile on (jit_compile=True)
    # TensorFlow and triton (PyTorch's kernel compiler, which its FLOP counter and inductor import where it is
    # installed, as beside a CUDA build) each bring their own LLVM: triton imported after TensorFlow kills the
    # process (SIGSEGV: torch 2.14.1 with TF 2.21, seen here). Nothing a torch worker runs needs TensorFlow; Keras
    # and KerasHub reach for it when it is installed, and do without.
    excludes = ("tensorflow",)
    # several processes: DistributedDataParallel over torch.distributed (gloo on the CPU, NCCL on GPUs), one device each
    one_process = {"compile": NO_COMPILE}
    no_shards = NO_SHARDS  # refused when the run is resolved; its runtime refuses too, for a caller of its own
    no_flops = "torch.utils.flop_counter counted no FLOPs for this step"
    compiles = True
    no_profiler = None  # it profiles: `Runtime.profiler`

    def worker_env(self, device: str, shards: int, environ: Mapping[str, str]) -> dict[str, str]:
        """Keras on torch; OpenMP's threads sleep rather than spin between ops (with one core busy elsewhere, a
        spinning pool made a 1 ms step take 200 ms here); tensors of 2 MiB or more on transparent huge pages, as
        numpy's arrays are (decode's weights on 4 KiB pages made its step 10% slower here at batch 8); inductor's
        cache in tpulab's home; unless the user set them."""
        env = super().worker_env(device, shards, environ)
        own = {"OMP_WAIT_POLICY": "PASSIVE", "THP_MEM_ALLOC_ENABLE": "1",
               "TORCHINDUCTOR_CACHE_DIR": str(home(environ) / "torch-cache")}
        env.update({k: v for k, v in own.items() if k not in environ})
        if device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run keeps off the GPU (Keras on torch would take it)
        return env

    def fitness(self, report: RuntimeReport, device: str) -> Fitness:
        """Preferred least: `auto` keeps TensorFlow or JAX where either drives the device."""
        if device == "tpu":  # first: installing it would not help
            return Fitness(False, "PyTorch drives no TPU here (torch_xla is not supported)", 0)
        if not self.installed(report.packages):
            return Fitness(False, "PyTorch is not installed", 0)
        if device == "gpu" and wheel_build(report.packages.get("torch")) == "cpu":
            return Fitness(False, "this PyTorch is a CPU-only build", 0)
        return Fitness(True, "PyTorch drives this device (no other installed backend does)", 0)

    def verdicts(self, report: RuntimeReport, others: list[Backend]) -> list[Verdict]:
        version = report.packages.get("torch")
        if not report.gpus or not version:
            return []
        names = ", ".join(g.name for g in report.gpus)
        view = report.frameworks.get(self.name) or {}
        if view.get("gpus"):
            return [Verdict("ok", "gpu", f"{len(view['gpus'])} GPU(s) in use by PyTorch: {names}.", framework=self.name)]
        build = view.get("build") or wheel_build(version)
        if build == "cpu":
            return [Verdict("error", "gpu", f"{names} found, but this PyTorch ({version}) is a CPU-only build: install "
                            "the CUDA build.", TORCH_CUDA_INSTALL, self.name)]
        if build and build.startswith("rocm"):
            return [Verdict("error", "gpu", f"{names} found, but this PyTorch ({version}) is a ROCm build, for AMD GPUs: "
                            "install the CUDA build.", TORCH_CUDA_INSTALL, self.name)]
        driver = report.gpus[0].driver
        cuda = build.split()[1] if build and build.startswith("cuda") else None
        if cuda and driver_too_old(cuda, driver):
            major = version_tuple(cuda)[0]
            return [Verdict("error", "gpu", f"{names} found, but driver {driver} is too old for this PyTorch's CUDA "
                            f"{cuda} (it needs {'.'.join(map(str, MIN_DRIVER[major]))} or newer): update the driver, "
                            "or install a PyTorch built for an older CUDA.",
                            "https://pytorch.org/get-started/locally/  # pick the CUDA version your driver supports",
                            self.name)]
        if view:
            return [Verdict("error", "gpu", f"{names} found, but PyTorch sees no GPU (torch.cuda.is_available() is "
                            f"False; its build: {build or 'unknown'}).", TORCH_CUDA_INSTALL, self.name)]
        return []

    def holds_device(self) -> bool:
        """PyTorch drives no TPU: it never holds one."""
        return False

    def death(self, stderr: str, processes: int) -> str | None:
        """torch.distributed's words for a peer that went away (gloo's closed connection) or never came (the store's
        timeout)."""
        if processes < 2:
            return None
        if "DistStoreError" in stderr or "Socket Timeout" in stderr:
            return (f"could not join the other {processes - 1} process(es) in time (is every process started, with "
                    "the same --coordinator, or torchrun's MASTER_ADDR and MASTER_PORT?)")
        if "Connection closed by peer" in stderr or "Connection reset by peer" in stderr:
            return "lost another process in a collective (it died: its own failure says why)"
        return None

    def runtime(self) -> Runtime:
        import torch  # noqa: F401 - the framework, first, in the worker

        return TorchRuntime()


BACKEND = TorchBackend()


# --- the framework side: in a worker only ------------------------------------------------------
def build_name() -> str:
    """What this torch was built for: "cpu", "cuda 12.8", "rocm 6.2"."""
    import torch

    if torch.version.cuda:
        return f"cuda {torch.version.cuda}"
    hip = getattr(torch.version, "hip", None)
    return f"rocm {hip}" if hip else "cpu"


def mps() -> bool:
    import torch

    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def synchronize(device: Any) -> None:
    """Wait for the device's queued work (CUDA and MPS run asynchronously; the CPU is done already)."""
    import torch

    kind = getattr(device, "type", str(device))
    if kind == "cuda":
        torch.cuda.synchronize(device)
    elif kind == "mps":
        torch.mps.synchronize()


def local_processes(cluster: Cluster, environ: Mapping[str, str]) -> int:
    """How many of a run's processes share this machine: torchrun says (LOCAL_WORLD_SIZE); all of those tpulab
    started here (--processes); else one per machine (--coordinator)."""
    given = environ.get("LOCAL_WORLD_SIZE", "")
    if given.isdigit() and int(given) >= 1:
        return int(given)
    return cluster.processes if cluster.local else 1


def threads_for(cluster: Cluster, environ: Mapping[str, str]) -> tuple[int, str]:
    """Intra-op threads for each process of a run over several, and where that count came from: OMP_NUM_THREADS
    where it is set (torchrun sets 1 unless you set it), else this machine's physical cores over its processes."""
    given = environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) >= 1:
        launcher = " (torchrun sets 1 unless you set it)" if cluster.coordinator == LAUNCHER_ENV else ""
        return int(given), f"OMP_NUM_THREADS={given} in the environment{launcher}"
    cores, local = physical_cores(), local_processes(cluster, environ)
    return max(1, cores // local), f"{cores} physical core(s) / {local} process(es) on this machine"


class TorchRuntime(Runtime):
    """One device per process: eager or compiled steps, the allocator's figures on CUDA, torch.profiler; over
    several processes, DistributedDataParallel through torch.distributed (gloo on the CPU, NCCL on GPUs)."""

    def __init__(self) -> None:
        self.cluster: Cluster | None = None  # the run over several processes this one joined
        self.threads: tuple[int, str] | None = None  # each process's intra-op threads, and where the count came from
        self.ddp_model: Any = None  # the Keras model `keras_parallel` made train through DistributedDataParallel

    def versions(self) -> dict[str, str]:
        import torch

        return {"torch": torch.__version__, "torch_build": build_name(), "keras": keras_version(),
                "python": platform.python_version()}

    # --- several processes: torch.distributed ---------------------------------------------------
    def join(self, cluster: Cluster) -> None:
        """torch.distributed over the cluster: the coordinator as MASTER_ADDR:MASTER_PORT, rank the process id (or
        torchrun's own environment), NCCL where CUDA is visible, else gloo; each process's threads set first.

        Bounded: a process that never joins, or that a collective waits for (killed, hung), fails the run after
        the cluster's join timeout.
        """
        import datetime

        import torch
        import torch.distributed as dist

        if cluster.coordinator == "auto":
            raise DeviceError("PyTorch joins no TPU pod slice (torch_xla is not supported): use --backend jax")
        self.threads = threads_for(cluster, os.environ)
        torch.set_num_threads(self.threads[0])
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK") or cluster.process_id) % torch.cuda.device_count())
        elif cluster.local:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every process here: over loopback
        timeout = datetime.timedelta(seconds=cluster.join_timeout_s)
        backend = "nccl" if cuda else "gloo"
        try:
            if cluster.coordinator == LAUNCHER_ENV:  # torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (its store)
                dist.init_process_group(backend, init_method=LAUNCHER_ENV, timeout=timeout)
            else:
                dist.init_process_group(backend, init_method=f"tcp://{cluster.coordinator}", rank=cluster.process_id,
                                        world_size=cluster.processes, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - whatever torch raises, the run fails saying who did not join
            where = "torchrun's MASTER_ADDR:MASTER_PORT" if cluster.coordinator == LAUNCHER_ENV else cluster.coordinator
            raise DeviceError(f"process {cluster.process_id} could not join the other {cluster.processes - 1} "
                              f"within {cluster.join_timeout_s} s at {where}: {first_line(str(e)) or type(e).__name__}"
                              ) from None
        self.cluster = cluster

    @staticmethod
    def world() -> tuple[int, int]:
        """(processes joined, this one's rank): (1, 0) where none were joined."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return 1, 0
        return dist.get_world_size(), dist.get_rank()

    def leave(self) -> None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()

    def comm_device(self) -> Any:
        """Where a collective's tensors live: the GPU under NCCL, the host under gloo."""
        import torch

        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")

    def gather(self, values: list[float]) -> list[list[float]]:
        """Every process's values, in process order; a no-op on one process."""
        import torch
        import torch.distributed as dist

        world, _ = self.world()
        if world == 1:
            return [values]
        mine = torch.tensor(values, dtype=torch.float64, device=self.comm_device())
        table = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(table, mine)
        return [row.cpu().tolist() for row in table]

    def place(self, device: str, shards: int) -> Placement:
        import torch

        world, _ = self.world()
        if world > 1 and shards != world:
            raise DeviceError(f"--shards {shards}: PyTorch runs one device per process, and this run has {world}: give "
                              f"--shards {world} or leave it out")
        if world == 1 and shards > 1:
            raise DeviceError(f"--shards {shards}: {NO_SHARDS}")
        kind = device if device != "auto" else "gpu" if torch.cuda.is_available() or mps() else "cpu"
        if kind == "tpu":
            raise DeviceError("--device tpu: PyTorch drives no TPU here (torch_xla is not supported): use --backend jax")
        if kind == "gpu":
            if torch.cuda.is_available():
                index = torch.cuda.current_device()
                chosen, name = torch.device("cuda", index), torch.cuda.get_device_name(index)
            elif mps():
                chosen, name = torch.device("mps"), "Apple GPU (MPS)"
            else:
                raise DeviceError(f"PyTorch sees no GPU (its build: {build_name()}); see `tpulab doctor`")
        else:
            chosen, name = torch.device("cpu"), detect().cpu.model
        if world == 1 or self.cluster is None:
            return Placement(kind=kind, name=name, replicas=1, strategy=f"one {chosen.type} device", devices=[chosen])
        import torch.distributed as dist

        local = local_processes(self.cluster, os.environ)
        machines = 1 if self.cluster.local else max(1, world // local)
        return Placement(kind=kind, name=name, replicas=world, hosts=world, machines=machines, devices=[chosen],
                         strategy=f"DistributedDataParallel({world} processes x one {chosen.type} device, "
                                  f"{dist.get_backend()})")

    def keras_inputs(self, x: Any, y: Any, batch: int, seed: int, train: bool, pipeline: str, shards: int) -> Any:
        """numpy batches; over several processes, this process's rows and share of each global batch (the generator
        draws each process's own slices)."""
        from tpulab.backends.keras_inputs import rows

        n, i = self.world()
        if n == 1:
            return super().keras_inputs(x, y, batch, seed, train, pipeline, shards)
        return super().keras_inputs(rows(x, slice(i, None, n)), rows(y, slice(i, None, n)), batch // n,
                                    seed + i if pipeline == "generator" else seed, train, pipeline, max(1, shards // n))

    def keras_parallel(self, model: Any, placement: Placement) -> None:
        """Over several processes, `fit` trains through DistributedDataParallel: the weights broadcast from process 0,
        each process's gradients averaged over all (bucketed, as the backward pass makes them) before the step.

        Keras on PyTorch has no distribution: its own training step (Keras 3's `TorchTrainer.train_step`) is taken
        again with the forward pass through the DDP wrapper (`ddp_train_step`); a model with a step of its own is
        refused."""
        world, _ = self.world()
        if world == 1:
            return
        from keras.src.backend.torch.trainer import TorchTrainer
        from torch.nn.parallel import DistributedDataParallel

        if type(model).train_step is not TorchTrainer.train_step:
            raise DeviceError(f"--processes {world}: this Keras model has a train_step of its own, which tpulab cannot "
                              "put through DistributedDataParallel on PyTorch: run it in one process, or on --backend jax")
        device = placement.devices[0]
        ddp = DistributedDataParallel(model, device_ids=[device] if getattr(device, "type", "") == "cuda" else None)
        model.train_step = ddp_train_step(model, ddp)
        self.ddp_model = model

    def parallel_figures(self, batch: int = 0, step: Callable[[int], Callable[[], Any]] | None = None
                         ) -> dict[str, FigureValue]:
        """Each process's threads, the all-reduce probe, and with `step`, one process's step timed alone (process 0,
        every core, this machine's share of the global `batch`; the others wait); {} on one process."""
        world, _ = self.world()
        if world == 1:
            return {}
        out: dict[str, FigureValue] = {}
        if self.threads is not None:
            out["threads_per_process"], out["threads_from"] = self.threads
        out.update(self.allreduce())
        if step is not None and batch:
            out.update(self.alone(batch, step))
        return out

    def allreduce(self) -> dict[str, FigureValue]:
        """all_reduce (sum) of a float32 tensor of ALLREDUCE_BYTES, once untimed then ALLREDUCE_REPEATS times, each
        from a barrier; its time the slowest process's median; algbw = bytes / time, busbw = algbw * 2(n-1)/n (as
        nccl-tests define them)."""
        import torch
        import torch.distributed as dist

        world, _ = self.world()
        device = self.comm_device()
        tensor = torch.ones(ALLREDUCE_BYTES // 4, dtype=torch.float32, device=device)
        times = []
        for _ in range(1 + ALLREDUCE_REPEATS):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(tensor)
            synchronize(device)
            times.append(time.perf_counter() - start)
            tensor.fill_(1.0)
        seconds = max(row[0] for row in self.gather([statistics.median(times[1:])]))
        algbw = ALLREDUCE_BYTES / seconds
        return {"allreduce_bytes": float(ALLREDUCE_BYTES), "allreduce_s": seconds, "allreduce_algbw": algbw,
                "allreduce_busbw": busbw(algbw, world)}

    def alone(self, batch: int, step: Callable[[int], Callable[[], Any]]) -> dict[str, FigureValue]:
        """One process's training step with no other: process 0 times it on what this machine does of the global
        batch (all of it where every process is here; a GPU's share on a GPU), with every core's thread, the DDP
        wrapper set aside; the others wait for it. The scaling efficiency is the run's step against it."""
        import datetime

        import torch
        import torch.distributed as dist

        world, rank = self.world()
        cuda = torch.cuda.is_available()
        local = 1 if cuda or self.cluster is None else local_processes(self.cluster, os.environ)
        examples = max(1, batch * local // world)
        threads = torch.get_num_threads() if cuda else physical_cores()
        seconds: float | None = None
        if rank == 0:
            model, own = self.ddp_model, None
            if model is not None:
                own = model.__dict__.pop("train_step", None)  # Keras's own step, with no DDP wrapper
            torch.set_num_threads(threads)
            try:
                one = step(examples)
                one()  # its first call (and the DDP-free step's): not timed
                times: list[float] = []
                begun = time.perf_counter()
                while len(times) < ALONE_STEPS and (not times or time.perf_counter() - begun < ALONE_BUDGET_S):
                    start = time.perf_counter()
                    one()
                    times.append(time.perf_counter() - start)
                seconds = statistics.median(times)
            finally:
                torch.set_num_threads(self.threads[0] if self.threads else threads)
                if own is not None:
                    model.train_step = own
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=ALONE_WAIT_S))
        else:
            dist.barrier()
        if rank != 0:
            return {}
        return {"one_process_step_s": seconds,
                "one_process": f"{examples} examples a step, {threads} thread(s), no other process"}

    def probe(self) -> dict[str, Any]:
        """PyTorch's own view of the machine, for `tpulab detect`, the doctor and `auto`."""
        import torch

        out: dict[str, Any] = dict(self.versions())
        cuda = torch.cuda.is_available()
        out["build"] = build_name()
        out["platform"] = "cuda" if cuda else "mps" if mps() else "cpu"
        out["threads"] = torch.get_num_threads()
        out["mps"] = mps()
        out["gpus"] = [{"name": p.name, "memory_bytes": p.total_memory, "compute_capability": f"{p.major}.{p.minor}"}
                       for p in (torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count()))] \
            if cuda else []
        out["tpu_cores"] = 0
        memory = ", ".join(f"{g['memory_bytes'] / 2**30:.1f} GiB" for g in out["gpus"])
        out["also"] = (f"{out['build'].upper()} build, {out['threads']} intra-op threads"
                       + (f", GPU memory {memory}" if memory else "") + (", MPS available" if out["mps"] else ""))
        return out

    def cache_hit(self) -> bool | None:
        """Whether every graph inductor compiled so far came from its cache (None: nothing compiled yet)."""
        from torch._dynamo.utils import counters

        hits, misses = counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]
        return None if hits + misses == 0 else misses == 0

    def keras_step_cost(self, model: Any, x: Any, y: Any) -> tuple[float | None, float | None]:
        """A Keras model's training step on torch (forward, loss, backward; not the optimiser's update) as
        torch.utils.flop_counter counts it; no bytes. The gradients it leaves are cleared."""
        import keras
        from torch.utils.flop_counter import FlopCounterMode

        counter = FlopCounterMode(display=False)
        try:
            with counter:
                xs, ys = keras.tree.map_structure(keras.ops.convert_to_tensor, (x, y))
                model.compute_loss(x=xs, y=ys, y_pred=model(xs, training=True)).backward()
        except Exception:  # noqa: BLE001 - a model whose step cannot be counted this way: its FLOPs are unknown
            return None, None
        finally:
            for v in model.trainable_variables:
                v.value.grad = None
        return float(counter.get_total_flops()) or None, None

    def keras_jit(self, requested: bool) -> bool | str:
        return bool(requested)  # Keras on torch: True wraps the step in torch.compile, else eager

    def profiler(self) -> Profiler:
        return TorchProfiler()

    def memory_stats(self) -> list[dict[str, Any]] | None:
        """The caching allocator's figures per CUDA device (None on the CPU: the process's RSS is its memory)."""
        import torch

        if not torch.cuda.is_available():
            return None
        return [{"bytes_in_use": torch.cuda.memory_allocated(i), "peak_bytes_in_use": torch.cuda.max_memory_allocated(i),
                 "bytes_reserved": torch.cuda.memory_reserved(i), "peak_bytes_reserved": torch.cuda.max_memory_reserved(i),
                 "bytes_limit": torch.cuda.get_device_properties(i).total_memory}
                for i in range(torch.cuda.device_count())]


def ddp_train_step(model: Any, ddp: Any) -> Callable[[Any], Any]:
    """Keras 3's training step on PyTorch (`TorchTrainer.train_step`, 3.15), with the forward pass through `ddp` (a
    DistributedDataParallel of `model`), so that the backward pass all-reduces the gradients (their mean over the
    processes) before the optimizer applies them."""
    import torch
    from keras.src import tree
    from keras.src.trainers.data_adapters import data_adapter_utils

    def train_step(data: Any) -> Any:
        x, y, sample_weight = data_adapter_utils.unpack_x_y_sample_weight(data)
        y_pred = ddp(x, training=True) if model._call_has_training_arg else ddp(x)
        model.zero_grad()
        loss = model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
        model._loss_tracker.update_state(loss, sample_weight=next(i for i in tree.flatten(x) if i is not None).shape[0])
        if model.optimizer is not None:
            loss = model.optimizer.scale_loss(loss)
        if model.trainable_weights:
            loss.backward()  # DDP's hooks all-reduce each bucket of gradients as it is made
            weights = model.trainable_weights[:]
            with torch.no_grad():
                model.optimizer.apply([v.value.grad for v in weights], weights)
        return model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    return train_step


# --- the profiler ----------------------------------------------------------------------------------
STEP = "tpulab_step#"  # the step annotation's name, with its number
CHROME_TRACE = "torch_trace.json"  # the raw trace, as Perfetto opens it
MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "convolution", "conv2d", "conv1d", "conv3d",
              "mkldnn_convolution", "_convolution", "cudnn_convolution", "scaled_dot_product_attention"}
NO_BYTES = "torch.profiler counts no bytes per op: each op's bound is unknown"


REDUCTION_OPS = {"softmax", "log_softmax", "layer_norm", "native_layer_norm", "batch_norm", "native_batch_norm",
                 "group_norm", "native_group_norm", "max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "mean", "sum",
                 "amax", "amin", "logsumexp", "nll_loss", "nll_loss_forward", "mse_loss", "cross_entropy_loss"}
ELEMENTWISE_OPS = {"lerp", "lerp_", "addcdiv", "addcdiv_", "addcmul", "addcmul_", "threshold", "where", "zero_", "fill_"}
MOVEMENT_OPS = {"t", "view", "expand", "permute", "contiguous", "as_strided", "unsqueeze", "squeeze", "flatten",
                "reshape", "select", "slice", "index", "cat", "stack", "to", "_to_copy", "copy_", "clone", "transpose"}


def op_category(name: str) -> str:
    """An aten op's category, by its name without the namespace: "aten::addmm" -> matmul/conv,
    "aten::clamp_min" -> elementwise (by its first word, where that names one)."""
    short = name.rpartition("::")[2]
    base = short.removesuffix("_backward").strip("_")
    if short in MATMUL_OPS or base in MATMUL_OPS or "convolution" in short:
        return MATMUL
    if base in MOVEMENT_OPS:
        return MOVEMENT
    if base in REDUCTION_OPS:
        return REDUCTION
    if base in ELEMENTWISE_OPS:
        return ELEMENTWISE
    first = category(base.split("_")[0])
    return first if first != OTHER else category(base)


class TorchProfiler(Profiler):
    """`torch.profiler`: each aten op's self time from the nesting of its events, its FLOPs from the profiler's
    own counts (attributed to the op that did the work), no bytes; each torch.compile graph by what it is
    (`graph_names`); the profiler's own overhead on the step, timed in turn with the same step untraced
    (`untraced`); the raw trace kept as a Chrome trace."""

    name = "torch.profiler"

    def __init__(self) -> None:
        self._prof: Any = None
        self._live: tuple[Any, list[Any]] | None = None  # the running profile and its activities, while tracing
        self._traced: list[float] = []  # each traced step's wall time, annotation included (s)
        self._untraced: list[float] = []  # each step run with the profiler's collection paused (s)

    @contextmanager
    def trace(self, folder: Path) -> Iterator[None]:
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        with profile(activities=activities, with_flops=True, record_shapes=True) as prof:
            self._live = (prof, activities)
            try:
                yield
            finally:
                self._live = None
        self._prof = prof
        prof.export_chrome_trace(str(Path(folder) / CHROME_TRACE))

    @contextmanager
    def step(self, number: int) -> Iterator[None]:
        from torch.profiler import record_function

        start = time.perf_counter()
        with record_function(f"{STEP}{number}"):
            yield
        self._traced.append(time.perf_counter() - start)

    @contextmanager
    def untraced(self) -> Iterator[None]:
        """The work inside runs with the profiler's collection paused (`toggle_collection_dynamic`: no event is
        recorded, so it costs what an untraced step costs), timed: `read` sets the traced steps against these."""
        if self._live is None:
            raise DeviceError("torch.profiler: untraced() runs inside trace()")
        prof, activities = self._live
        prof.toggle_collection_dynamic(False, activities)
        start = time.perf_counter()
        try:
            yield
        finally:
            self._untraced.append(time.perf_counter() - start)
            prof.toggle_collection_dynamic(True, activities)

    def read(self, folder: Path, programs: list[Any] | None = None) -> Profile:
        if self._prof is None:
            raise DeviceError("torch.profiler: nothing was traced")
        events = self._prof.events()
        graphs = graph_names(events, captured_ops() if any(GRAPH.fullmatch(e.name) for e in events) else {})
        planes, flops = trace_planes(events, graphs)
        named = set(graphs.values())

        def lookup(module: str | None, name: str, kind: str) -> OpInfo | None:
            if name in named:  # fused kernels and extern calls of one graph: no one category says what it does
                return OpInfo("CompiledFxGraph", OTHER)
            return OpInfo(name.rpartition("::")[2], op_category(name), flops.get(name))

        profile = build(planes, lookup, profiler=self.name, trace_path=str(folder),
                        no_flops="torch.profiler counted no FLOPs for these ops")
        said = overhead(self._traced, self._untraced)
        if said:
            profile.verdicts.append(said)
        return profile


OVERHEAD = "profiler-overhead"  # the verdict that sets a traced step against the same step untraced


def overhead(traced: list[float], untraced: list[float]) -> Flag | None:
    """Why a traced step is slower than the steady one: the profiler's own cost (an event, with its inputs'
    shapes, recorded at every op), from the medians of the same step timed traced and untraced in turn in this
    run; None where no step ran untraced."""
    if not traced or not untraced:
        return None
    t, u = statistics.median(traced), statistics.median(untraced)
    timed = (f"a traced step took {fmt.seconds(t)}, the same step untraced {fmt.seconds(u)} (medians of "
             f"{len(traced)} and {len(untraced)}, timed in turn in this run)")
    if t <= u:
        return Flag(OVERHEAD, f"{timed}: the profiler's own overhead was too small to measure")
    return Flag(OVERHEAD, f"{timed}: the profiler's own overhead is {fmt.seconds(t - u)} a step ({(t - u) / t:.0%} "
                "of a traced step), inside the op table's times and its time not attributed to any op; the steady "
                "step time has none of it")


# --- torch.compile's graphs, named --------------------------------------------------------------------
GRAPH = re.compile(r"## Call CompiledFxGraph (\S+) ##")  # inductor's annotation of one graph's call (its cache key)
REGION = "Torch-Compiled Region: "  # dynamo's annotation of a compiled frame's call, with its compile id ("0/0")
FORWARD, BACKWARD = "CompiledFunction", "CompiledFunctionBackward"  # AOTAutograd's autograd.Function and its node


def captured_ops() -> dict[str, int]:
    """The ops dynamo captured in each compiled frame's graph, by compile id ("0/0"), as torch's own compilation
    metrics keep them (`torch._dynamo.utils.get_compilation_metrics`); forward graphs only: a backward graph is
    AOTAutograd's, and its metrics count no ops."""
    from torch._dynamo.utils import get_compilation_metrics

    return {m.compile_id: m.graph_op_count for m in get_compilation_metrics()
            if m.compile_id and m.graph_op_count is not None and m.is_forward is not False}


def graph_names(events: list[Any], ops: Mapping[str, int]) -> dict[int, str]:
    """Each compiled graph's call in the trace (inductor's `## Call CompiledFxGraph <key> ##`), by the event object's
    `id()`, named by what it is: "compiled forward, graph 1 of 2 (41 ops)", "compiled backward, graph 1".

    From torch's own events only: a forward graph runs inside dynamo's `Torch-Compiled Region: <compile id>` (under
    AOTAutograd's `CompiledFunction` when it trains), a backward graph under `CompiledFunctionBackward`, whose
    sequence number is its forward's (autograd's own link from a node to the op that made it). Graphs are numbered
    by their frame's compile id, in the order the trace first ran them (a graph break makes two); `ops`: the ops
    dynamo captured per compile id (`captured_ops`). A graph no region encloses is named by its cache key.
    """
    regions: dict[tuple[int, int], str | None] = {}  # (thread, sequence number) of a CompiledFunction: compile id
    calls: list[tuple[Any, str, str | None]] = []  # (event, "forward" or "backward", compile id)
    for e in sorted(events, key=lambda e: e.time_range.start):
        if e.name == FORWARD:
            regions[(e.thread, e.sequence_nr)] = compile_id(e)
        elif GRAPH.fullmatch(e.name):
            wrapper = enclosing(e, lambda name: name in (FORWARD, BACKWARD))
            if wrapper is not None and wrapper.name == BACKWARD:
                calls.append((e, "backward", regions.get((wrapper.fwd_thread, wrapper.sequence_nr))))
            else:
                calls.append((e, "forward", compile_id(e)))
    forward = list(dict.fromkeys(c for _, way, c in calls if way == "forward" and c))
    order = forward + [c for c in dict.fromkeys(c for _, _, c in calls if c) if c not in forward]
    out: dict[int, str] = {}
    for e, way, c in calls:
        if not c:
            out[id(e)] = f"compiled {way}, graph {e.name.split()[3]}"  # its cache key: nothing tells more
        elif way == "backward":
            out[id(e)] = f"compiled backward, graph {order.index(c) + 1}"
        else:
            count = f" ({ops[c]} ops)" if c in ops else ""
            out[id(e)] = f"compiled forward, graph {order.index(c) + 1} of {len(forward)}{count}"
    return out


def compile_id(event: Any) -> str | None:
    """The compile id ("0/0") of the compiled frame whose call encloses `event`, or None."""
    region = enclosing(event, lambda name: name.startswith(REGION))
    return region.name[len(REGION):] if region is not None else None


def enclosing(event: Any, wanted: Callable[[str], bool]) -> Any:
    """The nearest event enclosing `event` whose name `wanted` accepts, or None."""
    parent = event.cpu_parent
    while parent is not None and not wanted(parent.name):
        parent = parent.cpu_parent
    return parent


def trace_planes(events: list[Any], names: Mapping[int, str] | None = None) \
        -> tuple[list[TracePlane], dict[str, float]]:
    """torch.profiler's events as the op table's neutral view, and each op's FLOPs per call; `names`: an op's name
    by its event object's `id()`, where it is not the event's own (a compiled graph's: `graph_names`).

    The profiler puts an op's FLOPs on the outer op (`aten::conv2d`) while the time is its kernel's
    (`aten::mkldnn_convolution`): each count goes down the call tree to the child that took the most
    time, so that an op's FLOPs and its self time are the same op's. Ops with no count stay unknown.
    """
    host: dict[int, list[TraceEvent]] = {}
    device: dict[int, list[TraceEvent]] = {}
    counted: dict[str, float] = {}
    calls: dict[str, int] = {}
    for e in events:
        start, end = e.time_range.start * 1e3, e.time_range.end * 1e3
        if e.name.startswith(STEP):
            stats: dict[str, Any] = {"step_num": int(e.name[len(STEP):])}
            host.setdefault(e.thread, []).append(TraceEvent(e.name, start, end - start, stats))
            continue
        on_device = str(getattr(e, "device_type", "")).endswith(("CUDA", "PrivateUse1"))
        (device if on_device else host).setdefault(e.thread, []).append(
            TraceEvent(e.name, start, end - start, {FRAMEWORK_OP: names.get(id(e), e.name) if names else e.name}))
        if not on_device:
            calls[e.name] = calls.get(e.name, 0) + 1
            if getattr(e, "flops", 0):
                worker = doer(e).name
                counted[worker] = counted.get(worker, 0.0) + float(e.flops)
    per_call = {name: total / calls[name] for name, total in counted.items() if calls.get(name)}
    planes = [TracePlane("/host:CPU", [TraceLine(f"thread {t}", line) for t, line in sorted(host.items())])]
    if device:
        planes.append(TracePlane("/device:GPU:0", [TraceLine(f"stream {s}", line) for s, line in sorted(device.items())]))
    return planes, per_call


def doer(event: Any) -> Any:
    """The op under `event` (itself included) that did its work: of the innermost matmul or convolution kernels
    under it (`aten::mkldnn_convolution` under `aten::conv2d`), the one with the most self time, else the op with
    the most self time. By time alone, a step where a transpose beside `addmm` happened to take longer would hand
    it the linear layer's FLOPs, and a call where the CPU was taken away inside `aten::_convolution` would hand
    that call's to it: the op table's FLOPs per call would then be a fraction of the count."""
    ops: list[tuple[float, Any]] = []  # (self time, op)
    kernels: list[tuple[float, Any]] = []
    stack = [event]
    while stack:
        e = stack.pop()
        children = list(e.cpu_children)
        ops.append((span(e) - sum(span(c) for c in children), e))
        if op_category(e.name) == MATMUL and not any(op_category(c.name) == MATMUL for c in children):
            kernels.append(ops[-1])
        stack += children
    return max(kernels or ops, key=lambda o: o[0])[1]


def span(event: Any) -> float:
    return float(event.time_range.end - event.time_range.start)
