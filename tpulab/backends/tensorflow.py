"""TensorFlow, the article's framework: devices, TPU connection, strategies, the deep probe, the doctor.

The declaration (`BACKEND`) is framework-free; the functions below it import TensorFlow and run
only inside a worker process: the logical-device split must happen before TensorFlow's first
op, which is why each run gets a fresh process.
"""

from __future__ import annotations

import math
import os
import platform
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from tpulab.backends import Backend, BackendError, Cluster, DeviceError, Fitness, Placement, Profiler, Runtime, keras_version
from tpulab.backends.hlo_ops import hlo_ops
from tpulab.backends.profile_table import (ELEMENTWISE, MATMUL, OTHER, PYTHON, REDUCTION, OpInfo, TraceEvent, TraceLine,
                                      TracePlane, build, by_name, category, words, xplane_file)
from tpulab.base.errors import first_line, one_line
from tpulab.base.hidden import hidden
from tpulab.machine.detect import detect
from tpulab.machine.verdict import Verdict, version_tuple

if TYPE_CHECKING:
    from tpulab.base.events import Profile
    from tpulab.machine.detect import RuntimeReport

TFLITE_ONLY = ("jax",)  # what TensorFlow imports only for TFLite's converter from JAX functions (tpulab.base.hidden)

# The newest tensorflow-tpu on PyPI: 2.20.0 (published 2025-08; still the newest on 2026-11-30 by
# `pip index versions tensorflow-tpu`). It is a whole TensorFlow build and pulls libtpu from PyPI.
TF_TPU_LATEST = "2.20.0"
MULTI_HOST = ("multi-host runs go through JAX's distributed runtime (TensorFlow's MultiWorkerMirroredStrategy "
              "fails under Keras 3 fit): use --backend jax")


def tf_tpu_install(installed_tf: str | None) -> str:
    """A TensorFlow with TPU support that exists: the installed version if tensorflow-tpu has it, else the newest."""
    version = installed_tf if installed_tf and version_tuple(installed_tf) <= version_tuple(TF_TPU_LATEST) \
        else TF_TPU_LATEST
    remove = "pip uninstall -y tensorflow && " if installed_tf else ""
    return f"{remove}pip install tensorflow-tpu=={version}"


def drives_tpu(report: RuntimeReport) -> tuple[bool, str]:
    """Whether TensorFlow can use the TPU found, and if not, why (framework-free)."""
    tf = report.frameworks.get("tensorflow") or {}
    if tf.get("tpu_cores"):
        return True, "TensorFlow initialised the TPU"
    if "tpu_cores" in tf or tf.get("tpu_error"):
        return False, "TensorFlow could not initialise the TPU" + (f" ({first_line(tf['tpu_error'])[:120]})"
                                                                    if tf.get("tpu_error") else "")
    pk = report.packages
    if not BACKEND.installed(pk):
        return False, "TensorFlow is not installed"
    if not (pk.get("tensorflow-tpu") or pk.get("libtpu") or pk.get("libtpu-nightly")):
        return False, "TensorFlow has no TPU runtime (tensorflow-tpu / libtpu) installed"
    return True, "TensorFlow and its TPU runtime are installed"


