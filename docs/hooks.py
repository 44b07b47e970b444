"""The reference pages, generated from tpulab's own declarations at every `mkdocs build` (an mkdocs hook).

Nothing here is written by hand twice: every workload's parameters come from its `ParamSpec`s, every
command's flags from the argparse parser the command line builds, and the record's fields from the
classes that declare it (their comments read from the source). The pages exist only in the built site
(`mkdocs build`, `mkdocs serve`); `pages()` returns them for a test or a look without mkdocs.

A number a page quotes from the code is written as its constant's name, `{{ tpulab.base.noise.SEGMENTS }}`
(optionally formatted: `{{ tpulab.base.noise.NOISE | percent }}` gives 10%), and every page's placeholders are
replaced by the constants' values at build time (`substitute`): a name that no longer resolves fails the build,
naming the page and the placeholder.

This file imports tpulab; tpulab never imports it, nor mkdocs.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import io
import re
import sys
import tokenize
import typing
from pathlib import Path
from typing import Any, Callable, Iterable

ROOT = Path(__file__).resolve().parent.parent
# The picture of the lab: the Run tab after a replayed run at 80x24, written and checked by a snapshot test
# (tests/test_lab_keys.py), so it shows the lab as it is. The README links the same file.
LAB_PICTURE = ROOT / "tests" / "__snapshots__" / "test_lab_keys" / "test_snapshot_run_tab_after_a_run[charts].svg"
LAB_PICTURE_PAGE = "assets/lab.svg"


# --- markdown helpers -------------------------------------------------------------------------------
def cell(text: Any) -> str:
    """Text made safe for one cell of a markdown table."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(text: Any) -> str:
    text = str(text)
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    head = list(header)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out + [""]


def anchor(text: str) -> str:
    """The id Python-Markdown's toc gives a heading of this text (with its default slugify)."""
    import unicodedata

    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


GENERATED_NOTE = ("!!! note \"Generated\"\n    This page is written at every build from {what}: it cannot fall behind "
                  "the code. Edit the declarations, not this page.\n")


# --- workloads: their parameters ------------------------------------------------------------------
def own_workloads() -> dict[str, Any]:
    """tpulab's own workloads, by name (a plugin installed beside it is its own package's to document)."""
    from tpulab.workloads import registry

    return {name: w for name, w in registry().items() if type(w).__module__.startswith("tpulab.")}


def _shown(spec: Any, value: Any) -> str:
    try:
        return spec.show(value) or "none"
    except (TypeError, ValueError):
        return str(value)


def _backends(spec: Any) -> str:
    only = spec.only
    if not only:
        return "all"
    why = spec.why_not if isinstance(spec.why_not, str) else ""
    return ", ".join(only) + (f" ({why})" if why else "")


def _declared_items(items: Iterable[Any], words: str) -> list[str]:
    """A table of declared objects (a workload's metrics or figures): their plain fields, whatever the class."""
    items = list(items)
    if not items or not dataclasses.is_dataclass(items[0]):
        return []
    names = [f.name for f in dataclasses.fields(items[0])
             if all(isinstance(getattr(i, f.name, None), (str, int, float, bool, type(None))) for i in items)]
    if not names:
        return []
    return [words, ""] + table([n.replace("_", " ") for n in names],
                               ((code(v) if n in ("key", "name") else _plain(v) for n, v in
                                 ((n, getattr(i, n)) for n in names)) for i in items))


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "" if value is None else str(value)


