"""JAX, what today's TPUs run: devices, a mesh over N of them, multi-host, the deep probe, the doctor.

The declaration (`BACKEND`) is framework-free; the functions below it import JAX and run only
inside a worker whose environment the declaration set (`KERAS_BACKEND=jax`, and for N CPU shards
`--xla_force_host_platform_device_count=N`), so the very code that shards over TPU cores runs over
host devices here. Its worker never imports TensorFlow: on a TPU, the first framework to
initialise it wins (jax-ml/jax #13260).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from tpulab.backends import (HEARTBEAT_TIMEOUT_S, LAUNCHER_ENV, Backend, Cluster, DeviceError, Fitness, Placement, Profiler,
                             Runtime, keras_version)
from tpulab.backends.hlo_ops import hlo_ops
from tpulab.backends.profile_table import PYTHON, TraceEvent, TraceLine, TracePlane, build, by_name, xplane_file
from tpulab.base.errors import first_line
from tpulab.base.home import home
from tpulab.machine.detect import detect
from tpulab.machine.verdict import Verdict

if TYPE_CHECKING:
    from tpulab.base.events import Profile
    from tpulab.machine.detect import RuntimeReport

JAX_TPU_INSTALL = "pip install -U 'jax[tpu]'"
CACHE_MAX_BYTES = 1 << 30  # the compilation cache's bound: least recently used programs go first
JAX_CUDA_INSTALL = "pip install -U 'jax[cuda12]'"


class JaxBackend(Backend):
    name = "jax"
    fuser = "XLA"
    title = "JAX"
    short = "jax"
    distributions = ("jax",)
    install = "pip install 'tpulab[jax]'  # or: pip install 'jax[cpu]'"
    # Keras reaches for TensorFlow when it is installed (to seed it, for tf.data); on a TPU the first
    # framework to initialise it wins (jax-ml/jax #13260), so a JAX worker keeps TensorFlow out.
    excludes = ("tensorflow",)
    keras = True
    keras_step_arguments = ("state", "data")  # Keras's stateless step on JAX
    no_flops = "XLA's cost analysis gave no count for this step"
    tpu_install = JAX_TPU_INSTALL
    tpu_packages = ("jax", "libtpu")  # a TPU VM's JAX (Colab's as shipped) drives it
    xla_always = True
    no_profiler = None  # it profiles: `Runtime.profiler`

    def worker_env(self, device: str, shards: int, environ: Mapping[str, str]) -> dict[str, str]:
        """Keras on JAX, N host devices for N CPU shards, and JAX's persistent compilation cache in tpulab's
        home (every program kept, the cache bounded), unless the user set their own."""
        env = super().worker_env(device, shards, environ)
        cache = {"JAX_COMPILATION_CACHE_DIR": str(home(environ) / "jax-cache"),
                 "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
        if importlib.util.find_spec("filelock"):  # JAX bounds its cache only with it (tpulab[jax] installs it)
            cache["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(CACHE_MAX_BYTES)
        env.update({k: v for k, v in cache.items() if k not in environ})
        if device == "cpu":
            env["JAX_PLATFORMS"] = "cpu"
            flags = [f for f in environ.get("XLA_FLAGS", "").split()
                     if not f.startswith("--xla_force_host_platform_device_count")]
            env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={max(1, shards)}"])
        return env

    def fitness(self, report: RuntimeReport, device: str) -> Fitness:
        if not self.installed(report.packages):
            return Fitness(False, "JAX is not installed", 1)
        return Fitness(True, "JAX can", 1)

    def verdicts(self, report: RuntimeReport, others: list[Backend]) -> list[Verdict]:
        view = report.frameworks.get(self.name)
        out: list[Verdict] = []
        if report.tpu is not None and self.installed(report.packages):
            gen = report.tpu.generation or "unknown generation"
            if view is None:
                out.append(Verdict("info", "tpu", f"TPU {gen} found and JAX {report.packages['jax']} is installed; "
                                   "its view is checked when a run starts (or run `tpulab detect`).",
                                   framework=self.name))
            elif view.get("tpu_cores"):
                out.append(Verdict("ok", "tpu", f"TPU {gen} in use by JAX: {view['tpu_cores']} device(s).",
                                   framework=self.name))
            else:
                why = view.get("error") or (f"JAX's platform is {view.get('platform', 'cpu')}: libtpu is missing "
                                            "or does not match")
                out.append(Verdict("error", "tpu", f"TPU {gen} found, but JAX cannot use it: "
                                   f"{first_line(why)[:200]}", JAX_TPU_INSTALL, self.name))
        if report.gpus and self.installed(report.packages) and view is not None:
            names = ", ".join(g.name for g in report.gpus)
            if view.get("gpus"):
                out.append(Verdict("ok", "gpu", f"{len(view['gpus'])} GPU(s) in use by JAX: {names}.",
                                   framework=self.name))
            else:
                out.append(Verdict("warn", "gpu", f"{names} found, but JAX sees no GPU (platform "
                                   f"{view.get('platform', '?')}): its CUDA build is not installed.",
                                   JAX_CUDA_INSTALL, self.name))
        return out

    def holds_device(self) -> bool:
        """JAX initialised a backend (its platforms are kept once one is asked for devices)."""
        bridge = sys.modules.get("jax._src.xla_bridge")
        return bridge is not None and bool(getattr(bridge, "_backends", None))

    def death(self, stderr: str, processes: int) -> str | None:
        """JAX aborts a process whose coordination service did not hear from every other in time (its
        `RegisterTask` call failed)."""
        if processes > 1 and "RegisterTask" in stderr:
            return (f"could not join the other {processes - 1} process(es) in time (is every process started, "
                    "with the same --coordinator?)")
        return None

    def runtime(self) -> Runtime:
        import jax

        jax.monitoring.register_event_listener(_count_cache_events)
        return JaxRuntime()


BACKEND = JaxBackend()


# --- the framework side: in a worker only ------------------------------------------------------
_cache = {"/jax/compilation_cache/cache_hits": 0, "/jax/compilation_cache/cache_misses": 0}


def _count_cache_events(event: str, **kwargs: Any) -> None:
    if event in _cache:
        _cache[event] += 1


def devices_of(kind: str) -> list[Any]:
    """JAX's devices of one kind (cpu, gpu, tpu), or of its default kind for auto."""
    import jax

    if kind == "auto":
        return list(jax.devices())
    try:
        return list(jax.devices(kind))
    except RuntimeError as e:
        raise DeviceError(f"JAX sees no {kind.upper()} ({first_line(str(e))}); see `tpulab doctor`") from None


