"""A regression gate for CI: a comparison's verdicts, each figure against its base, acted on by an exit code.

asv's `continuous`, Criterion's baselines and pytest-benchmark's `--benchmark-compare-fail` fail a build when a
benchmark is detectably slower than its baseline; `compare --fail-on slower` does the same from the verdicts a
comparison already draws (faster, slower, no difference detected, each with its interval and noise threshold).
"No difference detected" passes. A figure with no verdict (a run or entry disturbed, a machine that moved, too few
steps for an interval, a run that did not finish, an entry the new side lacks or that did other work) never passes
silently: the gate cannot say, so it fails with its own exit code (`EXIT_NO_VERDICT`) and says why, so that a CI
step can tell "slower" from "run it again on a quieter machine".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tpulab.base import fmt
from tpulab.base.basis import TIME
from tpulab.base.errors import EXIT_FAILED, EXIT_NO_VERDICT, EXIT_OK, TpulabError
from tpulab.base.noise import FASTER, SLOWER, Change
from tpulab.engine.card_compare import OTHER_WORK, CardComparison, usable
from tpulab.engine.store import Comparison, untrusted

GATES = {"slower": (SLOWER,), "changed": (SLOWER, FASTER)}  # --fail-on's values: the verdicts that fail each
NO_VERDICT = "no verdict"  # a figure's word where the comparison could not judge it


@dataclass(frozen=True)
class Sides:
    """Who is judged against whom: a run or a card, by its id, against the base's."""

    side: str  # 'run' or 'card'
    id: str
    base: str
    pair: str  # both in words: 'run abc12345 against base def67890'


@dataclass(frozen=True)
class Verdict:
    """One figure of one side against the base: its ratio (higher is better: the base's time over its own, or its
    rate over the base's), the ratio's interval, the word, and the noise threshold the word was judged beyond."""

    figure: str  # 'conv step time', 'decode-b1 (tokens/s)'
    sides: Sides
    ratio: float | None
    low: float | None = None
    high: float | None = None
    word: str = NO_VERDICT  # faster, slower, no difference detected, or NO_VERDICT
    threshold: float | None = None  # as a ratio less 1: 0.03 is ±3%
    source: str = ""  # where the threshold came from: this machine's calibrated floor, the default, or 'fixed'
    why: str = ""  # what the interval was drawn from, or why there is no verdict

    def line(self) -> str:
        """'slower: conv step time 0.66x [0.61x, 0.71x] (run abc12345 against base def67890; noise threshold ±3%,
        calibrated here on ...)': the one line a failed gate says; without a verdict, why there is none."""
        interval = f"[{self.low:.2f}x, {self.high:.2f}x]" if self.low is not None and self.high is not None else ""
        said = " ".join(p for p in (f"{self.word}: {self.figure}", f"{self.ratio:.2f}x" if self.ratio else "",
                                    interval) if p)
        if self.word == NO_VERDICT:
            return f"{said} ({self.sides.pair}): {self.why}"
        threshold = f"; noise threshold ±{self.threshold:.0%}, {self.source}" if self.threshold is not None else ""
        return f"{said} ({self.sides.pair}{threshold})"

    def to_json(self) -> dict[str, object]:
        return {"figure": self.figure, self.sides.side: self.sides.id, "base": self.sides.base, "ratio": self.ratio,
                "low": self.low, "high": self.high, "word": self.word, "threshold": self.threshold,
                "source": self.source, "why": self.why}


def judged(figure: str, sides: Sides, c: Change | None, ratio: float | None, against: str | None) -> Verdict:
    """A figure's verdict from its `Change`, or no verdict: `against` (why the comparison cannot be trusted), a
    missing change, or one without an interval."""
    if c is None:
        return Verdict(figure, sides, ratio, why=against or "no steps timed")
    why = against or ("" if c.low is not None else c.why or "no interval")
    return Verdict(figure, sides, c.speedup, c.low, c.high, NO_VERDICT if why else c.word, c.threshold, c.source,
                   why or c.why)


