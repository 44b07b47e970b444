"""A run's op-level profile shown: the op table, its top ops in a few lines, and two profiles set
against each other (where the time moved).

The terminal's tables, the notebook's HTML and the CSV export read the same cells here. Two
profiles are matched op by op by name; what is left is matched by category, so that runs whose
ops are named differently (TensorFlow against JAX) still say where their time went.
"""

from __future__ import annotations

import csv
import os
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table

from tpulab.base import fmt, safe
from tpulab.base.events import OP_CATEGORIES, OTHER_OPS, OpRow, Profile, RunRecord

TOP = 5  # the ops a run's summary names
OP_COLUMNS = ("op", "category", "calls", "ms/step", "share", "GFLOP/s", "ceiling", "bound")
OF_SPEC = "of spec"  # the `ceiling` column's name where no op is set against a measured ceiling
SPEC_MARK = "*"  # a cell that is a share of the spec (beside others of a measured ceiling), said in a note
NAME_WIDTH = 40  # an op's name in a line of the summary or the log
MIN_NAME = 16  # the op column's narrowest, at any width
MOVE_COLUMNS = ("op or category", "matched", "A ms", "B ms", "delta ms", "share change")
CSV_FIELDS = tuple(f.name for f in fields(OpRow))
NOT_PROFILED = "run {id} has no op profile: run it again with --profile (profile=True in Python)"
UNATTRIBUTED = "not attributed to any op"  # the op table's last row: the step's time in which no op ran (the host gap)
UNATTRIBUTED_SHORT = "not attributed"  # that row's name where the op column is narrower (never below MIN_NAME)
OVERHEAD = "profiler-overhead"  # the verdict of a profiler that can pause (torch's): a traced step against an untraced


def ms(seconds: float | None, sign: str = "") -> str:
    """Seconds as milliseconds: '123', '12.3', '1.23', '0.042', '<0.001' ('-': unknown); sign '+': '+1.23'."""
    if seconds is None:
        return "-"
    v = abs(seconds * 1e3)
    signed = ("-" if seconds < 0 else sign) if v >= 0.0005 else ""
    if v < 0.0005:
        return "<0.001" if v else "0"
    return signed + (f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1 else f"{v:.3f}")


def calls(n: float) -> str:
    """Calls per step as a count: '1,340', '12', '2.5' (a call every other step: '0.5'); never '1.34e+03'."""
    return f"{n:,.0f}" if n >= 100 else f"{n:.3g}"


