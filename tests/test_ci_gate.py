"""A regression gate for CI (`compare --fail-on`): a comparison's verdicts as an exit code and one line, for runs
(real ones of the calibration workload, a known slowdown made with --pad) and machine cards (built from kept steps),
and a figure with no verdict that never passes silently."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from tpulab.base.errors import EXIT_FAILED, EXIT_NO_VERDICT, EXIT_OK, EXIT_USAGE
from tpulab.base.events import RunRecord
from tpulab.base.timing import Flag
from tpulab.cli.main import main
from tpulab.engine import bench
from tpulab.engine.card import Card, CardEntry, CardSuite
from tpulab.engine.store import Store

from .helpers import calibration, make_record

DISTURBED = Flag("disturbed", "other processes used 1.30 of 2 cores (65%) while this ran")


def gate(capsys: pytest.CaptureFixture[str], db: Path, *args: str) -> tuple[int, str, str]:
    """The real command line (`main`), its exit code and what it printed, out and err."""
    try:
        code = main([*args, "--db", str(db)])
    except SystemExit as e:
        code = int(e.code or 0)
    said = capsys.readouterr()
    return code, said.out, said.err


def one_line(err: str) -> str:
    """The one line a failed command says on stderr, without its prefix."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0].split(": error: ", 1)[1]


def quiet(db: Path, *flags: str) -> RunRecord:
    """A calibration run of 3 fresh processes, run again (at most twice) while other work disturbed it: a gate gives
    no verdict beside a disturbed run, which is what another test checks."""
    for _ in range(3):
        run = calibration(db, "--repeat", "3", "--iterations", "100", *flags)
        if not any(run.summary.has_flag(f) for f in ("disturbed", "machine-moved")):
            break
    return run


@pytest.mark.slow
@pytest.mark.alone  # it times runs against each other: another test beside it would be timed too
def test_alike_runs_pass_a_known_slowdown_fails_in_one_line_and_changed_fails_a_faster_run(tmp_path, capsys):
    """Each side 3 fresh processes, on an uncalibrated machine: alike runs pass --fail-on slower; the same counted
    work in twice the time (--pad 1) fails it with exit 1 and one line naming the figure, its ratio and interval;
    the other way round it is faster, which --fail-on slower passes and --fail-on changed fails. (1.5x the time, 3
    processes a side, was once "no difference detected" in a fresh clone's alone lane, as test_repeat's known slowdown
    was: this VM's spread between processes; the gate's power at 1.5x needs more processes or a calibrated floor.)"""
    db = tmp_path / "r.db"
    base, alike, padded = quiet(db), quiet(db, "--seed", "1"), quiet(db, "--pad", "1", "--seed", "2")

    code, out, err = gate(capsys, db, "results", "compare", base.id, alike.id, "--fail-on", "slower")
    assert code == EXIT_OK, err
    assert out.strip().splitlines()[-1] == "passed --fail-on slower: 1 figure judged: 1 no difference detected"

    code, out, err = gate(capsys, db, "results", "compare", base.id, padded.id, "--fail-on", "slower")
    line = one_line(err)
    assert code == EXIT_FAILED and line.startswith("slower: calibration step time 0."), line
    assert f"(run {padded.short_id} against base {base.short_id}; noise threshold ±1%, not calibrated" in line
    low, high = (float(x) for x in line.split("[", 1)[1].split("]", 1)[0].replace("x", "").split(", "))
    assert low < 0.5 * 1.25 and high < 0.99  # about 0.5x, and detectably below 1

    code, out, err = gate(capsys, db, "results", "compare", padded.id, base.id, "--fail-on", "slower")
    assert code == EXIT_OK and "1 faster" in out, err
    code, out, err = gate(capsys, db, "results", "compare", padded.id, base.id, "--fail-on", "changed")
    line = one_line(err)
    assert code == EXIT_FAILED and line.startswith("faster: calibration step time "), line
    assert float(line.split("time ", 1)[1].split("x", 1)[0]) > 1.25  # about 2x

    code, out, err = gate(capsys, db, "results", "compare", base.id, padded.id, "--fail-on", "slower", "--json")
    shown = json.loads(out)
    [verdict] = shown["verdicts"]
    assert verdict["figure"] == "calibration step time" and verdict["word"] == "slower"
    assert verdict["run"] == padded.id and verdict["base"] == base.id
    assert verdict["low"] < verdict["ratio"] < verdict["high"] < 0.99 and verdict["threshold"] == 0.01
    assert "not calibrated" in verdict["source"] and "3 and 3 processes' medians" in verdict["why"]
    assert shown["gate"] == {"fail_on": "slower", "passed": False, "exit_code": EXIT_FAILED, "reason": one_line(err)}
    assert code == EXIT_FAILED


