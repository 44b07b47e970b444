"""Shared test set-up: every test keeps its results in its own folder, never the user's."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# A test process runs TensorFlow, JAX and PyTorch side by side (a worker never does: each backend's keeps the
# others out). Triton, which PyTorch's FLOP counter imports where it is installed (beside a CUDA build), brings its
# own LLVM, and imported after TensorFlow's it kills the process; before it, both load (0.15 s).
if importlib.util.find_spec("triton") is not None:
    import triton  # noqa: F401

from tpulab.base.events import RunRecord
from tpulab.engine.store import Store
from tpulab.lab.app import TpulabApp
from tpulab.machine.detect import RuntimeReport

from .helpers import Behave, Stub, cpu_only, write_set


@pytest.fixture(autouse=True)
def still_animations(monkeypatch):
    """Apps made in a test animate nothing: an indeterminate progress bar drawn at the moment a snapshot is taken
    would make each snapshot differ by when it was taken (what users see is unchanged)."""
    from textual import constants

    monkeypatch.setattr(constants, "TEXTUAL_ANIMATIONS", "none")


@pytest.fixture(scope="session")
def jax_cache(tmp_path_factory) -> Path:
    """The folder of the session's one JAX compilation cache: both xdist workers' (their temporary folders' parent)."""
    root = tmp_path_factory.getbasetemp()
    return (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "jax-cache"


@pytest.fixture
def shared_jax_cache(monkeypatch, jax_cache):
    """JAX's programs compiled once for the session: a later test's run loads them (a smoke conv's step, each
    initialiser Keras builds a model with) rather than compiling them again in its own tpulab home (an eighth of the
    JAX-heavy modules' CPU). For the modules whose tests do not read how a first call went (its words say "compiled
    (cache)" where an earlier test compiled the same program), each saying so with `pytestmark`; a run that must
    start cold gives the variable as None to `helpers.run_cli` (tests/test_jax.py)."""
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(jax_cache))


@pytest.fixture(autouse=True)
def tpulab_home(tmp_path, monkeypatch):
    home = tmp_path / "tpulab-home"
    monkeypatch.setenv("TPULAB_HOME", str(home))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    # No worker pre-started beside a test's form: each imported a framework on a core of its own, for tests that
    # never hand it a run (test_standby.py turns it on)
    monkeypatch.setenv("TPULAB_STANDBY", "off")
    return home


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, for the tests that run its ops here; imported when the first of them runs, not by every process
    that collects the tests (5-6 s of CPU each)."""
    return pytest.importorskip("tensorflow")


@pytest.fixture(scope="session")
def keras():
    """Keras (on TensorFlow, in this process), imported as `tf` is."""
    return pytest.importorskip("keras")


@pytest.fixture
def quick_compiles(monkeypatch):
    """XLA's CPU backend without LLVM's optimisation passes: the same programs, compiled in a fraction of the time
    (a small Keras model's first step on JAX: 15 s down to 3 s on 2 cores; ResNet-50's weights' initialisers too).
    For the modules whose tests are not about the speed of the code LLVM would have made (each says so with
    `pytestmark = pytest.mark.usefixtures("quick_compiles")`). A worker keeps the flags it is given and adds its
    device count (`JaxBackend.worker_env`)."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")


@pytest.fixture
def fashion_data(tmp_path, monkeypatch):
    """Tiny Fashion-MNIST files written by the test, found through $TPULAB_DATA_DIR (no package needed)."""
    folder = tmp_path / "fashion-mnist"
    write_set(folder, n_train=256, n_test=64)
    monkeypatch.setenv("TPULAB_DATA_DIR", str(folder))
    return folder


@pytest.fixture
def db(tmp_path) -> Path:
    """The path of this test's own results store (for the lab's `db=`)."""
    return tmp_path / "r.db"


@pytest.fixture
def store(db) -> Store:
    """This test's own results store, empty, at `db`."""
    return Store(db)


@pytest.fixture
def cpu_machine(tmp_path) -> RuntimeReport:
    """A machine with no accelerator, whatever this host has."""
    return cpu_only(tmp_path)


@pytest.fixture
def lab_with(store, db, cpu_machine) -> Callable[[list[RunRecord]], TpulabApp]:
    """The lab on this test's store holding `records`, on a CPU-only machine."""
    def lab(records: list[RunRecord]) -> TpulabApp:
        for r in records:
            store.save(r)
        return TpulabApp(probe=False, db=db, report=cpu_machine)
    return lab


@pytest.fixture
def lab(db, cpu_machine) -> Callable[..., TpulabApp]:
    """The lab on this test's store and a CPU-only machine (keywords go to TpulabApp)."""
    return lambda **kwargs: TpulabApp(probe=False, report=cpu_machine, db=db, **kwargs)


@pytest.fixture
def stub() -> Iterator[Callable[[Behave], Stub]]:
    """Stub OpenAI-compatible servers on 127.0.0.1 (`helpers.Stub`), each answering as `behave` says; closed after."""
    made: list[Stub] = []

    def make(behave: Behave) -> Stub:
        made.append(Stub(behave))
        return made[-1]

    yield make
    for s in made:
        s.close()