class TensorFlowBackend(Backend):
    name = "tensorflow"
    fuser = "XLA"
    title = "TensorFlow"
    short = "tf"
    distributions = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu")
    install = "pip install 'tpulab[tensorflow]'  # or: pip install 'tensorflow>=2.16'"
    keras = True
    article = True
    multi_host = MULTI_HOST
    tpu_packages = ("tensorflow-tpu", "libtpu", "libtpu-nightly")
    packages = ("nvidia-cudnn-cu12", "nvidia-cuda-runtime-cu12")  # its CUDA libraries, from pip
    no_profiler = None  # it profiles: `Runtime.profiler`

    def worker_env(self, device: str, shards: int, environ: Mapping[str, str]) -> dict[str, str]:
        """Keras on TensorFlow, its C++ notices quiet, and its host memory pooled (BFC), unless the user set them.

        TensorFlow's default CPU allocator hands each large tensor back to the system when it is freed, and the
        next step takes it again, a page fault per 4 KiB: a convolution of 32 images of 256x256 spent half of its
        steady step doing that here (0.49 s a step against 0.23 s pooled, as JAX's own step takes).
        TensorFlow reads the switch when it makes its allocator (tensorflow/core/common_runtime/process_state.cc).
        """
        own = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_CPU_ALLOCATOR_USE_BFC": "true"}
        return {**super().worker_env(device, shards, environ), **{k: environ.get(k, v) for k, v in own.items()}}

    def fitness(self, report: RuntimeReport, device: str) -> Fitness:
        """Preferred wherever it drives the device: the article's framework."""
        if device == "tpu" and report.tpu is not None:
            drives, why = drives_tpu(report)
            return Fitness(drives, why if drives else f"a TPU is present and TensorFlow cannot drive it ({why})", 2)
        if not self.installed(report.packages):
            return Fitness(False, "TensorFlow is not installed", 2)
        return Fitness(True, "TensorFlow is installed and drives this device (the article's framework)", 2)

    def verdicts(self, report: RuntimeReport, others: list[Backend]) -> list[Verdict]:
        out: list[Verdict] = []
        if report.tpu is not None:
            tpu = report.tpu
            if tpu.address and tpu.address.startswith("grpc://"):
                out.append(Verdict("warn", "tpu", f"COLAB_TPU_ADDR is set: a legacy TPU Node at {tpu.address}, which "
                                   "Colab retired in 2024; tpulab connects with TPUClusterResolver(tpu=that address), "
                                   "and if that fails, switch to a TPU VM runtime.",
                                   "Colab: Runtime > Change runtime type > v5e-1 TPU", self.name))
            out += self._tpu(report, tpu.generation or "unknown generation", others)
        if report.gpus:
            out += self._gpu(report, ", ".join(g.name for g in report.gpus))
        return out

    def _tpu(self, report: RuntimeReport, gen: str, others: list[Backend]) -> list[Verdict]:
        pk = report.packages
        tf = report.frameworks.get(self.name) or {}
        installed = self.version(pk)
        driver = next((b for b in others if b.fitness(report, "tpu").usable and b.name in report.frameworks
                       and report.frameworks[b.name].get("tpu_cores")), None)
        other = next((b for b in others if b.installed(pk)), None)
        level = "warn" if driver else "error"  # with another framework driving the TPU, tpulab still runs
        alt = (f"; tpulab runs on {driver.title} here (--backend auto picks it)" if driver
               else f"; or run on {other.title}, which drives it as shipped: --backend {other.name}" if other else "")
        if tf.get("tpu_cores"):
            return [Verdict("ok", "tpu", f"TPU {gen} in use by TensorFlow: {tf['tpu_cores']} core(s).",
                            framework=self.name)]
        error = tf.get("tpu_error") or ""
        if "ConfigureDistributedTPU" in error:
            return [Verdict(level, "tpu", f"TPU {gen} found, but this TensorFlow build has no TPU kernels (No "
                            f"OpKernel registered for ConfigureDistributedTPU): it is the CPU/GPU build{alt}.",
                            tf_tpu_install(pk.get("tensorflow")), self.name)]
        if not installed:
            if driver or other:
                return [Verdict("info", "tpu", f"TPU {gen}: TensorFlow is not installed (Colab TPU runtimes no "
                                f"longer ship it); tpulab runs on {(driver or other).title} here. "  # type: ignore[union-attr]
                                "For the TensorFlow path too:", tf_tpu_install(None), self.name)]
            return []
        if pk.get("tensorflow-tpu") and pk.get("tensorflow") and pk["tensorflow-tpu"] != pk["tensorflow"]:
            return [Verdict(level, "tpu", f"TPU {gen} found, but tensorflow {pk['tensorflow']} and tensorflow-tpu "
                            f"{pk['tensorflow-tpu']} differ: TensorFlow cannot load its TPU runtime{alt}.",
                            tf_tpu_install(pk.get("tensorflow")), self.name)]
        if not (pk.get("libtpu") or pk.get("libtpu-nightly") or pk.get("tensorflow-tpu")):
            newest = (f" (tensorflow-tpu stops at {TF_TPU_LATEST})"
                      if version_tuple(installed) > version_tuple(TF_TPU_LATEST) else "")
            return [Verdict(level, "tpu", f"TPU {gen} found, but TensorFlow {installed} has no TPU runtime (libtpu) "
                            f"installed{newest}{alt}.", tf_tpu_install(pk.get("tensorflow")), self.name)]
        if error:
            first = first_line(error)[:200]
            return [Verdict(level, "tpu", f"TPU {gen} found, but TensorFlow could not initialise it: {first}{alt}",
                            "sudo lsof -w /dev/accel* /dev/vfio/*  # another process may hold the TPU; stop it",
                            self.name)]
        if self.name not in report.frameworks:
            found_by = ", ".join(report.tpu.found_by) if report.tpu else ""
            return [Verdict("info", "tpu", f"TPU {gen} found ({found_by}); TensorFlow's view is checked when a run "
                            "starts (or run `tpulab detect`).", framework=self.name)]
        return []

    def _gpu(self, report: RuntimeReport, names: str) -> list[Verdict]:
        pk = report.packages
        if not (pk.get("tensorflow") or pk.get("tensorflow-cpu")):
            return []
        tf = report.frameworks.get(self.name)
        if tf is None:
            if not (pk.get("nvidia-cudnn-cu12") or pk.get("nvidia-cuda-runtime-cu12")):
                return [Verdict("warn", "gpu", f"{names} found, but TensorFlow's CUDA libraries are not installed "
                                "from pip; unless CUDA and cuDNN are installed system-wide, TensorFlow runs will use "
                                "the CPU.", "pip install 'tensorflow[and-cuda]'", self.name)]
            return []
        if tf.get("gpus"):
            return [Verdict("ok", "gpu", f"{len(tf['gpus'])} GPU(s) in use by TensorFlow: {names}.",
                            framework=self.name)]
        if not tf.get("built_with_cuda"):
            return [Verdict("error", "gpu", f"{names} found, but this TensorFlow build is CPU-only.",
                            "pip uninstall -y tensorflow-cpu; pip install 'tensorflow[and-cuda]'", self.name)]
        return [Verdict("error", "gpu", f"{names} found, but TensorFlow sees no GPU: its CUDA libraries are missing "
                        "or do not match the driver.", "pip install 'tensorflow[and-cuda]'", self.name)]

    def holds_device(self) -> bool:
        """TensorFlow created its eager context (it opens the TPU then)."""
        context = sys.modules.get("tensorflow.python.eager.context")
        try:
            return context is not None and context.context()._context_handle is not None
        except Exception:  # noqa: BLE001 - a TensorFlow without that attribute: assume it does not hold it
            return False

    def runtime(self) -> Runtime:
        with hidden(*TFLITE_ONLY):
            import keras  # noqa: F401 - on it: every run times its steps with a Keras callback
            import tensorflow  # noqa: F401 - the framework, first, in the worker

        return TensorFlowRuntime()