class JaxRuntime(Runtime):
    """One program over every process's devices (a mesh), XLA always, a persistent compilation cache,
    and the allocator's figures (a TPU's HBM, which only the process holding it can read)."""

    def cache_hit(self) -> bool | None:
        """True when every program compiled so far was loaded from the persistent cache; None without a cache."""
        import jax

        if not jax.config.values.get("jax_compilation_cache_dir"):
            return None
        hits, misses = _cache.values()
        return hits > 0 and misses == 0

    def join(self, cluster: Cluster) -> None:
        """One program over every process's devices: JAX's distributed runtime, gloo for CPU collectives.

        Bounded: a process that never joins fails the run after the cluster's join timeout, one that
        goes silent after HEARTBEAT_TIMEOUT_S.
        """
        import jax

        if cluster.coordinator == LAUNCHER_ENV:
            raise DeviceError("a run torchrun started joins through torch.distributed: use --backend torch, or start "
                              "JAX's processes with --processes or --coordinator")
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        timeouts = {"initialization_timeout": cluster.join_timeout_s, "heartbeat_timeout_seconds": HEARTBEAT_TIMEOUT_S,
                    "shutdown_timeout_seconds": cluster.join_timeout_s}
        try:
            if cluster.coordinator == "auto":
                jax.distributed.initialize(**timeouts)  # type: ignore[arg-type]
            else:
                jax.distributed.initialize(coordinator_address=cluster.coordinator, num_processes=cluster.processes,
                                           process_id=cluster.process_id, **timeouts)  # type: ignore[arg-type]
        except Exception as e:  # noqa: BLE001 - whatever JAX raises, the run fails saying who did not join
            first = first_line(str(e)) or type(e).__name__
            raise DeviceError(f"process {cluster.process_id} could not join the other {cluster.processes - 1} "
                              f"within {cluster.join_timeout_s} s at {cluster.coordinator}: {first}") from None

    def leave(self) -> None:
        """Leave together: without it, the process hosting the coordinator may exit first and abort the others."""
        import jax

        jax.distributed.shutdown()

    def gather(self, values: list[float]) -> list[list[float]]:
        """Every process's values, in process order; a no-op on one process."""
        import jax

        if jax.process_count() == 1:
            return [values]
        import numpy as np
        from jax.experimental import multihost_utils

        table = multihost_utils.process_allgather(np.asarray(values, dtype=np.float64))
        return np.asarray(table).reshape(jax.process_count(), len(values)).tolist()

    def profiler(self) -> Profiler:
        return JaxProfiler()

    def memory_stats(self) -> list[dict[str, Any]] | None:
        """This process's allocator figures per local device (bytes_in_use, bytes_limit...; {} on the CPU)."""
        import jax

        return [d.memory_stats() or {} for d in jax.local_devices()]

    def versions(self) -> dict[str, str]:
        import jax
        import jaxlib

        return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "keras": keras_version(),
                "python": platform.python_version()}

    def place(self, device: str, shards: int) -> Placement:
        """`shards` devices of the requested kind, as a one-axis mesh named "batch"."""
        import jax

        import numpy as np

        found = devices_of(device)
        kind = found[0].platform
        if shards > len(found):
            raise DeviceError(f"--shards {shards} is more than the {len(found)} {kind.upper()} device(s) JAX sees")
        hosts = jax.process_count()
        if hosts > 1 and shards != len(found):
            raise DeviceError(f"--shards {shards}: a run over {hosts} processes uses all {len(found)} global "
                              f"devices; give --shards {len(found)}")
        chosen = found[:shards]
        report = detect()
        if kind == "cpu":
            name = report.cpu.model
        elif kind == "tpu":
            name = (report.tpu.generation if report.tpu else None) or chosen[0].device_kind
        else:
            name = chosen[0].device_kind
        mesh = jax.sharding.Mesh(np.array(chosen), ("batch",))
        cluster = Cluster.from_env(os.environ)
        machines = 1 if cluster is None or cluster.local else hosts
        return Placement(kind=kind, name=name, replicas=len(chosen), strategy=f"Mesh({len(chosen)} x {kind})",
                         devices=chosen, handle=mesh, hosts=hosts, machines=machines)

    def keras_scope(self, placement: Placement) -> Any:
        """`keras.distribution.DataParallel` over the placement's devices: the successor of `keras_to_tpu_model`.

        Set before the model is built: the weights are replicated, each batch split over the devices.
        Across processes each feeds its own shard of every global batch (Keras must not split it again).
        """
        import keras

        if placement.replicas > 1:
            keras.distribution.set_distribution(keras.distribution.DataParallel(
                devices=[f"{d.platform}:{d.id}" for d in placement.devices],
                auto_shard_dataset=placement.hosts == 1))
        return nullcontext()

    def keras_jit(self, requested: bool) -> bool | str:
        return True  # JAX always compiles the step with XLA

    def keras_step_cost(self, model: Any, x: Any, y: Any) -> tuple[float | None, float | None]:
        from tpulab.backends.jax_cost import train_step_cost

        return train_step_cost(model, x, y)

    def keras_inputs(self, x: Any, y: Any, batch: int, seed: int, train: bool, pipeline: str, shards: int) -> Any:
        """numpy batches without TensorFlow; on several processes, this process's shard and share of each batch
        (the generator draws each process's own slices)."""
        import jax

        from tpulab.backends.keras_inputs import rows

        n, i = jax.process_count(), jax.process_index()
        return super().keras_inputs(rows(x, slice(i, None, n)), rows(y, slice(i, None, n)), batch // n,
                                    seed + i if pipeline == "generator" else seed, train, pipeline, shards // n)

    def probe(self) -> dict[str, Any]:
        """JAX's own view of the machine, for `tpulab detect`, the doctor and `auto`."""
        import jax

        out: dict[str, Any] = dict(self.versions())
        backend = jax.default_backend()
        found = jax.devices()
        out["platform"] = backend
        out["devices"] = [d.device_kind for d in found]
        out["gpus"] = [{"name": d.device_kind} for d in found if d.platform == "gpu"]
        out["tpu_cores"] = sum(d.platform == "tpu" for d in found)
        out["processes"] = jax.process_count()
        return out


NO_PROGRAM = "no compiled program was given to count the ops' FLOPs from"


class JaxProfiler(Profiler):
    """`jax.profiler`: an XSpace and a Perfetto trace per run; the ops are the compiled program's HLO
    instructions, whose FLOPs and bytes its optimized HLO gives."""

    name = "jax.profiler"

    @contextmanager
    def trace(self, folder: Path) -> Iterator[None]:
        import jax

        jax.profiler.start_trace(str(folder), create_perfetto_trace=True)
        try:
            yield
        finally:
            jax.profiler.stop_trace()

    def step(self, number: int) -> Any:
        import jax

        return jax.profiler.StepTraceAnnotation("train", step_num=number)

    def read(self, folder: Path, programs: list[Any] | None = None) -> Profile:
        """`programs`: JAX `Compiled` objects or their HLO text."""
        texts = [p if isinstance(p, str) else p.as_text() for p in programs or []]
        return build(trace_planes(xplane_file(folder)), by_name(hlo_ops(texts)) if texts else None,
                     profiler=self.name, trace_path=str(folder), no_flops=NO_PROGRAM)

    def keras_programs(self, model: Any, x: Any, y: Any) -> list[Any]:
        from tpulab.backends.jax_cost import train_step_program

        program = train_step_program(model, x, y)
        return [program] if program else []


def trace_planes(path: Path) -> list[TracePlane]:
    """An `xplane.pb` (JAX's or TensorFlow's) as the op table's neutral view, read by JAX alone."""
    from jax.profiler import ProfileData

    data = ProfileData.from_file(str(path))
    return [TracePlane(plane.name, [TraceLine(line.name, [TraceEvent(name, e.start_ns, e.duration_ns, dict(e.stats))
                                                          for e in line.events if not (name := e.name).startswith(PYTHON)])
                                    for line in plane.lines]) for plane in data.planes]
