"""A keyboard monkey for the lab and `tpulab top`: random keys under the pilot, the app must live and answer q.

The keys are the apps' own bindings (read from every class's BINDINGS, so a new binding joins the stream by
itself) and the keys a user moves with. Keys that quit (by their action) are left out: the run ends with q.
Shared by tests/test_lab_monkey.py and benchmarks/lab_monkey.py.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import pkgutil
import random
import string
import time
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from textual.app import App
from textual.binding import Binding
from textual.dom import DOMNode
from textual.events import Key
from textual.pilot import Pilot

import tpulab.lab.panes
import tpulab.lab.widgets
from tpulab.base.events import Compiled, Device, Event, Finished, Started, Step
from tpulab.engine.runner import Run, Standby
from tpulab.lab.app import ALT_TABS, TpulabApp
from tpulab.lab.panes.run import RunPane
from tpulab.lab.panes.workloads import WorkloadsPane
from tpulab.workloads import registry

NAVIGATION = ("tab", "shift+tab", "up", "down", "left", "right", "pageup", "pagedown", "home", "end", "enter",
              "escape", "space", *string.digits, *string.ascii_lowercase)
QUITS = {"quit", "help_quit"}  # these end the app: the stream never holds them (q quits at the end)
# Textual's palettes are left out (the command palette, and the theme picker on ctrl+t): the command palette's
# commands quit, save a screenshot to the working folder and probe the frameworks (seconds of a worker each), and
# both fail under keys faster than they lay out (Textual 8.2: the search worker queries a list already gone).
LEFT_OUT = {"command_palette", "change_theme"}
BURST = 8  # keys sent before the app is let to catch up


def bindings(*classes: type[DOMNode]) -> set[str]:
    """Every key the classes (and the classes they inherit from) bind, except those that quit."""
    keys: set[str] = set()
    for cls in classes:
        for klass in cls.__mro__:
            for b in vars(klass).get("BINDINGS", ()):
                b = b if isinstance(b, Binding) else Binding(*b)
                if b.action.split("(")[0] not in QUITS | LEFT_OUT:
                    keys.update(k.strip() for k in b.key.split(","))
    return keys


def lab_classes() -> list[type[DOMNode]]:
    """The lab's panes, dialogs and widgets: every DOM class its modules define."""
    found: list[type[DOMNode]] = [TpulabApp]
    for package in (tpulab.lab.panes, tpulab.lab.widgets):
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            found += [c for c in vars(module).values()
                      if isinstance(c, type) and issubclass(c, DOMNode) and c.__module__ == module.__name__]
    return found


def lab_keys(running: bool = False) -> list[str]:
    """The lab's keys: its bindings, alt+1..5 (caught before any widget), and the keys of moving around; with
    `running`, not x, which would end the run that is to stay in flight."""
    keys = bindings(*lab_classes()) | set(ALT_TABS) | set(NAVIGATION)
    return sorted(keys - {"q", *(("x",) if running else ())})


def top_keys() -> list[str]:
    from tpulab.lab import top

    classes = [c for c in vars(top).values() if isinstance(c, type) and issubclass(c, DOMNode)
               and c.__module__ == top.__name__]
    return sorted((bindings(*classes) | set(NAVIGATION)) - {"q"})


def stream(seed: int, count: int, keys: list[str]) -> list[str]:
    """`count` keys drawn from `keys`, the same for the same seed."""
    rng = random.Random(seed)
    return [rng.choice(keys) for _ in range(count)]


def seasoned(seed: int, count: int, keys: list[str], must: tuple[str, ...], every: int = 40) -> list[str]:
    """`count` keys drawn from `keys`, with `must` at about one place in `every`, a drawn key after its first (`/`, a
    key typed, Escape): keys a uniform draw from some 70 would seldom bring together. The same for the same seed."""
    rng = random.Random(seed)
    drawn: list[str] = []
    while len(drawn) < count:
        drawn += [must[0], rng.choice(keys), *must[1:]] if rng.random() < 1 / every else [rng.choice(keys)]
    return drawn[:count]


def character(key: str) -> str | None:
    """What a terminal sends with the key: a letter itself, a named one by its name (question_mark: ?), else none."""
    if len(key) == 1:
        return key
    try:
        return unicodedata.lookup(key.replace("_", " ").upper())
    except KeyError:
        return None


@dataclass
class Monkeyed:
    keys: list[str]
    seconds: float

    @property
    def per_second(self) -> float:
        return len(self.keys) / self.seconds


