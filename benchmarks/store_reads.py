"""What `results compare` and `results show` cost when what is kept is large: they read what they show.

1. `tpulab results compare A B` of two kept runs of 100,000 steps each (one of them timed in two fresh processes,
   `--repeat 2`), the command called in this process as `tpulab` runs it (its output captured), against the same
   command reading each record whole and its step times from its parsed steps, as it did before the step times
   were kept apart (`run_steps`): the baseline, measured in the same rounds. Goal: under 0.3 s.
2. `tpulab results show ID` of one run in a store of 100,000 kept runs on one device (each with its intensity
   known, so each is a point its roofline could draw, and a few rooflines that set the device's ceilings), in this
   process, against the same in a store of 100 runs. Goal: under 1 s, however many runs are kept. The way it read
   before (every record, whole, for the roofline) is timed once on the smaller of 10,000 runs and the size asked,
   as the baseline.

Each is also timed once as a process (`python -m tpulab ...`: the interpreter's start and tpulab's imports
included), for what a user waits; the comparison against `results show` of one of its runs (the same start, the same
store), as `benchmarks/noise.py` sets it. The store of many runs is made fast: one real record saved, then copied with
new ids and dates by SQL in one transaction (the index row, the record and its step times alike).

    python benchmarks/store_reads.py [--steps 100000] [--runs 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import kept_roofline, make_record  # noqa: E402
from tpulab.base.events import RunRecord, Step  # noqa: E402
from tpulab.base.timing import summarize  # noqa: E402
from tpulab.cli.main import main as tpulab  # noqa: E402
from tpulab.engine import store as kept  # noqa: E402
from tpulab.engine.store import Store  # noqa: E402

SMALL = 100  # the store `results show` is set against
BEFORE_AT = 10_000  # the most runs the way of before (every record read) is timed at


def in_process(*args: str) -> float:
    """`tpulab ARGS` as the command line runs it, here, its output captured; the seconds it took."""
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = tpulab(list(args))
    took = time.perf_counter() - t0
    assert code == 0, out.getvalue()[-2000:]
    return took


def as_process(*args: str) -> float:
    env = {**os.environ, "COLUMNS": "100"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "tpulab", *args], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=600)
    took = time.perf_counter() - t0
    assert out.returncode == 0, out.stderr[-2000:]
    return took


@contextlib.contextmanager
def whole_records() -> Iterator[None]:
    """The store as compare read it before: each record whole (its ~10 MiB of steps parsed), its step times from
    them (`timed_repeats` of the parsed steps)."""
    get, timed = Store.get, Store.timed_repeats
    Store.get = lambda self, run_id, light=False: get(self, run_id)  # type: ignore[method-assign]
    Store.timed_repeats = lambda self, r: kept.timed_repeats(r)  # type: ignore[method-assign]
    try:
        yield
    finally:
        Store.get, Store.timed_repeats = get, timed  # type: ignore[method-assign]


def long_run(n: int, scale: float, run_id: str, processes: int = 1) -> RunRecord:
    """A run of `n` steady steps about 10 ms (`scale` times), timed in `processes` fresh processes."""
    base = make_record(median=0.01)
    r = RunRecord.from_json({**base.to_json(), "id": run_id, "steps": []})
    r.steps = [Step(step=i, seconds=0.01 * scale * (1 + 0.05 * ((i * 7919) % 13) / 13)) for i in range(n)]
    r.summary.step_seconds = summarize([s.seconds for s in r.steps])
    r.repeats = [i * n // processes for i in range(processes)] if processes > 1 else []
    return r


def median_of(rounds: int, *timed: Callable[[], float]) -> list[float]:
    """Each of `timed`'s medians over `rounds`, alternating, so a busy machine weighs on each alike."""
    found: list[list[float]] = [[] for _ in timed]
    for _ in range(rounds):
        for i, t in enumerate(timed):
            found[i].append(t())
    return [statistics.median(f) for f in found]


def compare_cost(folder: Path, steps: int, rounds: int) -> None:
    db = folder / "long.db"
    store = Store(db)
    t0 = time.perf_counter()
    ids = ["a" * 32, "b" * 32]
    store.save(long_run(steps, 1.0, ids[0]))
    store.save(long_run(steps, 1.1, ids[1], processes=2))
    made = time.perf_counter() - t0
    args = ("results", "--db", str(db), "compare", ids[0][:8], ids[1][:8])

    def before() -> float:
        with whole_records():
            return in_process(*args)

    in_process(*args), before()  # warm-up: the imports, SQLite's cache
    now, then = median_of(rounds, lambda: in_process(*args), before)
    print(f"1. results compare of two runs of {steps:,} steps (both saved in {made:.1f} s; "
          f"{Store(db).size() / 2**20:.0f} MiB kept): {now:.3f} s, against {then:.3f} s reading each record whole "
          f"(median of {rounds}): {then / now:.1f}x faster, {now:.3f} s (goal < 0.3 s)")
    process, shown = as_process(*args), as_process("results", "--db", str(db), "show", ids[0][:8])
    print(f"   as a process, start and imports included: {process:.3f} s, against {shown:.3f} s for `results show` of "
          f"one of them: the comparison's own {process - shown:+.3f} s")