def of_runs(cmp: Comparison) -> list[Verdict]:
    """Each run against the first: its time (or rate, where the work differs), judged. A run that did not finish,
    or either side disturbed or moved (whatever the word: its load may hide a change as well as make one), has no
    verdict."""
    base = cmp.records[0]
    figure = f"{cmp.workload} {'step time' if cmp.by == TIME else cmp.by}"
    out = []
    for r, x, c in zip(cmp.records[1:], cmp.speedups[1:], cmp.changes[1:]):
        unfinished = [f"run {s.short_id} is {s.status}: its figures cover only what completed"
                      for s in (base, r) if s.status != "finished"]
        beside = untrusted([base, r])
        who = f"run {beside[0]} was" if len(beside) == 1 else f"runs {' and '.join(beside)} were"
        moved = [f"{who} disturbed or the machine moved (the flags say how)"] if beside else []
        sides = Sides("run", r.id, base.id, f"run {r.short_id} against base {base.short_id}")
        out.append(judged(figure, sides, c, x, "; ".join(unfinished + moved) or None))
    return out


def of_cards(cmp: CardComparison) -> list[Verdict]:
    """Each card's entries against the first card's: every entry the base has a figure for is judged on each other
    card; one the other card lacks (failed, or not run), one of other work, one disturbed on either side, or one with
    no interval (a published card's) has no verdict."""
    first, others = cmp.cards[0], cmp.cards[1:]
    rows = {r.name: r for r in cmp.rows}
    out = []
    for e in first.entries:
        if e is not usable(first, e.name):
            continue  # (the base's own failed entry, or another backend's line of the same name: nothing to hold to)
        row = rows.get(e.name)
        figure = f"{e.name} ({e.unit})" if e.unit else e.name
        for i, card in enumerate(others, 1):
            sides = Sides("card", card.id, first.id, f"card {card.short_id} against base {first.short_id}")
            if row is None or row.cells[i].entry is None:
                out.append(Verdict(figure, sides, None, why=f"card {card.short_id} has no figure for it (the entry "
                                                            "failed or was not run)"))
                continue
            cell = row.cells[i]
            against = f"other work ({', '.join(row.work)})" if cell.no_interval == OTHER_WORK else \
                "; ".join(f"disturbed: {d}" for d in cell.disturbed) or None
            if cell.speedup is None and against is None:
                against = cell.why or "no speedup"
            if cell.change is None and against is None:
                against = cell.no_interval or "no interval"
            out.append(judged(figure, sides, cell.change, cell.speedup, against))
    return out


class Regression(TpulabError):
    """A gate failed: a figure detectably slower (or changed) against its base."""

    exit_code = EXIT_FAILED


class NoVerdict(TpulabError):
    """A gate could not judge: a figure had no verdict, and none was slower (or changed)."""

    exit_code = EXIT_NO_VERDICT


def gate(verdicts: list[Verdict], fail_on: str) -> TpulabError | None:
    """The gate's failure (its one line: the first figure that fails it, and how many more), or None where it
    passes: every figure judged, none with a word `fail_on` fails on."""
    if not verdicts:
        return NoVerdict(f"{NO_VERDICT}: nothing was compared, so nothing passed --fail-on {fail_on}")
    failed = [v for v in verdicts if v.word in GATES[fail_on]]
    unjudged = [v for v in verdicts if v.word == NO_VERDICT]
    found, kind = (failed, Regression) if failed else (unjudged, NoVerdict)
    if not found:
        return None
    more = f"; and {len(found) - 1} more (--json lists each)" if len(found) > 1 else ""
    return kind(found[0].line() + more)


def gate_json(verdicts: list[Verdict], fail_on: str) -> dict[str, object]:
    """What `--json` says of the gate: its value, whether it passed, its exit code and its one line."""
    failure = gate(verdicts, fail_on)
    return {"fail_on": fail_on, "passed": failure is None, "exit_code": failure.exit_code if failure else EXIT_OK,
            "reason": str(failure) if failure else None}


def passed(verdicts: list[Verdict], fail_on: str) -> str:
    """'passed --fail-on slower: 2 figures judged: 1 no difference detected, 1 faster', said after the table."""
    counts = Counter(v.word for v in verdicts)
    return f"passed --fail-on {fail_on}: {fmt.counted(len(verdicts), 'figure')} judged: " + \
        ", ".join(f"{n} {word}" for word, n in counts.most_common())


def enforce(verdicts: list[Verdict], fail_on: str | None) -> None:
    """Raises the gate's failure, which the command line says in one line with its exit code (no gate: nothing)."""
    failure = gate(verdicts, fail_on) if fail_on else None
    if failure is not None:
        raise failure