def steps(level: float, n: int = 40, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.gauss(0, 0.01)) for _ in range(n)]


def kept(db: Path, *records: RunRecord) -> list[str]:
    store = Store(db)
    for r in records:
        store.save(r)
    return [r.short_id for r in records]


def test_a_disturbed_run_has_no_verdict_and_fails_the_gate_with_its_own_code_however_wide_the_change(db, capsys):
    """1.9x slower is found between quiet runs (exit 1); beside a disturbed run it is no verdict, the gate's own exit
    code, and why; a slower run among the runs still fails with exit 1, the disturbed one left to --json."""
    base, slow = make_record(steps=steps(1.0)), make_record(steps=steps(1.9, seed=1))
    busy = make_record(steps=steps(1.9, seed=2))
    busy.summary.flags.append(DISTURBED)
    a, b, c = kept(db, base, slow, busy)

    code, _, err = gate(capsys, db, "results", "compare", a, b, "--fail-on", "slower")
    assert code == EXIT_FAILED and re.fullmatch(
        rf"slower: conv step time 0\.5\dx \[0\.5\dx, 0\.5\dx\] \(run {b} against base {a}; noise threshold ±40%, "
        r"not calibrated: `tpulab calibrate` measures this machine's\)", one_line(err)), err
    code, out, err = gate(capsys, db, "results", "compare", a, c, "--fail-on", "changed")
    assert code == EXIT_NO_VERDICT and re.fullmatch(
        rf"no verdict: conv step time 0\.5\dx \[0\.5\dx, 0\.5\dx\] \(run {c} against base {a}\): run {c} was "
        r"disturbed or the machine moved \(the flags say how\)", one_line(err)), err
    assert "disturbed" in out  # the table, then the line
    code, out, _ = gate(capsys, db, "results", "compare", a, c)
    assert code == EXIT_OK and "passed" not in out  # no gate asked: the comparison alone, as ever

    code, out, err = gate(capsys, db, "results", "compare", a, c, b, "--fail-on", "slower", "--json")
    assert code == EXIT_FAILED and one_line(err).startswith("slower: conv step time 0.5"), err
    assert f"(run {b} against base {a}; noise threshold" in one_line(err)
    assert [v["word"] for v in json.loads(out)["verdicts"]] == ["no verdict", "slower"]


def test_runs_too_short_for_an_interval_have_no_verdict(db, capsys):
    a, b = kept(db, make_record(median=1.0), make_record(median=2.0))  # four steps each: no interval
    code, _, err = gate(capsys, db, "results", "compare", a, b, "--fail-on", "slower")
    assert code == EXIT_NO_VERDICT and one_line(err).startswith(f"no verdict: conv step time 0.50x (run {b} against "
                                                                f"base {a}): too few steps for an interval")


@pytest.mark.parametrize("command", [("results", "compare", "a", "b"), ("cards", "compare", "a", "b")])
def test_a_bad_fail_on_is_one_line_naming_the_flag_and_its_values(db, capsys, command):
    code, out, err = gate(capsys, db, *command, "--fail-on", "slow")
    assert code == EXIT_USAGE and not out
    assert one_line(err) == "argument --fail-on: must be slower or changed (got 'slow'); did you mean slower?"