def parameters_page() -> str:
    workloads = own_workloads()
    out = ["# Workload parameters", "",
           GENERATED_NOTE.format(what="each workload's `ParamSpec`s (`tpulab/workloads/`), the declarations "
                                 "the command line's flags, the lab's form and every check of a value come from"),
           "Every parameter is a flag of `tpulab run WORKLOAD` (the same as `tpulab --run WORKLOAD`), a field of the "
           "lab's form and a keyword of `tpulab.run(...)` in a notebook (its name with `_`). In "
           "[`tpulab sweep`](../how-to/sweeps.md) a parameter marked *list* takes a comma list, and a number a "
           "doubling range from its first value too (`16..1024`, `0.5..8`); one marked *one value* takes a single "
           "value for every point. "
           "`tpulab run WORKLOAD --help` prints the same on the terminal.", "",
           "A value outside its range is refused before anything runs: one line naming the parameter and what it "
           "allows, exit code 2. *Advanced* parameters sit under the form's advanced fields in the lab.", "",
           "| workload | what it is | presets |", "|---|---|---|"]
    for name, w in workloads.items():
        out.append(f"| [`{name}`](#{anchor(name + ': ' + w.title)}) | {cell(w.title)} | "
                   f"{cell(', '.join(w.presets) or '-')} |")
    out.append("")
    for name, w in workloads.items():
        out += [f"## {name}: {w.title}", "", " ".join(w.summary.split()), ""]
        out += table(["flag", "allowed", "default", "backends", "sweep", "what it sets"], (
            (code(s.flag) + (" *(advanced)*" if s.advanced else ""), s.allowed(),
             _shown(s, s.default) + (f" {s.unit}" if s.unit and s.kind is not bool else ""), _backends(s),
             "list" if getattr(s, "axis", True) else "one value", s.help)
            for s in w.params))
        for attr, words in (("figures", "**Figures** it reports (beside the step time and throughput):"),
                            ("metrics", "**Metrics** it reports (the framework's key, as its logs name it):")):
            out += _declared_items(getattr(w, attr, ()) or (), words)
        if w.presets:
            out += ["**Presets** (`--preset NAME`; each sets these values, the rest keep their defaults):", ""]
            specs = {s.name: s for s in w.params}
            out += table(["preset", "values"], (
                (code(p), ", ".join(f"{specs[k].flag if k in specs else k} {_shown(specs[k], v) if k in specs else v}"
                                    for k, v in values.items()) or "the defaults")
                for p, values in w.presets.items()))
    return "\n".join(out)


# --- commands: their flags -------------------------------------------------------------------------
def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """A parser's commands, in order: name, one-line help, parser."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # an alias names the same parser
                    seen.add(id(sub))
                    found.append((name, helps.get(name, ""), sub))
    return found


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return str(action.metavar or action.dest).upper() if action.metavar is None else str(action.metavar)
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    if action.metavar is not None:
        value = str(action.metavar)
    elif action.choices is not None:
        value = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        value = action.dest.upper()
    return ", ".join(f"{s} {value}" for s in action.option_strings)


def _help(action: argparse.Action) -> str:
    text = str(action.help) if action.help not in (None, argparse.SUPPRESS) else ""
    if action.choices is not None and not text:
        text = "one of " + ", ".join(str(c) for c in action.choices)
    text = text.replace("%(default)s", str(action.default)).replace("%%", "%")
    d = action.default
    if action.nargs != 0 and d not in (None, False, argparse.SUPPRESS) and "default" not in text:
        text = f"{text}; default {d}" if text else f"default {d}"
    return text


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    """The parser's arguments, the plain ones in one table, each titled group in its own."""
    out: list[str] = []
    plain: list[argparse.Action] = []
    titled: list[tuple[str, list[argparse.Action]]] = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions
                   if a.help is not argparse.SUPPRESS and not isinstance(a, argparse._SubParsersAction)
                   and a.dest != "help"]
        if group.title in (None, "options", "optional arguments", "positional arguments"):
            plain += actions
        elif actions:
            titled.append((group.title or "", actions))
    plain.sort(key=lambda a: bool(a.option_strings))  # positionals first, as the usage line has them
    for title, actions in [("", plain), *titled]:
        if not actions:
            continue
        if title:
            out += [f"*{title[0].upper() + title[1:]}*", ""]
        out += table(["argument", "what it does"], ((code(_flag(a)), _help(a)) for a in actions))
    return out


def _command(path: str, help_line: str, parser: argparse.ArgumentParser, depth: int) -> list[str]:
    out = ["#" * depth + f" {path}", ""]
    if help_line:
        out += [help_line[0].upper() + help_line[1:] + ("" if help_line.endswith(".") else "."), ""]
    if parser.description:
        out += [" ".join(parser.description.split()), ""]
    usage = " ".join(parser.format_usage().split()).replace("usage: ", "", 1)  # one line, whatever the terminal
    out += [f"```\n{usage}\n```", ""]
    out += _options_table(parser)
    for name, sub_help, sub in _subparsers(parser):
        out += _command(f"{path} {name}", sub_help, sub, min(depth + 1, 4))
    return out


