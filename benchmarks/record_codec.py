"""What a large record costs to keep, read back and import: a run of 100,000 steps (a long decode, a long sweep).

A record of the shape a real run makes (`tests.helpers.make_record`, its steps multiplied) is saved to a fresh
store, read back by id, exported and imported into another store (each field checked). Each is timed against
its floor in the same round: `json.dumps` of the record's JSON object for a save, `json.loads` of its text for a
read, both for an import (it parses the file and writes the record's text). Medians of the rounds, and their
ratios to the floor, are printed (goal: none above 4x).

    python benchmarks/record_codec.py [--steps 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import make_record  # noqa: E402
from tpulab.base.events import RunRecord, Step  # noqa: E402
from tpulab.engine.store import Store, export_json, read_export  # noqa: E402


def record(steps: int) -> RunRecord:
    r = make_record()
    r.steps = [Step(step=i, seconds=0.001 + (i % 97) * 1e-6, examples_per_s=8000.0 + i % 13) for i in range(steps)]
    return r


def timed(what: object) -> float:
    start = time.perf_counter()
    what()  # type: ignore[operator]
    return time.perf_counter() - start


def one_round(r: RunRecord, folder: Path) -> dict[str, float]:
    """Each operation once, on fresh stores (their tables made outside the timing)."""
    store, other = Store(folder / "a.db"), Store(folder / "b.db")
    store.page(), other.page()
    data = r.to_json()
    text = json.dumps(data)
    export_json([r], folder / "x.json")
    return {"dumps": timed(lambda: json.dumps(data)), "save": timed(lambda: store.save(r)),
            "loads": timed(lambda: json.loads(text)), "read": timed(lambda: store.get(r.id)),
            "import": timed(lambda: other.import_records(read_export(folder / "x.json")))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    r = record(args.steps)
    times: dict[str, list[float]] = {k: [] for k in ("dumps", "save", "loads", "read", "import")}
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            for k, v in one_round(r, Path(tmp)).items():
                times[k].append(v)
        print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items()), flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    med["loads and dumps"] = med["loads"] + med["dumps"]
    print(f"a record of {args.steps:,} steps, {args.rounds} rounds (medians)")
    for what, floor in (("save", "dumps"), ("read", "loads"), ("import", "loads and dumps")):
        print(f"{what:<7}{med[what]:.3f} s, {med[what] / med[floor]:.2f}x json's {floor} ({med[floor]:.3f} s) "
              "(goal <= 4x)")


if __name__ == "__main__":
    main()