def test_fail_on_refuses_a_profile_comparison(db, capsys):
    a, b = kept(db, make_record(), make_record())
    code, _, err = gate(capsys, db, "results", "compare", a, b, "--profile", "--fail-on", "slower")
    assert code == EXIT_USAGE and "--fail-on gates the runs' verdicts" in one_line(err)


# --- machine cards -------------------------------------------------------------------------------------------------
def card(id: str, level: float = 1.0, disturbed: str | None = None, conv: bool = True) -> Card:
    """A card with a decode and a conv entry, each 3 repeats of kept steps at `level` times the first card's (its
    rates 1/level of them): what `tpulab bench` keeps."""
    entries = [CardEntry(name=name, workload=workload, backend="jax", status="ok", unit=unit, median=rate / level,
                         n=60, samples=[steps(0.01 * level, 20, seed=100 * ord(id) + 10 * i + k) for k in range(3)],
                         disturbed=disturbed if name == "conv" else None)
               for i, (name, workload, unit, rate) in enumerate((("decode-b1", "decode", "tokens/s", 100.0),
                                                                 ("conv", "conv", "GFLOP/s", 50.0)))
               if conv or name != "conv"]
    return Card(id=id * 32, created_at="2026-12-01T00:00:00+00:00",
                suite=CardSuite(name=bench.NAME, version=bench.VERSION, quick=True),
                machine={"label": "machine A", "cpu": {"model": "machine A", "threads": 2}}, entries=entries)


def test_cards_compare_gates_every_entry_of_the_base_card(db, capsys):
    """Alike cards pass; a card 1.5x slower fails on its first entry, saying how many more; one that lacks an entry
    (it failed there) or whose entry was disturbed has no verdict for it; --json carries each entry's verdict."""
    store = Store(db)
    for c in (card("a"), card("b", 1.0), card("c", 1.5), card("d", conv=False), card("e", disturbed="1.3 of 2 cores")):
        store.save_card(c)

    code, out, err = gate(capsys, db, "cards", "compare", "aaaa", "bbbb", "--fail-on", "slower")
    assert code == EXIT_OK and "passed --fail-on slower: 2 figures judged: 2 no difference detected" in out, err
    code, _, err = gate(capsys, db, "cards", "compare", "aaaa", "cccc", "--fail-on", "slower")
    line = one_line(err)
    assert code == EXIT_FAILED and line.startswith("slower: decode-b1 (tokens/s) 0.67x [0.6"), line
    assert line.endswith("] (card cccccccc against base aaaaaaaa; noise threshold ±10%, fixed); and 1 more "
                         "(--json lists each)")
    code, _, err = gate(capsys, db, "cards", "compare", "aaaa", "dddd", "--fail-on", "slower")
    assert code == EXIT_NO_VERDICT and one_line(err) == ("no verdict: conv (GFLOP/s) (card dddddddd against base "
                                                         "aaaaaaaa): card dddddddd has no figure for it (the entry "
                                                         "failed or was not run)")
    code, _, err = gate(capsys, db, "cards", "compare", "aaaa", "eeee", "--fail-on", "changed")
    assert code == EXIT_NO_VERDICT and "no verdict: conv (GFLOP/s) 1.00x [" in one_line(err)
    assert "disturbed: machine A [eeeeeeee]: 1.3 of 2 cores" in one_line(err)

    code, out, err = gate(capsys, db, "cards", "compare", "aaaa", "cccc", "bbbb", "--json")
    assert code == EXIT_OK, err
    shown = json.loads(out)
    assert shown["gate"] is None and shown["cards"] == ["a" * 32, "c" * 32, "b" * 32]
    verdicts = {(v["figure"], v["card"]): v for v in shown["verdicts"]}
    slower = verdicts["conv (GFLOP/s)", "c" * 32]
    assert slower["word"] == "slower" and slower["base"] == "a" * 32 and 0.6 < slower["low"] <= slower["ratio"] <= slower["high"] < 0.75
    assert slower["threshold"] == 0.1 and slower["source"] == "fixed"
    assert verdicts["decode-b1 (tokens/s)", "b" * 32]["word"] == "no difference detected" and len(verdicts) == 4