def commands_page() -> str:
    from tpulab.cli.main import build_parser

    parser = build_parser()
    out = ["# Commands", "",
           GENERATED_NOTE.format(what="the command line's own argparse parser (`tpulab/cli/`)"),
           "`tpulab` alone opens [the lab](../how-to/lab.md). A workload's own parameters are flags too, after "
           "`tpulab run WORKLOAD` (or `tpulab --run WORKLOAD`) and `tpulab sweep WORKLOAD`: they are listed per "
           "workload in [Workload parameters](parameters.md). Exit codes: 0 ok, 1 the run failed (the message says "
           "why), 2 a bad command line or value, 130 cancelled (Ctrl+C).", "",
           "| command | what it does |", "|---|---|"]
    commands = _subparsers(parser)
    for name, help_line, _ in commands:
        out.append(f"| [`tpulab {name}`](#{anchor('tpulab ' + name)}) | {cell(help_line)} |")
    out += ["", "## tpulab", "", " ".join((parser.description or "").split()), "",
            "The options before a command (and of `--run WORKLOAD`, the headless run with `--no-ui`):", ""]
    out += _options_table(parser)
    for name, help_line, sub in commands:
        out += _command(f"tpulab {name}", help_line, sub, 2)
    return "\n".join(out)


# --- the record: its fields, with the comments that declare them -------------------------------------
def _is_record(cls: Any) -> bool:
    if not inspect.isclass(cls) or not cls.__module__.startswith("tpulab."):
        return False
    return (dataclasses.is_dataclass(cls) or hasattr(cls, "__struct_fields__")  # msgspec
            or hasattr(cls, "model_fields"))  # pydantic


def _field_names(cls: Any) -> list[str]:
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    if hasattr(cls, "__struct_fields__"):
        return list(cls.__struct_fields__)
    if hasattr(cls, "model_fields"):
        return list(cls.model_fields)
    return [n for c in reversed(cls.__mro__) for n in getattr(c, "__annotations__", {})]


class Declared(typing.NamedTuple):
    """One field as its class's source declares it."""

    type: str
    default: str
    comment: str


def _declared(cls: Any) -> dict[str, Declared]:
    """Each annotated name of a class body: its annotation, default and comment, as written (the class's
    bases first, so that a subclass's own declaration wins)."""
    found: dict[str, Declared] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("tpulab."):
            continue
        try:
            lines, first = inspect.getsourcelines(klass)
        except (OSError, TypeError):
            continue
        source = "".join(lines)
        body = ast.parse(inspect.cleandoc("\n" + source) if source[:1].isspace() else source).body[0]
        comments: dict[int, str] = {}  # line -> its comment
        alone: set[int] = set()  # lines that hold a comment and nothing else
        code_lines: set[int] = set()
        try:
            for tok in tokenize.generate_tokens(io.StringIO(source).readline):
                if tok.type == tokenize.COMMENT:
                    comments[tok.start[0]] = tok.string.lstrip("#").strip()
                elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                      tokenize.ENDMARKER):
                    code_lines.add(tok.start[0])
        except (tokenize.TokenError, IndentationError):
            pass
        alone = {n for n in comments if n not in code_lines}
        statements = [s for s in getattr(body, "body", []) if isinstance(s, ast.stmt)]
        for i, node in enumerate(statements):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            annotation = ast.unparse(node.annotation)
            if annotation.startswith(("ClassVar", "typing.ClassVar")):
                continue
            end = node.end_lineno or node.lineno
            words = [comments[n] for n in range(node.lineno, end + 1) if n in comments and n not in alone]
            if words:  # a trailing comment goes on over the comment-only lines below it
                n = end + 1
                while n in alone:
                    words.append(comments[n])
                    n += 1
            else:  # else the comment-only lines just above are its own, unless they go on from the field before
                above: list[str] = []
                n = node.lineno - 1
                while n in alone:
                    above.insert(0, comments[n])
                    n -= 1
                before = statements[i - 1] if i else None
                owned = not (before is not None and (before.end_lineno or 0) == n
                             and any(k in comments and k not in alone
                                     for k in range(before.lineno, (before.end_lineno or before.lineno) + 1)))
                words = above if owned else []
            default = ast.unparse(node.value) if node.value is not None else ""
            if default.startswith(("field(", "dataclasses.field(", "msgspec.field(")):
                call = node.value
                for kw in call.keywords if isinstance(call, ast.Call) else []:
                    if kw.arg == "default":
                        default = ast.unparse(kw.value)
                    elif kw.arg == "default_factory":
                        default = {"list": "[]", "dict": "{}"}.get(ast.unparse(kw.value), ast.unparse(kw.value) + "()")
            found[node.target.id] = Declared(annotation, default, " ".join(words))
    return found


def _doc(cls: Any) -> str:
    try:
        node = ast.parse(inspect.cleandoc("\n" + inspect.getsource(cls))).body[0]
    except (OSError, TypeError, SyntaxError):
        return ""
    doc = ast.get_docstring(node) if isinstance(node, ast.ClassDef) else None
    return " ".join((doc or "").split())