def shorten(name: str, width: int, head: int | None = None) -> str:
    """A name cut in the middle to `width`, keeping its distinguishing end (the layer and the op a path ends
    with; a fused kernel's "..., fused" whole) and `head` characters of its start (a quarter by default)."""
    if len(name) <= width:
        return name
    scope, said, what = name.partition(": ")
    if said and len(what) + 2 + MIN_NAME // 2 <= width:
        return f"{shorten(scope, width - len(what) - 2)}: {what}"
    head = min(head or width // 4, width - 4)
    return f"{name[:head]}…{name[len(name) - (width - head - 1):]}"


def labels(names: list[str], width: int) -> dict[str, str]:
    """Each name as printed in `width`, shortened in the middle; two names never print the same text. Names that
    would are shown from where they part (their common start left out), then given more room, up to whole."""
    out: dict[str, str] = {}
    todo, room, apart = list(dict.fromkeys(names)), width, False
    while todo:
        if apart:  # the second round: where the colliding names part, and the end
            start = max(0, len(os.path.commonprefix(todo)) - 4)
            short = {n: shorten("…" + n[start:] if start else n, room, 12) for n in todo}
        else:
            short = {n: shorten(n, room) for n in todo}
        seen = Counter(short.values())
        out.update({n: t for n, t in short.items() if seen[t] == 1})
        todo = [n for n in todo if seen[short[n]] > 1]
        room += 4 if apart else 0
        apart = True
    return out


def is_spec(ceiling: str | None) -> bool:
    return (ceiling or "").startswith("the spec")


def spec_only(p: Profile) -> bool:
    """Whether no op is set against a measured ceiling (each share is of the vendor's spec)."""
    rated = [op.ceiling for op in p.ops if op.ceiling]
    return bool(rated) and all(is_spec(c) for c in rated)


def shown_columns(p: Profile) -> list[int]:
    """Which of OP_COLUMNS the table shows: all but `bound` where no op's is known (the notes say why)."""
    return [i for i, c in enumerate(OP_COLUMNS) if c != "bound" or any(op.bound for op in p.ops)]


def op_columns(p: Profile) -> tuple[str, ...]:
    """The table's columns (`shown_columns`), `ceiling` named "of spec" where every share in it is of the spec peak."""
    return tuple(OF_SPEC if c == "ceiling" and spec_only(p) else c
                 for c in (OP_COLUMNS[i] for i in shown_columns(p)))


def op_cells(op: OpRow, mark_spec: bool = False) -> tuple[str, ...]:
    """An op's row of the table, in OP_COLUMNS' order ('-': unknown); `mark_spec`: a share of the spec peak
    beside shares of a measured ceiling is marked with SPEC_MARK."""
    ceiling = fmt.percent(op.ceiling_fraction)
    if mark_spec and op.ceiling_fraction is not None and is_spec(op.ceiling):
        ceiling += SPEC_MARK
    return (op.name, op.category, calls(op.calls), ms(op.seconds), fmt.percent(op.share),
            f"{op.gflops_per_s:.1f}" if op.gflops_per_s is not None else "-", ceiling, op.bound or "-")


def table_cells(p: Profile, width: int | None = None) -> list[tuple[str, ...]]:
    """The op table's rows, their names shortened to what `width` leaves beside the other columns (each with
    its space and divider); None: whole."""
    mixed = not spec_only(p) and any(is_spec(op.ceiling) for op in p.ops)
    shown = shown_columns(p)
    rows = [tuple(cells[i] for i in shown) for cells in (op_cells(op, mark_spec=mixed) for op in p.ops)]
    if width is None or not rows:
        return rows
    names = labels([op.name for op in p.ops], name_room(p, rows, width))
    return [(names[op.name], *row[1:]) for op, row in zip(p.ops, rows)]


def name_room(p: Profile, rows: list[tuple[str, ...]], width: int) -> int:
    """What `width` leaves the op column beside the others: each its widest cell and one space of padding, and
    between two columns a divider."""
    others = sum(max(len(c), *(len(r[i]) for r in rows)) + 2 for i, c in enumerate(op_columns(p)) if i)
    return max(MIN_NAME, width - others - 1)


def unattributed_cells(p: Profile) -> tuple[str, ...] | None:
    """The table's row for the step's time no op explains (the host gap), named as such, in the columns shown;
    None where the trace did not give the step's span."""
    if p.host_gap is None:
        return None
    cells = (UNATTRIBUTED, "-", "-", ms(p.host_gap), fmt.percent(p.host_gap_share), "-", "-", "-")
    return tuple(cells[i] for i in shown_columns(p))


def host_gap_text(p: Profile) -> str:
    """'1.20 ms per step, 14.0% of the step: the device waited on the host', or why it is unknown."""
    if p.host_gap is None:
        return "unknown: the trace did not give the step's span"
    return f"{ms(p.host_gap)} ms per step, {fmt.percent(p.host_gap_share)} of the step: the device waited on the host"


def notes(p: Profile) -> list[str]:
    """What the table rests on: the steps traced, what traced them, the FLOPs, the raw trace."""
    out = [f"host gap: {host_gap_text(p)}",
           f"{UNATTRIBUTED}: the host gap, the step's time no op ran (on the host: Python between ops and the "
           "profiler's own bookkeeping)",
           f"a traced step: {ms(p.step_seconds)} ms (the median of {p.steps} traced after the timed ones, "
           f"by {p.profiler or '?'} on {p.where or '?'})"]
    out += [f"{v.code}: {v.message}" for v in p.verdicts if v.code == OVERHEAD]  # why it is not the steady step
    if p.no_flops:
        out.append(f"FLOPs unknown: {p.no_flops}")
    if p.ops and all(op.bytes is None for op in p.ops):
        out.append("bytes unknown: the trace counts no op's bytes, so no op's bound (compute or memory) is known")
    if p.against:
        out.append(f"ceilings: {p.against}")
    if spec_only(p):
        out.append(f"{OF_SPEC}: each op's share of the spec peak (no ceiling measured here: a roofline run "
                   "measures one)")
    elif any(is_spec(op.ceiling) for op in p.ops):
        out.append(f"{SPEC_MARK}: a share of the spec figure (no such ceiling measured here)")
    if p.trace_path:
        out.append(f"raw trace: {p.trace_path} (Perfetto or XProf open it: see docs/concepts/op-profile.md)")
    return out


def ops_table(p: Profile, title: str = "") -> Group:
    """The whole op table, one line an op at the width it is drawn in (a long name shortened in the middle),
    and its notes below it; `title` is plain text (an op's name, a run's workload: shown as written)."""
    return Group(OpTable(p, title), *(safe.text(line, "dim") for line in notes(p)))


@dataclass
class OpTable:
    """The op table, laid out when drawn: the op column takes what the others leave of the width."""

    profile: Profile
    title: str = ""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        p = self.profile
        t = Table(title=safe.markup(self.title) if self.title else None, box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, padding=(0, 1, 0, 0))
        for name in op_columns(p):
            t.add_column(name, overflow="fold", justify="left" if name in ("op", "category", "bound") else "right",
                         no_wrap=name != "op", min_width=8 if name == "op" else None)
        rows = table_cells(p, options.max_width)
        for op, cells in zip(p.ops, rows):
            t.add_row(*map(safe.text, cells), style="dim" if op.name == OTHER_OPS else None)
        last = unattributed_cells(p)
        if last is not None:  # the time no op explains, named, below the ops whose times it completes
            fits = len(UNATTRIBUTED) <= name_room(p, [*rows, last], options.max_width)
            t.add_row(*map(safe.text, (last[0] if fits else UNATTRIBUTED_SHORT, *last[1:])), style="dim italic")
        yield t


def op_line(op: OpRow, name: str | None = None) -> str:
    """'fusion.12 (matmul/conv): 41.0% of the step, 3.20 ms, 28.0% of the compute ceiling'; `name`: as
    printed (shortened)."""
    ceiling = f", {fmt.percent(op.ceiling_fraction)} of {op.ceiling or 'the ceiling'}" \
        if op.ceiling_fraction is not None else ""
    return f"{name or op.name} ({op.category}): {fmt.percent(op.share)} of the step, {ms(op.seconds)} ms{ceiling}"


def top_rows(p: Profile, n: int = TOP) -> list[tuple[str, str]]:
    """A run's summary of its profile: its top `n` ops (not the row that sums the rest), their names told
    apart in NAME_WIDTH, and the host gap."""
    ranked = sorted((o for o in p.ops if o.name != OTHER_OPS), key=lambda o: o.seconds, reverse=True)[:n]
    names = labels([op.name for op in ranked], NAME_WIDTH)
    return [*((f"op {i}", op_line(op, names[op.name])) for i, op in enumerate(ranked, 1)),
            ("host gap", host_gap_text(p))]


def profile_of(record: RunRecord) -> Profile:
    """The record's profile, or the one line that says how to get one (a UsageError: exit code 2)."""
    from tpulab.base.errors import UsageError

    if record.summary.profile is None:
        raise UsageError(NOT_PROFILED.format(id=record.short_id))
    return record.summary.profile


def write_csv(p: Profile, path: Path) -> None:
    """The op table alone: a header of OpRow's fields, then one line per op (unknown: empty)."""
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, CSV_FIELDS)
        out.writeheader()
        out.writerows({k: "" if v is None else v for k, v in asdict(op).items()} for op in p.ops)