BACKEND = TensorFlowBackend()


# --- the framework side: in a worker only ------------------------------------------------------
def _placement(strategy: Any, kind: str, name: str, replicas: int, note: str | None = None,
               master: str | None = None) -> Placement:
    return Placement(kind=kind, name=name, replicas=replicas, strategy=type(strategy).__name__,
                     devices=list(strategy.extended.worker_devices), handle=strategy, note=note, master=master,
                     scope=strategy.scope)


def connect_tpu(address: str | None = None) -> tuple[Any, Any]:
    """The TF2 successor of the article's grpc session: resolver, connect, initialise."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address or "local")
    tf.config.experimental_connect_to_cluster(resolver)
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    return resolver, topology


def _cpu_placement(shards: int, model: str, note: str | None) -> Placement:
    import tensorflow as tf

    tf.config.set_visible_devices([], "GPU")
    cpu = tf.config.list_physical_devices("CPU")[0]
    if shards > 1:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * shards)
        names = [d.name for d in tf.config.list_logical_devices("CPU")][:shards]
        # Collective all-reduce clashes across replica counts; reduction to one device does not.
        strategy = tf.distribute.MirroredStrategy(names, cross_device_ops=tf.distribute.ReductionToOneDevice())
    else:
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    return _placement(strategy, "cpu", model, shards, note)


def _widen(x: Any, y: Any) -> Any:
    """Bytes are kept compact (images, labels) and widened per batch, as the numpy pipeline does."""
    import tensorflow as tf

    def cast(a: Any, dtype: Any) -> Any:  # each array of a model's several inputs or outputs
        return tf.nest.map_structure(lambda v: tf.cast(v, dtype) if v.dtype == tf.uint8 else v, a)

    return cast(x, tf.float32), cast(y, tf.int32)


class TensorFlowRuntime(Runtime):
    """One process; XLA only when asked (on a CPU, oneDNN's kernels are faster: tf-facts); no persistent
    compilation cache; a model built in the strategy's scope trains over every replica."""

    def join(self, cluster: Cluster) -> None:
        raise BackendError(MULTI_HOST)

    def versions(self) -> dict[str, str]:
        import tensorflow as tf

        return {"tensorflow": tf.__version__, "keras": keras_version(), "python": platform.python_version()}

    def place(self, device: str, shards: int) -> Placement:
        """Pick the device for `device` (auto, cpu, gpu, tpu) and a strategy over `shards` replicas.

        Must run before any other TensorFlow op in the process.
        """
        import tensorflow as tf

        report = detect()
        note = None
        if device == "tpu" or (device == "auto" and report.tpu is not None):
            try:
                resolver, topology = connect_tpu(report.tpu.address if report.tpu else None)
            except Exception as e:  # noqa: BLE001 - any failure here means "no usable TPU"
                why = one_line(e)
                if device == "tpu":
                    raise DeviceError(f"TensorFlow could not initialise the TPU: {why} (see `tpulab doctor`)") from e
                note = f"a TPU was found but TensorFlow could not initialise it ({why}); see `tpulab doctor`"
            else:
                cores = topology.num_tasks * topology.num_tpus_per_task
                if shards > cores:
                    raise DeviceError(f"--shards {shards} is more than the TPU's {cores} cores")
                assignment = tf.tpu.experimental.DeviceAssignment.build(topology, num_replicas=shards)
                strategy = tf.distribute.TPUStrategy(resolver, experimental_device_assignment=assignment)
                generation = report.tpu.generation if report.tpu else None
                return _placement(strategy, "tpu", generation or "TPU", shards, master=resolver.master())
        gpus = tf.config.list_physical_devices("GPU")
        if device == "gpu" and not gpus:
            raise DeviceError("TensorFlow sees no GPU (see `tpulab doctor`)")
        if gpus and device in ("gpu", "auto"):
            if shards > len(gpus):
                raise DeviceError(f"--shards {shards} is more than the {len(gpus)} GPU(s) TensorFlow sees")
            name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
            names = [f"/gpu:{i}" for i in range(shards)]
            strategy = (tf.distribute.OneDeviceStrategy(names[0]) if shards == 1
                        else tf.distribute.MirroredStrategy(names))
            return _placement(strategy, "gpu", name, shards, note)
        return _cpu_placement(shards, report.cpu.model, note)

    def keras_inputs(self, x: Any, y: Any, batch: int, seed: int, train: bool, pipeline: str, shards: int) -> Any:
        """tf.data: shuffled, repeated, batched and prefetched; or the article's generator of random slices."""
        import tensorflow as tf

        from tpulab.backends.keras_inputs import random_slices

        if train and pipeline == "generator":
            return random_slices(x, y, batch, seed)
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        if train:
            ds = ds.shuffle(10000, seed=seed).repeat().batch(batch, drop_remainder=True)
        else:
            ds = ds.batch(batch)
        return ds.map(_widen, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    def profiler(self) -> Profiler:
        return TensorFlowProfiler()

    def probe(self) -> dict[str, Any]:
        """TensorFlow's own view of the machine, for `tpulab detect`, the doctor and `auto`."""
        with hidden(*TFLITE_ONLY):
            import tensorflow as tf

        report = detect()
        out: dict[str, Any] = dict(self.versions())
        out["built_with_cuda"] = tf.test.is_built_with_cuda()
        out["gpus"] = []
        for gpu in tf.config.list_physical_devices("GPU"):
            details = tf.config.experimental.get_device_details(gpu)
            cc = details.get("compute_capability")
            out["gpus"].append({"name": details.get("device_name", gpu.name),
                                "compute_capability": ".".join(map(str, cc)) if cc else None})
        out["tpu_cores"] = 0
        if report.tpu is not None:
            try:
                _, topology = connect_tpu(report.tpu.address)
                out["tpu_cores"] = topology.num_tasks * topology.num_tpus_per_task
            except Exception as e:  # noqa: BLE001 - reported to the user by the doctor
                out["tpu_error"] = f"{type(e).__name__}: {e}"
        out["cpu_threads"] = os.cpu_count()
        return out


NO_SHAPES = "TensorFlow's trace gives no op shapes here, and no graph was given to read them from"


class TensorFlowProfiler(Profiler):
    """`tf.profiler`: an XSpace per run; the ops are the graph's kernels ("dense/MatMul:MatMul"), or XLA's
    fusions under `jit_compile`; FLOPs and bytes from the graph's shapes where one is given."""

    name = "tf.profiler"

    @contextmanager
    def trace(self, folder: Path) -> Iterator[None]:
        import tensorflow as tf

        tf.profiler.experimental.start(str(folder))
        try:
            yield
        finally:
            tf.profiler.experimental.stop()

    def step(self, number: int) -> Any:
        import tensorflow as tf

        return tf.profiler.experimental.Trace("train", step_num=number, _r=1)

    def read(self, folder: Path, programs: list[Any] | None = None) -> Profile:
        """`programs`: concrete functions or graphs (a `tf.function`'s `get_concrete_function(...)`), or under
        XLA the optimized HLO text of its clusters."""
        texts = [p for p in programs or [] if isinstance(p, str)]
        graphs = [p for p in programs or [] if not isinstance(p, str)]
        lookup = by_name(hlo_ops(texts)) if texts else GraphOps(graphs) if graphs else None
        return build(xspace_planes(xplane_file(folder).read_bytes()), lookup, profiler=self.name,
                     trace_path=str(folder), no_flops=NO_SHAPES)

    def keras_programs(self, model: Any, x: Any, y: Any) -> list[Any]:
        """`model.train_step` traced again on the batch's shapes: the graph `fit` runs, node for node, until
        TensorFlow rewrites it (a convolution fused with its bias takes the bias's name: not counted)."""
        import numpy as np
        import tensorflow as tf

        from tpulab.backends.keras_inputs import widen

        batch = (widen(x, np.float32), widen(y, np.int32))
        try:
            specs = tf.nest.map_structure(lambda a: tf.TensorSpec(a.shape, a.dtype), batch)
            return [tf.function(model.train_step).get_concrete_function(specs)]
        except Exception:  # noqa: BLE001 - the op table goes on without FLOPs, saying so
            return []


def xspace_planes(data: bytes) -> list[TracePlane]:
    """An `xplane.pb` (TensorFlow's or JAX's) as the op table's neutral view, read by TensorFlow alone."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(data)
    return [_plane(plane) for plane in space.planes]


def _plane(plane: Any) -> TracePlane:
    """One XPlane, its events named and their stats keyed by name (an event's own over its metadata's)."""
    names = {k: m.name for k, m in plane.stat_metadata.items()}

    def stats(found: Any) -> dict[str, Any]:
        out = {}
        for stat in found:
            kind = stat.WhichOneof("value")
            out[names.get(stat.metadata_id, "")] = names.get(stat.ref_value, "") if kind == "ref_value" \
                else getattr(stat, kind) if kind else None
        return out

    metadata = {k: (m.name, stats(m.stats)) for k, m in plane.event_metadata.items()}
    lines = []
    for line in plane.lines:
        events = []
        for e in line.events:
            name, known = metadata.get(e.metadata_id, ("", {}))
            if name.startswith(PYTHON):
                continue
            events.append(TraceEvent(name, line.timestamp_ns + e.offset_ps / 1000, e.duration_ps / 1000,
                                     {**known, **stats(e.stats)} if e.stats else known))
        lines.append(TraceLine(line.name, events))
    return TracePlane(plane.name, lines)


class GraphOps:
    """What graphs say of the kernels a trace names, by node name (a node of a function the graph calls by its
    own name, as the trace names it without its callers), worked out when asked: the type, and where the
    shapes are known, the FLOPs and bytes of one call. A kernel TensorFlow fused from a matmul or convolution
    and the ops after it (its bias, its activation) runs under the last one's name: it counts them all."""

    FUSED_DEPTH = 3  # nodes a fused kernel may take after its matmul or convolution
    CALLS = ("PartitionedCall", "StatefulPartitionedCall")

    def __init__(self, graphs: list[Any]) -> None:
        self.graphs = [getattr(g, "graph", g) for g in graphs]  # a concrete function's graph, or a graph
        self._called: list[Any] | None = None

    def node(self, name: str) -> Any:
        """The node named so in a graph, else in a function one calls (looked up: a training step holds
        thousands of nodes, and only the functions it calls are listed, once)."""
        for graph in [*self.graphs, *self.called()]:
            try:
                return graph.get_operation_by_name(name)
            except (KeyError, ValueError):
                continue
        return None

    def called(self) -> list[Any]:
        """The graphs of the functions the graphs call, however deep."""
        if self._called is None:
            self._called, todo = [], list(self.graphs)
            while todo:
                graph = todo.pop()
                for op in graph.get_operations():
                    if op.type in self.CALLS:
                        inner = getattr(graph._get_function(op.get_attr("f").name), "graph", None)
                        if inner is not None:
                            self._called.append(inner)
                            todo.append(inner)
        return self._called

    def __call__(self, module: str | None, name: str, kind: str) -> OpInfo | None:
        op = self.node(name)
        if op is None:
            return None
        if not kind or words(kind) == words(op.type):
            return OpInfo(op.type, category(op.type), _op_flops(op), _op_bytes(op))
        chain = [op]
        while category(chain[-1].type) != MATMUL and len(chain) <= self.FUSED_DEPTH and chain[-1].inputs:
            chain.append(chain[-1].inputs[0].op)
        if category(kind) != MATMUL or category(chain[-1].type) != MATMUL:
            return None  # another rewrite: what ran is not what the node says
        flops = [f for n in chain if (f := _op_flops(n)) is not None]
        outside = [t for n in chain for t in n.inputs if t.op not in chain]  # read; the last node's output written
        return OpInfo(kind, MATMUL, sum(flops) if len(flops) == len(chain) else None, _bytes([*outside, op.outputs[0]]),
                      tuple(n.type for n in reversed(chain)))


def _elements(tensor: Any) -> int | None:
    dims = tensor.shape.as_list() if tensor.shape.rank is not None else None
    return None if dims is None or None in dims else math.prod(dims)


def _op_bytes(op: Any) -> float | None:
    return _bytes([*op.inputs, *op.outputs])


def _bytes(tensors: list[Any]) -> float | None:
    """Bytes of the tensors, None where a shape is unknown."""
    total = 0.0
    for tensor in tensors:
        if (n := _elements(tensor)) is None:
            return None
        total += n * tensor.dtype.size
    return total


def _op_flops(op: Any) -> float | None:
    """2 per multiply-add of a matmul or convolution (its gradients too), 1 per element of an elementwise or
    reduced value; None where a shape is unknown or the op's arithmetic is not counted."""
    kind, word, attrs = category(op.type), "".join(words(op.type)), op.node_def.attr
    if kind == MATMUL and "conv" in word:
        forward, kernel = _convolution(op)
        n, k = _elements(forward), _elements(kernel)
        channels = forward.shape[1 if "data_format" in attrs and attrs["data_format"].s == b"NCHW" else -1]
        return None if n is None or k is None or channels is None else 2.0 * n * k / channels
    if kind == MATMUL and "matmul" in word:
        transposed = any(attrs[f].b for f in ("transpose_a", "adj_x") if f in attrs)
        inner = op.inputs[0].shape[-2 if transposed else -1] if op.inputs[0].shape.rank else None
        n = _elements(op.outputs[0])
        return None if n is None or inner is None else 2.0 * n * inner
    if kind == MATMUL:  # an einsum's: not counted
        return None
    if kind == ELEMENTWISE:
        return None if (n := _elements(op.outputs[0])) is None else float(n)
    if kind == REDUCTION and op.inputs:
        return None if (n := _elements(op.inputs[0])) is None else float(n)
    return None if kind == OTHER else 0.0


def _convolution(op: Any) -> tuple[Any, Any]:
    """The forward convolution's output and its filter, of a convolution or either of its gradients."""
    if op.type.endswith("BackpropInput"):
        return op.inputs[2], op.inputs[1]
    if op.type.endswith("BackpropFilter"):
        return op.inputs[2], op.outputs[0]
    return op.outputs[0], op.inputs[1]