def many_runs(folder: Path, n: int) -> tuple[Path, str]:
    """A store of `n` conv runs on one CPU, each of known intensity, and three rooflines there that set its ceilings;
    the id of a run in the middle. One record saved, then copied by SQL in one transaction."""
    path = folder / f"runs-{n}.db"
    store = Store(path)
    template = make_record()
    template.summary.intensity = 3.0
    template.started_at = "2026-06-01T00:00:00"
    store.save(template)
    for k in range(3):
        roof = kept_roofline("tensorflow", "2.20.0", "3.12")
        roof.id, roof.started_at = f"{k:x}" * 32, f"2026-0{k + 2}-01T00:00:00"
        store.save(roof)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        numbered = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                    "SELECT printf('%032x', i + 4096) AS new, i, t.* FROM n, {table} t WHERE t.id = ?")
        cols = [c[1] for c in con.execute("PRAGMA table_info(runs)")]
        picked = ", ".join("new" if c == "id" else "strftime('%Y-%m-%dT%H:%M:%S', started_at, '-' || i || ' minutes')"
                           if c == "started_at" else c for c in cols)
        con.execute(f"INSERT INTO runs ({', '.join(cols)}) SELECT {picked} FROM ({numbered.format(table='runs')})",
                    (n - 1, template.id))
        con.execute("INSERT INTO run_data SELECT new, replace(row, ?, new), replace(record, ?, new), bulk FROM "
                    f"({numbered.format(table='run_data')})", (template.id, template.id, n - 1, template.id))
        con.execute(f"INSERT INTO run_steps SELECT new, starts, seconds FROM ({numbered.format(table='run_steps')})",
                    (n - 1, template.id))
        con.execute("COMMIT")
    finally:
        con.close()
    return path, f"{n // 2 + 4096:032x}"


def show_cost(folder: Path, n: int, rounds: int) -> None:
    from rich.console import Console

    from tpulab.views.console import summary_table
    from tpulab.views.roofline import roofline_view

    t0 = time.perf_counter()
    (big, shown), (small, shown_small) = many_runs(folder, n), many_runs(folder, SMALL)
    made = time.perf_counter() - t0
    assert Store(big).count() == n + 3 and Store(big).get(shown).id == shown
    big_args, small_args = ("results", "--db", str(big), "show", shown), ("results", "--db", str(small), "show",
                                                                           shown_small)
    in_process(*small_args), in_process(*big_args)  # warm-up
    at_n, at_small = median_of(rounds, lambda: in_process(*big_args), lambda: in_process(*small_args))
    print(f"2. results show of one run among {n:,} kept (the stores made in {made:.1f} s, "
          f"{Store(big).size() / 2**20:.0f} MiB): {at_n:.3f} s, against {at_small:.3f} s among {SMALL:,} "
          f"(median of {rounds}): {at_n / at_small:.2f}x, {at_n:.3f} s (goal < 1 s)")
    print(f"   as a process, start and imports included: {as_process(*big_args):.3f} s among {n:,}, "
          f"{as_process(*small_args):.3f} s among {SMALL:,}")
    m = min(n, BEFORE_AT)
    old, old_shown = (big, shown) if m == n else many_runs(folder, m)

    def before() -> None:  # what `results show` did: the run whole, and every kept record for its roofline
        store = Store(old)
        record = store.get(old_shown)
        console = Console(file=io.StringIO(), width=100)
        console.print(summary_table(record))
        console.print(roofline_view(store.records(), record.device, console.width))  # type: ignore[arg-type]

    t0 = time.perf_counter()
    before()
    print(f"   before (every record read for the roofline): {time.perf_counter() - t0:.3f} s among {m:,}, "
          f"against {in_process('results', '--db', str(old), 'show', old_shown):.3f} s now")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100_000, help="steps of each compared run")
    ap.add_argument("--runs", type=int, default=100_000, help="runs kept beside the one shown")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        compare_cost(Path(tmp), args.steps, args.rounds)
        show_cost(Path(tmp), args.runs, args.rounds)


if __name__ == "__main__":
    main()