# --- two profiles ------------------------------------------------------------------------------
@dataclass
class OpMove:
    """One op (or category) in both profiles: its time per step in A and in B, and its shares."""

    label: str
    matched: str  # "name", "category", or "" (the step, the host gap)
    a: float | None  # seconds per step (None: not among that profile's ops)
    b: float | None
    a_share: float | None
    b_share: float | None

    @property
    def delta(self) -> float | None:
        return self.b - self.a if self.a is not None and self.b is not None else None

    @property
    def share_change(self) -> float | None:
        return self.b_share - self.a_share if self.a_share is not None and self.b_share is not None else None


def summed(ops: list[OpRow]) -> tuple[float | None, float | None]:
    return (sum(o.seconds for o in ops), sum(o.share for o in ops)) if ops else (None, None)


def op_moves(a: Profile, b: Profile) -> list[OpMove]:
    """The ops of A and B matched by name, then what is left by category; the largest moves first, those
    on one side only after them; then the host gap and the step."""
    names_b = {o.name: o for o in b.ops}
    names_a = {o.name for o in a.ops}
    moves = [OpMove(o.name, "name", o.seconds, names_b[o.name].seconds, o.share, names_b[o.name].share)
             for o in a.ops if o.name in names_b]
    rest_a = [o for o in a.ops if o.name not in names_b]
    rest_b = [o for o in b.ops if o.name not in names_a]
    for cat in dict.fromkeys([*OP_CATEGORIES, *(o.category for o in rest_a + rest_b)]):
        in_a = [o for o in rest_a if o.category == cat]
        in_b = [o for o in rest_b if o.category == cat]
        if in_a or in_b:
            (ta, sa), (tb, sb) = summed(in_a), summed(in_b)
            moves.append(OpMove(f"{cat} ({len(in_a)}:{len(in_b)} ops)", "category", ta, tb, sa, sb))
    moves.sort(key=lambda m: (m.delta is None, -abs(m.delta or 0.0), -max(m.a or 0.0, m.b or 0.0)))
    return [*moves, OpMove("host gap", "", a.host_gap, b.host_gap, a.host_gap_share, b.host_gap_share),
            OpMove("the step", "", a.step_seconds, b.step_seconds, None, None)]


