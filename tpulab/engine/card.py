"""The machine card as data: what one bench found on one machine, in a versioned JSON form meant to be shared.

The schema (`SCHEMA`, documented in docs/concepts/machine-card.md) is these dataclasses: a card read
from a file is checked field by field against their annotations (`tpulab.base.schema.checked`) before anything
reads it, so a hostile card imports as text or is refused in one line. Every rate on a card is "higher is
better"; a figure no run measured is None, never 0. `scrubbed` leaves the host name, the user name and home
paths out of a card before it leaves the machine (an export, `-o FILE`); kept cards hold them as measured.

Noise is not a finding: an entry keeps its timed steps (each repeat's, thinned evenly to at most `KEPT` numbers
in all), so that a comparison works from both cards' samples, and its median's interval; a card keeps how far
the machine's ceilings drifted between its start and its end. Cards written before either read as cards
without them (every field added since has a default).
"""

from __future__ import annotations

import getpass
import json
import math
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tpulab.base.events import JSON
from tpulab.base.schema import CONFIG, build, checked, plain

FORMAT = "tpulab-card"
SCHEMA = 1
MAX_CARD_BYTES = 4 * 2**20  # a card is a few KiB: a larger file is refused before it is read
STATUSES = ("ok", "failed", "cancelled", "skipped")
KEPT = 240  # an entry's timed steps kept on the card, all repeats together: a few KiB, enough for an interval


@dataclass(kw_only=True)
class Op:
    name: str
    category: str = "other"
    share: float | None = None  # of the traced step


@dataclass(kw_only=True)
class CardEntry:
    """One headline figure: its median and spread (p10-p90 of n timed steps), how near its ceiling it came,
    what bounds it, and the run that measured it with the command that measures it again."""

    name: str  # the suite's headline: conv, resnet50-train, decode-b8 ...
    workload: str
    backend: str
    status: str  # one of STATUSES
    reason: str | None = None  # why it failed or was skipped: one line
    device: str | None = None  # what it ran on: 'cpu: Intel Xeon ...'
    devices: int | None = None  # the devices its run spread over (a `--devices all` entry); None: one
    scaling: float | None = None  # its median over the same entry's on one device (a `--devices all` entry)
    unit: str | None = None
    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    n: int | None = None
    cv: float | None = None  # the timed steps' coefficient of variation
    low: float | None = None  # the median's 95% interval (`tpulab.base.noise`), over the repeats where there are
    high: float | None = None  # several; None: too few steps
    repeats: int | None = None  # alike runs whose steps make the figures (None: a card from before repeats)
    samples: list[list[float]] = field(default_factory=list)  # each repeat's timed step seconds, in order, thinned
    disturbed: str | None = None  # other work used the machine while a run of it was timed: which, and how much
    ceiling_kind: str = "compute"  # which ceiling bounds it: compute (matmul) or memory (bandwidth)
    ceiling_fraction: float | None = None  # of this card's measured ceiling
    spec_fraction: float | None = None  # of the vendor's figure
    bound: str | None = None  # compute, memory or host
    host_gap_share: float | None = None
    top_ops: list[Op] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    stopped: str | None = None  # why measuring stopped: 'stable: ...' or 'budget: ...'
    seconds: float | None = None  # wall time the entry took, its runs together
    params: dict[str, JSON] = field(default_factory=dict)  # as run
    run_id: str | None = None  # its first run
    runs: list[str] = field(default_factory=list)  # every run its figures come from (its repeats), first first
    command: str | None = None
    article: str | None = None  # the article's entry it matches
    artifact: str | None = None  # a published figure that measured something else, and what
    reference: str | None = None  # a reference engine's line (llama.cpp's): the entry it stands beside ('decode-b1')
    variant: str | None = None  # ... and what sets that line apart: its weights' format ('q4_0')


@dataclass(kw_only=True)
class CardCeiling:
    device: str
    kind: str  # compute or memory
    dtype: str  # the matmul's, or 'memory'
    value: float  # FLOP/s or bytes/s
    unit: str  # FLOP/s, B/s
    source: str  # the roofline run and size, or the vendor's sheet
    measured: bool = True  # False: a spec figure (the published reference cards)
    run_id: str | None = None
    reused: str | None = None  # kept from an earlier card's roofline, and why that was allowed


@dataclass(kw_only=True)
class CardDrift:
    """One ceiling (the matmul's FLOP/s or the copy's bytes/s) measured by the same short roofline at the start
    and at the end of a backend's part of the card: how far the machine itself moved while the card ran."""

    backend: str
    kind: str  # compute or memory
    dtype: str  # the matmul's, or 'memory'
    unit: str  # FLOP/s, B/s
    start: float | None = None
    end: float | None = None
    runs: list[str] = field(default_factory=list)  # the two rooflines
    why: str | None = None  # why there is no start or no end

    def change(self) -> float | None:
        """end / start - 1: +0.03 is 3% faster at the end; None where either was not measured."""
        return self.end / self.start - 1 if self.start and self.end else None

    def words(self) -> str:
        """'float32 matmul +1.2%', 'copy -3.4%', or 'copy not measured (at the end: ...)'."""
        what = "copy" if self.kind == "memory" else f"{self.dtype} matmul"
        moved = self.change()
        return f"{what} {moved:+.1%}" if moved is not None else f"{what} not measured ({self.why or 'no figure'})"