Stage = Callable[[Pilot], Awaitable[None]]  # what a test does in the app before or after the keys


async def monkey(app: App, size: tuple[int, int], keys: list[str], leave: tuple[str, ...] = (),
                 before: Stage | None = None, after: Stage | None = None) -> Monkeyed:
    """Press `keys` in `app` at `size` (after `before`, then `after`), then `leave` (the keys that bring a user
    back to where q quits), then q: the app must live through every key (the pilot raises what it raised) and end
    with code 0."""
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        if before is not None:
            await before(pilot)
        t0 = time.perf_counter()
        for i, key in enumerate(keys, 1):
            app.post_message(Key(key, character(key)))  # as the terminal's driver posts it
            await asyncio.sleep(0)  # a burst of keys, as a fast typist or a held key sends them
            if i % BURST == 0:
                await pilot.pause(0)  # all handled, and the screen laid out again
        seconds = time.perf_counter() - t0
        if after is not None:
            await after(pilot)
        await pilot.press(*leave, "q")
        await pilot.pause()
        assert not app.is_running and app.return_code == 0, f"q did not end the app (return code {app.return_code})"
    return Monkeyed(keys, seconds)


def lab_leave() -> tuple[str, ...]:
    """From anywhere in the lab back to where q quits: close the dialogs (a run's question: no), then alt+1."""
    return ("escape",) * 4 + ("alt+1",)


def cheap_runs(patch: Callable[[object, str, object], None], held: bool = False) -> None:
    """Make every run random keys start a short fixed replay of its own workload, and keep no worker waiting
    beside the form: the edge is the worker process, which would import a framework for each (seconds). With
    `held`, each run, its steps given, stays in flight until it is cancelled (x): under every key, on no CPU."""
    from .helpers import HeldWorker, ReplayedWorker

    def replayed(run: Run, first: bool = True) -> None:
        events = short_run(run.workload.name)
        worker = HeldWorker(events[:-1]) if held else ReplayedWorker(events)  # held: no Finished
        run.handles = [worker]  # type: ignore[list-item]

    patch(Run, "_start", replayed)
    patch(Standby, "want", lambda standby, spec, report: None)


def short_run(workload: str, steps: int = 4) -> list[Event]:
    started = Started(workload=workload, device=Device(kind="cpu", name="test CPU"), dtype="float32",
                      flops_per_step=1e6, steps_total=steps + 1, per_replica_batch=8)
    timed: list[Event] = [Step(step=i, seconds=0.01, warmup=i == 1, examples_per_s=800.0) for i in range(1, steps + 1)]
    return [started, Compiled(seconds=0.2), *timed, Finished()]


def run_in_flight(app: TpulabApp) -> tuple[Stage, Stage]:
    """`before` and `after` for `monkey`: a real run (a small conv on JAX, long enough to outlast the keys) streams
    while the keys fall; after them it must still be in flight, and x twice stops it with its steps kept. The
    keys then leave x out (`lab_keys(running=True)`). Its steps take milliseconds, so that it ends with thousands
    of them, not the tens of thousands a 16x16 conv makes in the same time (whose record takes seconds to close)."""
    from .helpers import wait_for

    conv = registry()["conv"]
    tiny = {**conv.defaults(), "batch_size": 16, "image_size": 128, "filters": 64, "iterations": 100000, "warmup": 1,
            "backend": "jax"}

    def pane() -> RunPane:
        return app.screen_stack[0].query_one(RunPane)

    async def start(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: bool(app.query(RunPane)), 10)
        app.post_message(WorkloadsPane.RunRequested(conv, tiny))  # as the form's Run asks
        await wait_for(pilot, lambda: pane().running and pane().run is not None and pane().run.recorder.steps_done() >= 2)
        # Streaming, the worker then yields the cores to the lab under the keys (and to the suite's other tests):
        # every thread of its process group at the lowest priority. It still steps and streams, on what is left.
        os.setpriority(os.PRIO_PGRP, pane().run.handles[0].proc.pid, 19)  # type: ignore[union-attr]

    async def stop(pilot: Pilot) -> None:
        assert pane().running, "the run ended under the keys: it was not in flight throughout"
        assert not app.runtime_pane.making_card, "c made the machine card beside the run"
        await pilot.press(*lab_leave(), "x", "x")
        await wait_for(pilot, lambda: bool(app.records), 30)
        assert app.records[0].status == "cancelled" and app.records[0].steps

    return start, stop