def _nested(cls: Any) -> list[Any]:
    """The record-like classes a class's fields hold, in field order."""
    module = sys.modules.get(cls.__module__)
    try:
        hints: dict[str, Any] = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an annotation that names what only TYPE_CHECKING imports: read each alone
        hints = {}
        for name, d in _declared(cls).items():
            try:
                hints[name] = eval(d.type, dict(vars(module)) if module else {})  # noqa: S307 - its own source
            except Exception:  # noqa: BLE001
                continue
    found: list[Any] = []

    def walk(t: Any) -> None:
        if _is_record(t):
            if t not in found:
                found.append(t)
            return
        for arg in typing.get_args(t):
            walk(arg)

    for name in _field_names(cls):
        if name in hints:
            walk(hints[name])
    return found


def _class_section(cls: Any, heading: str, skip: Callable[[str], bool] = lambda _: False) -> list[str]:
    declared = _declared(cls)
    out = [heading, ""]
    if doc := _doc(cls):
        out += [doc, ""]
    rows = []
    for name in _field_names(cls):
        if skip(name):
            continue
        d = declared.get(name, Declared("", "", ""))
        rows.append((code(name), code(d.type) if d.type else "", code(d.default) if d.default else "required",
                     d.comment))
    if not rows:
        return out + ["No fields of its own.", ""]
    return out + table(["field", "type", "default", "meaning"], rows)


def _tree(roots: Iterable[Any]) -> list[Any]:
    """Every record-like class reachable from the roots, each once, breadth first."""
    order: list[Any] = []
    queue = list(roots)
    while queue:
        cls = queue.pop(0)
        if cls in order:
            continue
        order.append(cls)
        queue += [c for c in _nested(cls) if c not in order]
    return order


def record_page() -> str:
    events = importlib.import_module("tpulab.base.events")
    root_names = ("RunRecord", "SweepRecord")
    roots = [getattr(events, n) for n in root_names if hasattr(events, n)]
    schema = getattr(events, "SCHEMA", None)
    out = ["# The record", "",
           GENERATED_NOTE.format(what="the classes that declare a run's record, its events and a machine card "
                                 "(`tpulab/base/events.py`, `tpulab/engine/card.py`), with the comments beside "
                                 "their fields"),
           f"A run's record is kept in the store as JSON (schema {schema}; records of older schemas still read) and "
           "is what `tpulab results export` writes, `tpulab results show ID --json` prints and the last line of a "
           "headless `--json` run holds (`event: result`). [JSON output](json-output.md) says how the events and "
           "the exports are laid out. Unknown is `null`; a field a newer tpulab adds is ignored by an older one.", ""]
    record_classes = _tree(roots)
    out += ["| class | where it sits |", "|---|---|"]
    holders: dict[Any, str] = {}
    for cls in record_classes:
        for inner in _nested(cls):
            holders.setdefault(inner, cls.__name__)
    for cls in record_classes:
        where = f"inside `{holders[cls]}`" if cls in holders else "a record of its own"
        out.append(f"| [`{cls.__name__}`](#{anchor(cls.__name__)}) | {where} |")
    out.append("")
    for cls in record_classes:
        out += _class_section(cls, f"## {cls.__name__}")
    event_classes: dict[str, Any] = getattr(events, "EVENTS", {})
    if event_classes:
        out += ["## Events", "",
                "A headless run with `--json` prints one JSON object per line, one per event: its `event` is the "
                "name below, and the fields are the class's. Every event carries `t` (Unix time, set by the "
                "worker) and `synthetic` (true on every event of a run on random stand-in data).", ""]
        base_fields = set()
        base = getattr(events, "Event", None)
        if base is not None:
            base_fields = set(_field_names(base))
        shown = set(record_classes)
        for name, cls in event_classes.items():
            out += _class_section(cls, f"### `{name}` ({cls.__name__})", skip=lambda f: f in base_fields)
            shown.add(cls)
        extra = [c for c in _tree(event_classes.values()) if c not in shown]
        for cls in extra:
            out += _class_section(cls, f"### {cls.__name__}")
    try:
        card = importlib.import_module("tpulab.engine.card")
    except ImportError:
        card = None
    if card is not None and hasattr(card, "Card"):
        out += ["## The machine card", "",
                f"`tpulab bench` writes one card; `tpulab cards export` and `tpulab bench -o card.json` write it as "
                f"JSON, with `format: \"{getattr(card, 'FORMAT', 'tpulab-card')}\"` and `schema: "
                f"{getattr(card, 'SCHEMA', '?')}`. The [machine card](../concepts/machine-card.md) says what each "
                "part means.", ""]
        for cls in _tree([card.Card]):
            if cls not in record_classes:
                out += _class_section(cls, f"### {cls.__name__}")
    if card is not None and hasattr(card, "Fleet"):
        out += ["## The fleet", "",
                "`tpulab bench --ray` keeps one fleet: the cards of every node of a Ray cluster, and the nodes that "
                "gave none with why. The [fleet card](../concepts/fleet.md) says what each part means.", ""]
        shown_cards = set(_tree([card.Card]))
        for cls in _tree([card.Fleet]):
            if cls not in record_classes and cls not in shown_cards:
                out += _class_section(cls, f"### {cls.__name__}")
    return "\n".join(out)


