"""The machine card's figures against the same runs made alone, and two cards against each other.

1. entry/alone: each chosen entry's median (from a card of the quick suite) against the same workload run alone
   with the same parameters, by the command the card gives for it (`tpulab --run ... --no-ui --json`), rounds
   alternated; goal: alone/entry <= 1.03x (the card's bench adds nothing to what it measures).
2. card/card: with --cards 2, two quick cards back to back, compared as `tpulab cards compare` does (from both
   cards' kept steps): goal: every entry "no difference detected" (or within the cards' measured drift), each
   printed with its ratio's interval, its coefficient of variation and the card's drift.
3. the card's wall time against its budget (3 minutes with --quick on a 2-core machine).

    python benchmarks/card.py [--rounds 2] [--entries conv,decode-b1] [--cards 2] [--backend tensorflow]
                              [--card CARD.json]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tpulab.base.noise import SAME  # noqa: E402
from tpulab.engine.bench_run import Bench, field_of  # noqa: E402
from tpulab.engine.card import Card, read  # noqa: E402
from tpulab.engine.card_compare import compare  # noqa: E402
from tpulab.engine import bench  # noqa: E402
from tpulab.base.events import RunRecord  # noqa: E402
from tpulab.machine.detect import detect  # noqa: E402


def card(db: Path, backend: str) -> tuple[Card, float]:
    t0 = time.monotonic()
    made = Bench(detect(), db, backend, quick=True).run()
    return made, time.monotonic() - t0


def alone(command: str, path: str, db: Path) -> float | None:
    """The headline of the entry's own command, run alone in a fresh process (its last JSON line is the record)."""
    args = shlex.split(command)[1:] + ["--json", "--db", str(db)]
    done = subprocess.run([sys.executable, "-m", "tpulab", *args], capture_output=True, text=True, cwd=ROOT)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
    data = json.loads(last)
    if data.get("event") != "result":
        print(f"  alone: no result ({(done.stderr.strip().splitlines() or ['no output'])[-1][:200]})")
        return None
    record = RunRecord.from_json({k: v for k, v in data.items() if k != "event"})
    value = field_of(record.summary, path)
    return float(value) if value is not None else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--entries", default="conv,decode-b1")
    ap.add_argument("--cards", type=int, default=1, help="quick cards to make (2: compare them)")
    ap.add_argument("--backend", default="tensorflow")
    ap.add_argument("--card", type=Path, help="an exported card to set the runs alone against (none is made)")
    a = ap.parse_args()
    paths = {h.name: h.path for e in bench.SUITE.entries for h in e.headlines}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "r.db"
        cards = [read(a.card)] if a.card else []
        for _ in range(0 if a.card else a.cards):
            made, wall = card(db, a.backend)
            cards.append(made)
            print(f"card {made.short_id}: {wall:.0f} s wall (budget {made.budget_s:.0f} s: "
                  f"{'within' if wall <= (made.budget_s or 0) else 'OVER'}), status {made.status}, "
                  f"noisy: {made.noisy or 'no'}, drift: {made.drift_words() or '-'}")
        first = cards[0]
        for e in first.entries:
            print(f"  {e.name:20} {e.median or 0:12.2f} {e.unit or '':12} cv {'-' if e.cv is None else f'{e.cv:.1%}'} "
                  f"n {e.n} {e.stopped or e.reason or ''}")
        if len(cards) > 1:
            rows = [(r.name, r.cells[0].entry, r.cells[1]) for r in compare(cards[:2]).rows if r.cells[1].speedup]
            for name, e, cell in rows:
                said = cell.change.words() if cell.change else f"{cell.speedup:.3f}x ({cell.no_interval})"
                cvs = f"cv {(e.cv if e else 0) or 0:.1%} / {(cell.entry.cv if cell.entry else 0) or 0:.1%}"
                print(f"  card/card {name:20} {said} ({cvs}){'; disturbed' if cell.disturbed else ''}")
            same = sum(cell.change is not None and cell.change.word == SAME for _, _, cell in rows)
            print(f"card/card: {same} of {len(rows)} entries 'no difference detected' (goal: all)")
        for name in a.entries.split(","):
            e = next((x for x in first.entries if x.name == name and x.command and x.median), None)
            if e is None:
                print(f"entry/alone {name}: no figure on the card")
                continue
            ratios = []
            for _ in range(a.rounds):
                solo = alone(e.command or "", paths[name], db)
                if solo:
                    ratios.append(solo / e.median)
            if not ratios:
                print(f"entry/alone {name}: no run alone gave a figure")
            else:
                print(f"entry/alone {name}: alone/entry {statistics.median(ratios):.3f}x over {len(ratios)} round(s) "
                      f"({', '.join(f'{r:.3f}' for r in ratios)}; goal <= 1.03x)")


if __name__ == "__main__":
    main()