def move_cells(m: OpMove) -> tuple[str, ...]:
    delta = ms(m.delta, sign="+")
    change = f"{m.share_change * 100:+.1f} pt" if m.share_change is not None else "-"
    return (m.label, m.matched or "-", ms(m.a), ms(m.b), delta, change)


def run_label(r: RunRecord) -> str:
    return f"run {r.short_id} ({r.workload}, {r.backend}, {r.dtype})"


def moves_header(a: RunRecord, b: RunRecord) -> list[str]:
    return ["where the time moved (ms per step): ops matched by name, then by category",
            f"A: {run_label(a)}", f"B: {run_label(b)}"]


def moves_table(a: RunRecord, b: RunRecord) -> Group:
    """Two runs' profiles side by side (A the first): per op or category, A ms, B ms, the delta and the
    change of its share of the step, readable at 80 columns."""
    moves = op_moves(profile_of(a), profile_of(b))
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for name in MOVE_COLUMNS:
        t.add_column(name, overflow="fold", justify="left" if name in ("op or category", "matched") else "right",
                     no_wrap=name != "op or category")
    for m in moves:
        t.add_row(*map(safe.text, move_cells(m)), style="bold" if not m.matched else None)
    return Group(*(safe.text(line, "bold") for line in moves_header(a, b)), t)
