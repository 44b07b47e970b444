"""The README is a front page, and the documentation cannot fall behind the code.

The reference pages are generated from the declarations by `docs/hooks.py` at every `mkdocs build`
(`make check` builds the site with --strict); these tests read the same pages without mkdocs.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote

import pytest

from tpulab.workloads import registry

from .helpers import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tpulab_docs_hooks", DOCS / "hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pages(hooks) -> dict[str, str]:
    return hooks.pages()


def links(path: Path) -> list[str]:
    """The relative targets of a markdown file's links and images, without their anchors."""
    found = re.findall(r"\]\(([^)\s]+)\)", path.read_text())
    return [unquote(t.split("#")[0]) for t in found if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def own() -> dict:
    return {name: w for name, w in registry().items() if type(w).__module__.startswith("tpulab.")}


def test_the_readme_is_a_front_page():
    assert len(README.read_bytes()) <= 10 * 1024, "the README is the front page: put the rest in docs/"


def test_the_readme_shows_the_lab_as_a_snapshot_test_draws_it(hooks):
    pictures = [t for t in links(README) if t.endswith(".svg")]
    assert pictures, "the README shows a picture of the lab"
    for picture in pictures:
        path = ROOT / picture
        assert path.is_file(), picture
        assert path.parent.parent == ROOT / "tests" / "__snapshots__", "a test writes it, so it never goes stale"
    assert hooks.LAB_PICTURE.is_file() and hooks.LAB_PICTURE == ROOT / pictures[0]  # the site shows the same one


@pytest.mark.parametrize("page", [README, ROOT / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_between_the_pages_leads_to_a_file(page, hooks):
    generated = {DOCS / path for path in hooks.GENERATED} | {DOCS / hooks.LAB_PICTURE_PAGE}
    for target in links(page):
        path = (page.parent / target).resolve()
        assert path.exists() or path in generated, f"{page.name}: {target}"


def readme_commands() -> list[list[str]]:
    """Each `tpulab ...` command of the README's shell blocks, as its arguments."""
    text = README.read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["tpulab"]:
                commands.append(words[1:])
    return commands


def test_the_readme_shows_the_first_commands():
    shown = [" ".join(c) for c in readme_commands()]
    for start in ("detect", "bench --quick", "run conv --no-ui", "results", "run model --no-ui"):
        assert any(c.startswith(start) for c in shown), start
    models = " ".join(shown)
    assert "examples/models/mlp.py:build" in models and "examples/models/torch_mlp.py:build" in models


@pytest.mark.parametrize("argv", readme_commands(), ids=" ".join)
def test_every_command_the_readme_shows_parses(argv):
    from tpulab.cli.main import _workload_named, build_parser, run_as_option

    if "--help" in argv:
        argv = [a for a in argv if a != "--help"]
    argv = run_as_option(argv)
    name = _workload_named(argv)
    args = build_parser(name, argv).parse_args(argv)  # a bad one exits 2, naming it
    if name:  # and each value a parameter is given is one it allows
        specs = {spec.name: spec for spec in registry()[name].params}
        for param in getattr(args, "workload_params", ()):
            raw = getattr(args, param, None)
            for value in ([] if raw is None else str(raw).split(",") if argv[0] == "sweep" else [raw]):
                specs[param].parse(value.split("..")[0] if isinstance(value, str) else value)


def test_every_example_model_the_readme_names_exists():
    for path in re.findall(r"examples/models/\w+\.py", README.read_text()):
        assert (ROOT / path).is_file(), path


def test_the_reference_lists_every_workload_parameter_with_its_range_and_default(pages):
    page = pages["reference/parameters.md"]
    for name, w in own().items():
        section = page.split(f"## {name}: ", 1)[1].split("\n## ", 1)[0]
        for spec in w.params:
            row = next((line for line in section.splitlines() if line.startswith(f"| `{spec.flag}`")), None)
            assert row is not None, f"{name} {spec.flag}"
            assert spec.allowed().replace("|", "\\|") in row and spec.show(spec.default) in row, row
        for preset in w.presets:
            assert f"| `{preset}` |" in section, f"{name} preset {preset}"


def test_every_workload_is_described_by_hand_too():
    described = (DOCS / "reference" / "workloads.md").read_text()
    for name in own():
        assert f"| `{name}` |" in described, f"add {name} to docs/reference/workloads.md's table"


def test_the_reference_lists_every_command_and_flag(pages):
    from tpulab.cli.main import build_parser

    page = pages["reference/commands.md"]

    def walk(parser, path):
        assert f"# {path}\n" in page, path
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help") and action.help is not argparse.SUPPRESS:
                    assert f"`{option}" in page or f", {option}" in page, f"{path} {option}"
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")

    walk(build_parser(), "tpulab")


def test_the_reference_lists_every_field_of_the_record_with_its_comment(pages, hooks):
    from tpulab.base import events

    page = pages["reference/record.md"]
    classes = hooks._tree([events.RunRecord, events.SweepRecord])
    assert {"RunRecord", "Summary", "Device"} <= {c.__name__ for c in classes}
    for cls in classes:
        assert f"## {cls.__name__}\n" in page, cls.__name__
        section = page.split(f"## {cls.__name__}\n", 1)[1].split("\n## ", 1)[0]
        for name in hooks._field_names(cls):
            assert f"| `{name}` |" in section, f"{cls.__name__}.{name}"
    summary = page.split("## Summary\n", 1)[1].split("\n## ", 1)[0]
    meanings = [row.rsplit("|", 2)[1].strip() for row in summary.splitlines() if row.startswith("| `")]
    assert sum(bool(m) for m in meanings) > len(meanings) / 2, "the comments beside the fields are their meaning"


def test_tpulab_never_imports_mkdocs():
    for path in (ROOT / "tpulab").rglob("*.py"):
        for line in path.read_text().splitlines():
            assert not (line.lstrip().startswith(("import ", "from ")) and "mkdocs" in line), path


def test_a_placeholder_gives_its_constants_value(hooks):
    from tpulab.base import noise
    from tpulab.workloads.base import PROFILE_STEPS

    assert hooks.substitute("cut into {{ tpulab.base.noise.SEGMENTS }} stretches") == f"cut into {noise.SEGMENTS} stretches"
    assert hooks.substitute("±{{tpulab.base.noise.NOISE|percent}}") == f"±{noise.NOISE * 100:g}%"
    assert hooks.substitute("{{ tpulab.base.noise.MAX_SAMPLES | comma }}") == f"{noise.MAX_SAMPLES:,}"
    assert hooks.substitute("{{ tpulab.workloads.base.PROFILE_STEPS.default }}") == str(PROFILE_STEPS.default)
    assert hooks.FORMATS["percent"](0.1) == "10%" and hooks.FORMATS["percent"](0.95) == "95%"
    assert hooks.FORMATS["minutes"](180.0) == "3" and hooks.FORMATS["comma"](1000) == "1,000"
    assert hooks.FORMATS["bytes"](1 << 30) == "1 GiB" and hooks.FORMATS["bytes"](64 * 2**20) == "64 MiB"
    assert hooks._number(5.0) == "5" and hooks._number(0.5) == "0.5" and hooks._number(1e6) == "1000000"  # as prose
    assert hooks.substitute("`${{ matrix.python }}`") == "`${{ matrix.python }}`"  # a CI file's, not a placeholder


@pytest.mark.parametrize("placeholder", ["{{ tpulab.base.noise.NO_SUCH_CONSTANT }}", "{{ tpulab.base.no_such_module.X }}",
                                         "{{ tpulab.base.noise.NOISE | no_such_format }}", "{{ noise.NOISE }}"])
def test_a_stale_placeholder_fails_naming_the_page_and_itself(hooks, placeholder):
    with pytest.raises(ValueError) as failed:
        hooks.substitute(f"a line with {placeholder} in it", "concepts/honest-numbers.md")
    assert "concepts/honest-numbers.md" in str(failed.value) and placeholder in str(failed.value)


def test_the_hook_replaces_every_placeholder_of_every_page(hooks):
    from tpulab.base import noise

    pages = {path: path.read_text() for path in DOCS.rglob("*.md")}
    for path, text in pages.items():
        built = hooks.substitute(text, str(path.relative_to(DOCS)))  # raises on a stale one
        assert "{{" not in built.replace("${{", ""), path
    honest = pages[DOCS / "concepts" / "honest-numbers.md"]
    assert "{{ tpulab.base.noise.SEGMENTS }} stretches" in honest, "the stretches' count comes from the code"
    built = hooks.substitute(honest)
    assert f"{noise.SEGMENTS} stretches" in built and f"fixed ±{noise.NOISE * 100:g}% threshold" in built
    assert f"±{noise.DEFAULT_FLOOR * 100:g}%, and the verdict says \"not calibrated\"" in " ".join(built.split())
    assert f"{noise.RESAMPLES:,} draws" in built and f"{noise.MAX_SAMPLES:,} steps" in built


def test_the_pages_quote_no_constant_by_hand():
    """The numbers the code declares are placeholders in the concept and how-to pages, never typed again."""
    for path in [*sorted((DOCS / "concepts").glob("*.md")), *sorted((DOCS / "how-to").glob("*.md"))]:
        text = path.read_text()
        for typed in ("four stretches", "the ±10% noise threshold", "noise threshold ±10%", "noise threshold (±10%)",
                      "its 95% interval", "thinned to 240"):
            assert typed not in text, f"{path.name}: {typed!r}: use its placeholder ({{{{ tpulab.module.NAME }}}})"