# --- the constants a page quotes ---------------------------------------------------------------------
# `{{ tpulab.module.NAME }}` or `{{ tpulab.module.NAME.attribute | format }}` (not `${{ ... }}`, a CI file's)
PLACEHOLDER = re.compile(r"(?<!\$)\{\{\s*([\w.]+)\s*(?:\|\s*(\w+)\s*)?\}\}")


def _number(value: Any) -> str:
    """A value as prose writes it: 5.0 as 5, 0.5 as 0.5, 1e6 as 1000000."""
    return f"{value:.12g}" if isinstance(value, float) else str(value)


def _bytes(value: Any) -> str:
    """A size in its largest binary unit that keeps it at 1 or more: 1 << 30 as 1 GiB, 256 << 20 as 256 MiB."""
    for power, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if value >= 2**power:
            return f"{_number(value / 2**power)} {unit}"
    return f"{value} B"


FORMATS: dict[str, Callable[[Any], str]] = {
    "percent": lambda v: _number(v * 100) + "%",  # a fraction: 0.1 as 10%
    "comma": lambda v: f"{v:,}",  # 1000 as 1,000
    "minutes": lambda v: _number(v / 60),  # seconds in minutes: 180.0 as 3
    "bytes": _bytes,
}


class StaleConstant(ValueError):
    """A placeholder whose name, attribute or format does not resolve: the page quotes what the code no longer has."""


def constant(name: str, form: str | None = None) -> str:
    """The text a placeholder stands for: the value of `name` (a module of tpulab, then attributes), formatted."""
    if not name.startswith("tpulab."):
        raise StaleConstant("only tpulab's own constants are quoted: tpulab.module.NAME")
    if form is not None and form not in FORMATS:
        raise StaleConstant(f"no format {form!r} (one of {', '.join(FORMATS)})")
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):  # the longest module, then attributes
        module = ".".join(parts[:i])
        try:
            value: Any = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and (module == e.name or module.startswith(e.name + ".")):
                continue  # not a module: fewer of the parts are
            raise StaleConstant(f"importing {module} failed: {e}") from e
        for j in range(i, len(parts)):
            if not hasattr(value, parts[j]):
                raise StaleConstant(f"{'.'.join(parts[:j])} has no {parts[j]!r}")
            value = getattr(value, parts[j])
        return FORMATS[form](value) if form else _number(value)
    raise StaleConstant(f"no module of {name}")


def substitute(text: str, page: str = "") -> str:
    """A page's markdown with every placeholder replaced by its constant; StaleConstant, naming the page and the
    placeholder, where one does not resolve."""

    def value(match: re.Match[str]) -> str:
        try:
            return constant(match[1], match[2])
        except StaleConstant as e:
            raise StaleConstant(f"{page or 'a page'}: {match[0]}: {e}") from e

    return PLACEHOLDER.sub(value, text)


# --- the hook ----------------------------------------------------------------------------------------
GENERATED: dict[str, Callable[[], str]] = {
    "reference/parameters.md": parameters_page,
    "reference/commands.md": commands_page,
    "reference/record.md": record_page,
}


def pages() -> dict[str, str]:
    """Every generated page, by its path under docs/."""
    return {path: make() for path, make in GENERATED.items()}


def on_files(files: Any, config: Any) -> Any:
    """mkdocs: add the generated pages, and the lab's picture, to the site's files."""
    from mkdocs.structure.files import File

    for path, text in pages().items():
        if (old := files.get_file_from_path(path)) is not None:
            files.remove(old)
        files.append(File.generated(config, path, content=text))
    if LAB_PICTURE.exists():
        files.append(File.generated(config, LAB_PICTURE_PAGE, abs_src_path=str(LAB_PICTURE)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """mkdocs: every page's placeholders replaced by the constants they name; a stale one stops the build."""
    from mkdocs.exceptions import PluginError

    try:
        return substitute(markdown, page.file.src_uri)
    except StaleConstant as e:
        raise PluginError(f"a quoted constant is stale: {e}") from e
