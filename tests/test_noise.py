"""Noise is not a finding: intervals and verdicts on known samples, a known load named, and real runs compared."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tpulab.base.events import RunRecord
from tpulab.base.noise import (DEFAULT_FLOOR, FASTER, MIN_FLOOR, NOISE, SAME, SLOWER, UNCALIBRATED, Floor, change,
                               floor_of, interval)
from tpulab.base.timing import summarize
from tpulab.engine.store import compare
from tpulab.views.console import comparison_table

from .helpers import ROOT, make_record, text

STEPS = json.loads((Path(__file__).parent / "data" / "conv_steps.json").read_text())["seconds"]


def pairs(n: int = 10, blocks: int = 30, size: int = 10) -> list[tuple[list[float], list[float]]]:
    """`n` pairs of runs drawn from one real run's step times: each side `blocks` stretches of `size` consecutive
    steps from anywhere in it (a stretch keeps the bursts that make steps autocorrelated)."""
    rng = random.Random(7)

    def side() -> list[float]:
        starts = [rng.randrange(len(STEPS) - size) for _ in range(blocks)]
        return [x for a in starts for x in STEPS[a:a + size]]

    return [(side(), side()) for _ in range(n)]


def test_a_run_whose_level_moved_gets_an_interval_that_holds_the_move():
    """Stretches of that run taken at different moments differed by up to 15% (its level moved while it ran): an
    interval of one stretch (a short run) holds its own move, so alike stretches mostly compare as alike."""
    rng = random.Random(7)
    found = [change(STEPS[a:a + 300], STEPS[b:b + 300])
             for a, b in ((rng.randrange(1200), rng.randrange(1200)) for _ in range(10))]
    assert sum(c is not None and c.word == SAME for c in found) >= 9


def test_alike_samples_are_no_difference_and_a_fifth_more_time_is_slower():
    alike = [change(a, b) for a, b in pairs()]
    slower = [change(a, [x * 1.2 for x in b]) for a, b in pairs()]
    assert sum(c is not None and c.word == SAME for c in alike) >= 9
    assert sum(c is not None and c.word == SLOWER for c in slower) >= 9
    quicker = change(STEPS[:300], [x / 1.3 for x in STEPS[300:600]])
    assert quicker is not None and quicker.word == FASTER and quicker.low is not None and quicker.low > 1 + NOISE
    said = slower[0].words() if slower[0] else ""
    assert "slower" in said and "noise threshold ±10%" in said and "[0." in said


def test_a_ratio_within_the_noise_threshold_is_no_difference_however_narrow():
    base = [1.0 + 0.001 * (i % 7) for i in range(400)]
    c = change(base, [x * 1.03 for x in base])
    assert c is not None and c.low is not None and c.high is not None and c.high < 1  # detectably 3% slower ...
    assert c.word == SAME  # ... but within the stated threshold


def test_too_few_steps_give_no_interval_and_detect_nothing():
    c = change([1.0, 1.1, 0.9], [0.5, 0.55, 0.45])
    assert c is not None and c.low is None and c.word == SAME and "too few steps" in c.words()
    assert interval([1.0, 1.1]) is None and summarize([1.0, 1.1]).half_width() is None  # type: ignore[union-attr]


def test_an_interval_over_repeats_holds_the_spread_between_them():
    """Three repeats whose levels differ by 10%: their interval is wider than that of three repeats at one level."""
    level = [STEPS[:200], STEPS[200:400], STEPS[400:600]]
    moved = [STEPS[:200], [x * 1.1 for x in STEPS[200:400]], STEPS[400:600]]
    steady, over = interval(level), interval(moved)
    assert steady is not None and over is not None
    assert over[1] - over[0] > 2 * (steady[1] - steady[0])


def test_the_same_samples_give_the_same_interval_every_time():
    assert interval(STEPS) == interval(STEPS)
    stats = summarize(STEPS)
    assert stats is not None and stats.low is not None and stats.high is not None
    assert stats.low < stats.median < stats.high and 0 < (stats.half_width() or 0) < 0.1


def test_compare_at_80_columns_says_the_verdict_and_the_interval_whole():
    base = make_record(steps=STEPS[:300])
    slower = make_record(steps=[x * 1.3 for x in STEPS[300:600]])
    same = make_record(steps=STEPS[600:900])
    floor = Floor(0.10, "calibrated here on 2026-12-07: 10 processes, jax on CPU")
    shown = text(comparison_table(compare([base, slower, same], floor=floor), 80), 80)
    lines = shown.splitlines()
    assert all(len(line) <= 80 for line in lines)
    [speedup] = [line for line in lines if "speedup" in line and "│" in line]
    [verdict] = [line for line in lines if "verdict" in line and "│" in line]
    assert "(base)" in verdict and "slower" in verdict and "no difference" in verdict
    assert "[0.70x, 0.75x]" in speedup and "[0.95x, 1.05x]" in speedup  # (the stretches' medians differ too)
    assert "noise floor ±10% (calibrated here on 2026-12-07" in " ".join(shown.split())


def test_single_runs_on_an_uncalibrated_machine_take_the_wide_default_and_say_so():
    """Alike runs differ up to 1.36x between processes on a shared VM: uncalibrated, 1.3x is no finding."""
    base, slower = make_record(steps=STEPS[:300]), make_record(steps=[x * 1.3 for x in STEPS[300:600]])
    found = compare([base, slower])
    assert found.changes[1] is not None and found.changes[1].word == SAME
    assert found.changes[1].threshold == UNCALIBRATED.spread == DEFAULT_FLOOR
    assert "not calibrated" in found.changes[1].words() and "tpulab calibrate" in found.header
    twice = compare([base, make_record(steps=[x * 2 for x in STEPS[300:600]])])
    assert twice.changes[1] is not None and twice.changes[1].word == SLOWER  # 2x is beyond any VM's spread


def test_a_floor_is_the_spread_between_alike_processes_and_narrows_with_repeats():
    assert floor_of([1.0, 1.0, 1.0]) == 0.0
    assert abs(floor_of([1.0, 1.2]) - 0.2) < 1e-9  # two processes: their one ratio
    f = Floor(0.2, "calibrated")
    assert f.threshold(1, 1) == 0.2 and abs(f.threshold(4, 4) - 0.1) < 1e-9  # the medians of 4: half the spread
    assert Floor(0.001, "quiet").threshold(5, 5) == MIN_FLOOR  # never below 1%
    with pytest.raises(ValueError):
        floor_of([1.0])


# --- real runs -------------------------------------------------------------------------------------------------
def conv(iterations: int, image_size: int = 64) -> RunRecord:
    """A small conv on JAX, headless, its record from its `--json` stream."""
    out = subprocess.run([sys.executable, "-m", "tpulab", "run", "conv", "--backend", "jax", "--batch-size", "8",
                          "--image-size", str(image_size), "--filters", "32", "--iterations", str(iterations),
                          "--no-ui", "--no-save", "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    last = json.loads(out.stdout.splitlines()[-1])
    last.pop("event")
    return RunRecord.from_json(last)


def steps_for(seconds: float) -> int:
    """Steps of that conv filling about `seconds` on this machine, as a short run measures it (the load is sampled
    twice a second: a run must last a few samples whatever the machine's speed)."""
    probe = conv(50)
    assert probe.median
    return max(100, round(seconds / probe.median))


def busy_cores(n: int) -> list[subprocess.Popen[bytes]]:
    """`n` processes, each holding one core in a busy loop."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


@pytest.mark.alone
@pytest.mark.slow
def test_a_busy_neighbour_is_named_and_a_quiet_run_is_not_flagged():
    """Held cores past a quarter of the machine (one of two here) make the run disturbed, naming about that load;
    the same run alone is not flagged."""
    cores = os.cpu_count() or 1
    held = max(1, cores // 2)
    iterations = steps_for(3.0)
    quiet = conv(iterations)
    load = busy_cores(held)
    try:
        time.sleep(0.5)
        beside = conv(iterations)
    finally:
        for p in load:
            p.kill()
            p.wait()
    assert not quiet.summary.has_flag("disturbed"), [f.message for f in quiet.summary.flags]
    [flag] = [f for f in beside.summary.flags if f.code == "disturbed"]
    t = beside.summary.telemetry
    assert t is not None and t.cores == cores
    from tpulab.engine.telemetry_summary import load_of

    other = load_of(t)
    assert other is not None and held * 0.6 <= other.other <= held * 1.4, flag.message
    assert f"of {cores} cores" in flag.message and "while this ran" in flag.message
    assert [v.code for v in t.verdicts][:1] == ["busy-machine"]  # the why starts with the machine
    shown = text(comparison_table(compare([quiet, beside]), 80), 80)
    assert "disturbed" in shown and all(len(line) <= 80 for line in shown.splitlines())