@dataclass(kw_only=True)
class CardSuite:
    name: str
    version: int
    quick: bool


@dataclass(kw_only=True)
class CardNode:
    """The cluster node a fleet's card was made on (`tpulab bench --ray`), as Ray knows it: its fingerprint."""

    fleet: str  # the fleet's id: every card of one `tpulab bench --ray` holds it
    label: str  # the node's name in the fleet's lines and columns: its address and its place ('10.0.0.5 #2')
    node_id: str  # Ray's id of the node
    address: str  # the node's IP address (Ray's NodeManagerAddress): nodes of one address share a host
    hostname: str | None = None
    resources: dict[str, float] = field(default_factory=dict)  # what the node declares to Ray (CPU, GPU, memory...)
    labels: dict[str, str] = field(default_factory=dict)  # the node's Ray labels


@dataclass(kw_only=True)
class Card:
    id: str
    created_at: str
    suite: CardSuite
    machine: dict[str, JSON]
    format: str = FORMAT
    schema: int = SCHEMA
    ended_at: str | None = None
    status: str = "complete"  # complete, incomplete (its budget left entries out), partial (stopped by the user),
    # failed (an entry failed)
    backends: list[str] = field(default_factory=list)
    ceilings: list[CardCeiling] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # 'float32' / 'memory' -> why no ceiling was set
    noisy: str | None = None  # other processes took more than a quarter of the machine: by how much
    load: float | None = None  # other processes' cores, the most any entry saw
    wall_s: float | None = None
    budget_s: float | None = None  # the whole card's: each backend's, and its reference lines'
    published: str | None = None  # a reference card: where its figures were published (not measured here)
    drift: list[CardDrift] = field(default_factory=list)  # its ceilings at its start and at its end
    references: dict[str, str] = field(default_factory=dict)  # a reference engine not installed (its backend's
    # name): what its lines would add, and how to install it
    node: CardNode | None = None  # a fleet's card: the node it was made on (None: a card of this machine)
    entries: list[CardEntry] = field(default_factory=list)
    __pydantic_config__: ClassVar[dict[str, Any]] = CONFIG

    @property
    def short_id(self) -> str:
        """The first 8 characters of a measured card's id; a reference card's whole name ('article-k80')."""
        return self.id if self.published else self.id[:8]

    def to_json(self) -> dict[str, Any]:
        return plain(self)

    def ceiling(self, kind: str, device: str | None = None, dtype: str = "float32") -> CardCeiling | None:
        """The ceiling of this kind (compute: the dtype's matmul) on `device` (None: the card's first)."""
        wanted = "memory" if kind == "memory" else dtype
        return next((c for c in self.ceilings if c.dtype == wanted and (device is None or c.device == device)), None)

    def drifted(self) -> float | None:
        """The most any of its ceilings moved from its start to its end, as a factor less one, either way (0.04:
        4% faster or slower at the end); None where none was measured at both. A difference from another card
        within it may be the machine's, not the work's."""
        moved = [max(1 + c, 1 / (1 + c)) - 1 for c in (d.change() for d in self.drift) if c is not None and c > -1]
        return max(moved) if moved else None

    def drift_words(self) -> str:
        """'float32 matmul +1.2%, copy -3.4%' from its start to its end ('(jax)' after each where several backends
        ran); '' where the card has no drift probe."""
        several = len({d.backend for d in self.drift}) > 1
        return ", ".join(d.words() + (f" ({d.backend})" if several else "") for d in self.drift)

    def which(self) -> str:
        """Its label and, for a measured card, its id: 'Intel Xeon (2 threads) [c0ffee00]' (two cards of one
        machine are told apart)."""
        return self.label() if self.published else f"{self.label()} [{self.short_id}]"

    def label(self) -> str:
        """'Intel Xeon @ 2.20GHz (2 threads)', or a reference card's own name."""
        m = self.machine
        return str(m.get("label") or m.get("cpu", {}).get("model") or self.short_id)

    @property
    def exit_code(self) -> int:
        return {"complete": 0, "incomplete": 0, "failed": 1, "partial": 130}.get(self.status, 1)


def from_json(data: Any) -> Card:
    """A card from its JSON object; a `ValueError` names the field that is wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a tpulab card (no \"format\": \"{FORMAT}\")")
    schema = data.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool) or schema > SCHEMA:
        raise ValueError(f"card schema {schema!r}: this tpulab reads schema {SCHEMA} and older")
    card = checked(data, Card)
    bad = next((e.status for e in card.entries if e.status not in STATUSES), None)
    if bad is not None:
        raise ValueError(f"entry status {bad[:40]!r} is not one of {', '.join(STATUSES)}")
    return card


def read(path: Path) -> Card:
    """A card file; a `ValueError` in one line for anything else."""
    return from_json(parsed(path))


def parsed(path: Path, limit: int = MAX_CARD_BYTES, what: str = "a card's") -> Any:
    """A card's (or a fleet's) file as JSON, refused in one line (`ValueError`) past `limit` bytes, as text that is
    not UTF-8, or nesting too deep."""
    size = path.stat().st_size
    if size > limit:
        raise ValueError(f"{size / 2**20:.0f} MiB, more than {what} {limit // 2**20} MiB")
    try:
        return json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text ({e.reason})") from None
    except RecursionError:
        raise ValueError("it nests too deep") from None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a figure")


def scrubbed(card: Card, environ: dict[str, str] | None = None) -> Card:
    """The card with the host name, the user name and home paths written as <host>, <user> and ~ in every string
    (its commands, its errors, the machine): what leaves this machine."""
    env = os.environ if environ is None else environ
    home = env.get("HOME") or str(Path.home())
    user = env.get("USER") or _user()
    pairs = [(re.escape(home), "~")] if home and home != "/" else []
    pairs += [(rf"\b{re.escape(name)}\b", word) for name, word in ((socket.gethostname(), "<host>"), (user, "<user>"))
              if len(name) > 1 and name != "root"]  # whole words: a host named 'vm' leaves 'llvm' alone
    pairs += [(r"/home/[^/\s'\"]+", "~"), (r"/Users/[^/\s'\"]+", "~")]
    pattern = re.compile("|".join(f"({p})" for p, _ in pairs))
    words = [b for _, b in pairs]

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(lambda m: words[m.lastindex - 1] if m.lastindex else m.group(), value)
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return build(Card, clean(card.to_json()))


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


def kept(repeats: list[list[float]], most: int = KEPT) -> list[list[float]]:
    """Each repeat's step times thinned evenly to its share of `most` in all (its order kept), in 6 significant
    digits: what a card keeps for comparisons. A thinned sample gives a wider interval, never a narrower one."""
    total = sum(len(r) for r in repeats)
    out = []
    for r in repeats:
        k = len(r) if total <= most else max(1, most * len(r) // total)
        picks = [r[round(i * (len(r) - 1) / (k - 1))] for i in range(k)] if k > 1 else r[:k]
        out.append([float(f"{x:.6g}") for x in picks])
    return out


def finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


# --- fleets: one card on every node of a cluster (`tpulab bench --ray`) ------------------------------------
FLEET_FORMAT = "tpulab-fleet"
FLEET_SCHEMA = 1
NODE_STATUSES = ("ok", "failed", "cancelled", "skipped")


@dataclass(kw_only=True)
class FleetNode:
    """One node of a fleet: its card's id, or why it has none (it died, it never started, it was cancelled)."""

    label: str  # '10.0.0.5 #2': its address and its place among the fleet's nodes
    node_id: str  # Ray's id of the node
    address: str  # its IP address: nodes of one address share a host, and their cards ran one after another
    status: str  # one of NODE_STATUSES: ok (its card came back, whole or partial), failed, cancelled, skipped
    card: str | None = None  # its card's id (kept in the cards table)
    reason: str | None = None  # why it has no card, or why its card is not whole: one line
    cpus: float | None = None  # the CPUs the node declares, which its card ran on
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    seconds: float | None = None  # from its card's start on the node to its card back


@dataclass(kw_only=True)
class Fleet:
    """A fleet: the cards one `tpulab bench --ray` made, one per node, and the nodes that gave none, with why."""

    id: str
    created_at: str
    cluster: str  # the address it was asked of ('auto', 'ray://head:10001')
    suite: CardSuite
    format: str = FLEET_FORMAT
    schema: int = FLEET_SCHEMA
    ended_at: str | None = None
    status: str = "running"  # running, complete, partial (stopped by the user), failed (a node or an entry failed)
    backend: str = "auto"  # as asked: each node resolves it
    budget_s: float | None = None  # each node's, per backend
    nodes: list[FleetNode] = field(default_factory=list)
    schedule: list[str] = field(default_factory=list)  # which cards ran at once and which one after another, and why
    wall_s: float | None = None  # from the first card asked for to the last kept
    slowest_s: float | None = None  # the longest a host took for its cards, one after another: what the fleet waits on
    __pydantic_config__: ClassVar[dict[str, Any]] = CONFIG

    @property
    def short_id(self) -> str:
        return self.id[:8]

    def to_json(self) -> dict[str, Any]:
        return plain(self)

    @property
    def exit_code(self) -> int:
        return {"complete": 0, "failed": 1, "partial": 130}.get(self.status, 1)


def fleet_from_json(data: Any) -> Fleet:
    """A fleet from its JSON object; a `ValueError` names the field that is wrong."""
    if not isinstance(data, dict) or data.get("format") != FLEET_FORMAT:
        raise ValueError(f"not a tpulab fleet (no \"format\": \"{FLEET_FORMAT}\")")
    schema = data.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool) or schema > FLEET_SCHEMA:
        raise ValueError(f"fleet schema {schema!r}: this tpulab reads schema {FLEET_SCHEMA} and older")
    return checked(data, Fleet)
