"""The machine card: its store table and migration, its JSON (scrubbed on export, checked on import), the
comparison's "why", the article's reference cards, its renderings; then a real bench of a tiny suite on the CPU
and a real Ctrl+C."""

from __future__ import annotations

import io
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path

import pytest
from rich.console import Console

from tpulab.engine import bench
from tpulab.engine.bench_run import Bench, scaling
from tpulab.engine.card import Card, CardCeiling, CardEntry, CardSuite, from_json, scrubbed
from tpulab.engine.card_compare import compare
from tpulab.engine.store import SCHEMA_VERSION, Store
from tpulab.machine import fingerprint
from tpulab.machine.detect import RuntimeReport
from tpulab.views import card as view

from .helpers import ROOT, cpu_only, kept_roofline, make_record, pci, run_cli, tree


STEPS = [[0.01 * (1 + 0.01 * (i % 5)) for i in range(20)]] * 2  # two repeats of an entry's step times, kept


def card(id: str = "c0ffee00" * 4, label: str = "machine A", decode: float = 100.0, bandwidth: float | None = 10e9,
         flops: float | None = 100e9, version: int = bench.VERSION, quick: bool = True, **entry: object) -> Card:
    ceilings = [CardCeiling(device="cpu: A", kind="memory", dtype="memory", value=bandwidth, unit="B/s",
                            source="roofline run x")] if bandwidth else []
    ceilings += [CardCeiling(device="cpu: A", kind="compute", dtype="float32", value=flops, unit="FLOP/s",
                             source="roofline run x")] if flops else []
    entries = [CardEntry(name="decode-b1", workload="decode", backend="jax", status="ok", unit="tokens/s",
                         median=decode, p10=decode * 0.9, p90=decode * 1.1, n=30, ceiling_kind="memory",
                         run_id="ab" * 16, samples=STEPS,
                         **{"command": "tpulab --run decode --no-ui", **entry}),  # type: ignore[arg-type]
               CardEntry(name="conv", workload="conv", backend="jax", status="ok", unit="GFLOP/s", median=50.0,
                         n=10, ceiling_fraction=0.5, bound="compute", article="conv", samples=STEPS)]
    return Card(id=id, created_at="2026-12-01T00:00:00+00:00", suite=CardSuite(name=bench.NAME, version=version,
                quick=quick), machine={"label": label, "cpu": {"model": label, "threads": 2}},
                ceilings=ceilings, entries=entries)


# --- the store -------------------------------------------------------------------------------------
def test_a_schema_4_store_gains_the_cards_table_and_keeps_its_runs(db):
    store = Store(db)
    record = make_record()
    store.save(record)
    with sqlite3.connect(db) as con:  # as tpulab before cards left it
        con.execute("DROP TABLE cards")
        con.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    again = Store(db)
    assert again.cards() == [] and again.get(record.id).id == record.id
    again.save_card(card())
    assert [c.id for c in Store(db).cards()] == [card().id]
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)


def test_a_card_is_found_by_the_first_characters_of_its_id(store):
    store.save_card(card())
    assert store.get_card("c0ff").id == card().id


# --- JSON in and out ---------------------------------------------------------------------------------
def test_an_exported_card_leaves_out_the_host_the_user_and_home(tmp_path, monkeypatch):
    home = str(tmp_path / "home" / "alice")
    monkeypatch.setenv("HOME", home)
    monkeypatch.setenv("USER", "alice")
    c = card(command=f"tpulab --run decode --data-dir {home}/data")
    c.machine["host"] = socket.gethostname()
    c.entries[1].reason = f"failed in /home/bob/x by alice on {socket.gethostname()}"
    c.entries[1].verdicts = [f"built with llvm{socket.gethostname()}x"]  # a host's name inside a word is left alone
    text = json.dumps(scrubbed(c).to_json())
    assert home not in text and "alice" not in text and "/home/bob" not in text
    assert socket.gethostname() not in text.replace(f"llvm{socket.gethostname()}x", "")
    assert "--data-dir ~/data" in text and "<host>" in text and "<user>" in text
    assert f"llvm{socket.gethostname()}x" in text


def test_a_hostile_card_imports_as_text_and_prints_literally(tmp_path, db):
    c = card(label="\x1b]0;owned\x07[bold red]evil[/] \u202e")
    c.entries[0].name = "decode\x1b[2J"
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(c.to_json()))
    done = run_cli("cards", "--db", str(db), "import", str(path))
    assert done.returncode == 0, done.stderr
    shown = run_cli("cards", "--db", str(db), "show", c.id[:8], "--full")
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\\x1b]0;owned" in shown.stdout and "[bold red]evil[/]" in shown.stdout
    assert "\\u202e" in shown.stdout and "decode\\x1b[2J" in shown.stdout
    page = tmp_path / "c.html"
    assert run_cli("cards", "--db", str(db), "show", c.id[:8], "--html", str(page)).returncode == 0
    assert "<bold" not in page.read_text() and "\x1b" not in page.read_text()


@pytest.mark.parametrize("change, said", [
    (lambda d: d["entries"][0].update(median="fast"), "entries[0].median should be a number"),
    (lambda d: d["entries"][0].update(median=float("nan")), "NaN is not a figure"),
    (lambda d: d.update(format="tpulab-results"), "not a tpulab card"),
    (lambda d: d.update(schema=99), "card schema 99"),
    (lambda d: d["entries"][0].update(status="great"), "entry status 'great'"),
    (lambda d: d.update(entries={"a": 1}), "entries should be a list"),
])
def test_a_card_file_that_is_not_one_is_refused_in_one_line_and_nothing_is_kept(tmp_path, db, change, said):
    data = card().to_json()
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    done = run_cli("cards", "--db", str(db), "import", str(path))
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert Store(db).cards() == []


def test_the_json_holds_the_fields_the_schema_documents():
    data = card().to_json()
    assert {"id", "schema", "suite", "machine", "ceilings", "entries"} <= set(data)
    assert set(data["suite"]) == {"name", "version", "quick"}
    assert {"workload", "backend", "status", "median", "p10", "p90", "n", "ceiling_fraction", "spec_fraction",
            "bound", "run_id", "command"} <= set(data["entries"][0])
    assert from_json(data) == card()


# --- comparing ------------------------------------------------------------------------------------------
def test_a_speedup_is_set_beside_the_ratio_of_the_machines_ceilings():
    a, b = card(), card(id="d" * 32, label="machine B", decode=310.0, bandwidth=33e9, flops=100e9)
    result = compare([a, b])
    decode = next(r for r in result.rows if r.name == "decode-b1")
    assert decode.cells[1].speedup == pytest.approx(3.1)
    assert decode.cells[1].why.startswith("decode-b1: 3.10x [3.0")
    assert decode.cells[1].why.endswith("] faster (noise threshold ±10%, fixed; 95% interval from 2 and 2 processes' 40 and 40 steps); "
                                        "memory bandwidth 3.3x: explained by bandwidth")
    conv = next(r for r in result.rows if r.name == "conv")  # the same figure: nothing to explain, and none is
    assert conv.cells[1].why.startswith("conv: 1.00x [") and conv.cells[1].why.endswith(
        "] no difference detected (noise threshold ±10%, fixed; 95% interval from 2 and 2 processes' 40 and 40 steps)")
    gm, names = result.geomeans[1]
    assert gm == pytest.approx((3.1 * 1.0) ** 0.5) and names == ["decode-b1", "conv"]


def test_a_refused_ceiling_leaves_a_speedup_unexplained_and_says_why():
    a = card()
    b = card(id="d" * 32, label="busy B", decode=150.0, bandwidth=None)
    b.refused["memory"] = "other processes used 1.2 of 2 cores (60%)"
    why = compare([a, b]).rows[0].cells[1].why
    assert why.startswith("decode-b1: 1.50x [") and \
        why.endswith("; cannot explain it: no memory bandwidth on busy B: refused (why: below)")
    assert "busy B: no memory ceiling: other processes used 1.2 of 2 cores (60%)" in compare([a, b]).differs


def test_a_speedup_below_the_ceilings_ratio_names_what_held_the_faster_machine():
    b = card(id="d" * 32, label="B", decode=120.0, bandwidth=40e9, bound="host")
    assert compare([card(), b]).rows[0].cells[1].why.endswith("] faster (noise threshold ±10%, fixed; 95% interval from 2 "
                                                              "and 2 processes' 40 and 40 steps); memory bandwidth 4.0x: host-bound on B")


def test_cards_of_other_versions_or_variants_compare_on_shared_entries_and_say_so():
    a = card()
    b = card(id="d" * 32, label="B", version=bench.VERSION + 1, quick=False)
    b.entries = b.entries[:1]
    result = compare([a, b])
    assert [r.name for r in result.rows] == ["decode-b1"]
    assert any("suites differ" in d for d in result.differs) and any("quick and full" in d for d in result.differs)


def test_this_card_against_the_article_shows_speedups_a_why_per_entry_and_the_artifact(db):
    Store(db).save_card(card())
    done = run_cli("cards", "--db", str(db), "compare", "this", "article")
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    assert "conv 1.5x slower (published figure, no interval); cannot explain it: no compute ceiling (float32 " \
        "matmul) on Colab CPU (2018, published)" in out
    assert "conv: no speedup: Colab TPU v2-8 (2018, published)'s figure is an artifact, not a speed" in out
    assert "geometric mean, entries of alike work" in out and "published figures, not measured here" in out


@pytest.mark.parametrize("width", [80, 60])
def test_a_comparison_too_wide_for_the_terminal_splits_its_machines_over_tables_and_cuts_no_figure(width):
    from tpulab.engine.article_cards import cards

    cmp = compare([card(), *cards(), card(id="e" * 32, label="\x1b]0;owned\x07B", decode=200.0)])  # last: continued
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(view.comparison_terminal(cmp))
    shown = console.export_text()
    assert max(len(line) for line in shown.splitlines()) <= width
    words = shown.split()
    for row in view.comparison_rows(cmp):  # each figure and speedup whole (its column may wrap between words)
        assert all(word in words for cell in row[1:] for word in cell.split()), row
    assert "speedups against the first card, continued: " in shown
    assert "\x1b" not in shown and shown.count("\\x1b]0;owned\\x07B") >= 2  # its header and the continued line


def test_the_article_card_flags_its_tpu_convolution_as_the_artifact_it_was():
    from tpulab.engine.article_cards import cards

    tpu = {c.id: c for c in cards()}["article-tpu-v2"]
    conv = next(e for e in tpu.entries if e.name == "conv")
    assert conv.artifact and "pruned" in conv.artifact and conv.spec_fraction == pytest.approx(2.93, abs=0.01)
    assert tpu.published and "not measured here" in tpu.published


# --- renderings ------------------------------------------------------------------------------------------
def full_card() -> Card:
    c = card()
    c.entries = [CardEntry(name=h, workload=h.split("-")[0], backend="tensorflow", status="ok", unit="examples/s",
                           median=1234.5, p10=1200.0, p90=1300.0, n=12, ceiling_fraction=0.42, bound="compute",
                           run_id="ab" * 16, ceiling_kind="memory" if h.startswith("decode") else "compute")
                 for h in bench.SUITE.headlines()]
    c.entries[2].status, c.entries[2].reason = "failed", "the worker was killed by SIGKILL (out of memory?)"
    c.entries += [CardEntry(name=h.name, workload=e.workload, backend="llamacpp", status="ok", unit="tokens/s",
                            median=1234.5, p10=1200.0, p90=1300.0, n=12, ceiling_fraction=0.42, ceiling_kind="memory",
                            run_id="ab" * 16, reference=h.reference, variant=h.variant)
                  for e in bench.SUITE.referenced("llama.cpp") for h in e.headlines]
    c.refused["float32"] = "other processes used 1.00 of 2 cores (50%) while it ran, more than a quarter"
    c.noisy = "other processes used 1.00 of 2 cores (50%) during conv"
    return c


def test_the_terminal_card_fits_one_80x24_screen():
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(view.terminal(full_card()))
    shown = console.export_text()
    lines = shown.rstrip("\n").splitlines()
    assert len(lines) <= 24 and max(len(line) for line in lines) <= 80
    assert "decode-b8" in shown and "SIGKILL" in shown and "noisy" in shown
    assert "llama.cpp q4_0" not in shown  # the reference lines' entries: a line each below the table, not rows
    assert "decode-b8 examples/s, each of its limit at this bandwidth for its own weight bytes: tensorflow 1,234 of " \
        "2,939; llama.cpp f32 1,234 of 2,939, q8_0 1,234 of 2,939, q4_0 1,234 of 2,939; against tensorflow: not " \
        "compared (no steps kept)" in " ".join(shown.split())


@pytest.mark.parametrize("width", [80, 60])
def test_the_full_terminal_card_keeps_every_figure_whole(width):
    """--full has the screen's table, then each entry's backend and run below it; narrower still, the names and
    words wrap, and a figure is never cut."""
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(view.terminal(full_card(), full=True))
    shown = console.export_text()
    assert max(len(line) for line in shown.splitlines()) <= width
    ok = [e for e in full_card().entries if e.status == "ok"]
    rows = "\n".join(line for line in shown.splitlines() if line.startswith(" "))  # the table's (not the lines below)
    assert rows.count(" 1,234 ") == len(ok) and rows.count(" 1,200-1,300 ") == len(ok)
    every = len(full_card().entries)  # a failed entry's too
    assert shown.count(f"run {'ab' * 16}") == every
    assert shown.count("(tensorflow, ") + shown.count("(llamacpp, ") == every
    assert "llamacpp (reference)" in shown or width < 80  # (narrower, the heading wraps in its column)


def test_the_html_card_and_comparison_load_nothing_from_outside(tmp_path):
    for page in (view.card_html(full_card()), view.comparison_html(compare([card(), card(id="e" * 32, decode=200.0)]))):
        assert "<svg" in page and "<script" not in page.lower()
        assert "src=" not in page and "href=" not in page and "url(" not in page and "@import" not in page


def test_markdown_and_csv_hold_one_row_per_entry():
    c = full_card()
    md = view.markdown(c)
    assert md.count("\n| decode-b") == 2 + 6 and "| entry | backend |" in md  # and llama.cpp's 3 formats each
    rows = view.csv_text(c).strip().splitlines()
    assert len(rows) == 1 + len(c.entries) and rows[0].startswith("card,workload,entry")


# --- the machine ---------------------------------------------------------------------------------------
def test_the_fingerprint_reads_a_containers_quota_and_says_what_it_cannot_read(tmp_path):
    root = tree(tmp_path / "a", {"sys/fs/cgroup/cpu.max": "150000 100000\n",
                                 "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "powersave\n",
                                 "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never\n"})
    assert fingerprint.cpu_quota(root) == "1.50 CPUs (cgroup v2 cpu.max)"
    assert fingerprint.governor(root) == "powersave"
    assert fingerprint.huge_pages(root) == "madvise"
    bare = tree(tmp_path / "b")
    assert fingerprint.cpu_quota(bare).startswith("not readable here")
    assert fingerprint.throttling(bare).startswith("not readable here")
    assert fingerprint.huge_pages(bare).startswith("not readable here")
    assert fingerprint.speed_variables({"XLA_FLAGS": "--x", "PATH": "/bin"}) == {"XLA_FLAGS": "--x"}


def test_bad_bench_values_are_one_line_with_exit_2(db):
    done = run_cli("bench", "--db", str(db), "--backend", "nosuch")
    assert done.returncode == 2 and "--backend must be one of" in done.stderr and "Traceback" not in done.stderr
    done = run_cli("bench", "--db", str(db), "--budget", "-5")
    assert done.returncode == 2 and done.stderr.strip() == "tpulab: error: --budget must be more than 0 seconds, not -5"


# --- real benches ------------------------------------------------------------------------------------------
TINY = bench.Suite("test", 1, scaling="conv", ceilings=bench.Entry("roofline", {"preset": "smoke"}, {}, (), ()), entries=(
    bench.Entry("conv", {"preset": "smoke", "profile": True, "profile_steps": 1}, {"iterations": 5},
                (bench.Headline("conv", "gflops_per_s", "GFLOP/s"),), ("iterations",)),
    bench.Entry("resnet50", {"preset": "smoke", "image_size": 8}, {},  # below its smallest: refused, one line
                (bench.Headline("resnet50-train", "throughput"),), ("steps_per_epoch",)),
))


def on_jax(root: Path) -> RuntimeReport:
    """A machine with no accelerator whose framework is JAX (the real one installed here): the lab's bench below is
    about the lab, not a framework, and JAX's workers start fastest."""
    return cpu_only(root, packages={"tensorflow": None, "jax": version("jax")})


@pytest.mark.slow
def test_a_tiny_suite_benches_for_real_keeps_its_runs_and_a_failed_entry_leaves_the_card_whole(tmp_path):
    """Its conv twice (the second after the other entry), its smoke roofline at its start and its end (the drift)."""
    db = tmp_path / "r.db"
    seen = []
    # On TensorFlow: a JAX roofline's steady part is long enough for the load beside it (another test, with -n 2)
    # to stop it early, at times before its copy
    suite = replace(TINY, drift=TINY.ceilings, repeats=2)
    made = Bench(cpu_only(tmp_path / "m", packages=None), db, "tensorflow", quick=True, suite=suite, budget_s=60,
                 on_progress=seen.append, reuse_ceilings=False, devices="all").run()
    conv, resnet, scaling = made.entries
    assert (scaling.name, scaling.status, scaling.reason) == (  # no scaling entry on one device, and the card says why
        "conv-scaling", "skipped", "one CPU device here: --devices all runs conv across several (a CPU's logical "
        "shards split the same cores)")
    # each rerun doubles the steps: how many reruns fit the entry's share depends on the machine's speed
    assert conv.status == "ok" and conv.median and conv.p10 <= conv.median <= conv.p90
    assert conv.n in {TINY.entries[0].quick["iterations"] * 2 ** k for k in range(10)}
    assert conv.stopped and conv.stopped.split(":")[0] in ("stable", "budget")
    assert conv.command.startswith("tpulab --run conv --no-ui --backend tensorflow --device cpu")
    assert Store(db).get(conv.run_id).workload == "conv"  # kept like any other run
    # two alike runs, their steps kept; the interval over both
    assert conv.repeats == 2 and len(conv.runs) == 2 and "2 alike runs, interleaved" in conv.stopped
    assert [len(r) for r in conv.samples] == [Store(db).get(r).summary.step_seconds.count for r in conv.runs]
    assert conv.low is not None and conv.high is not None and conv.low <= conv.median <= conv.high
    assert [(d.kind, bool(d.start), bool(d.end)) for d in made.drift] == [("compute", True, True),
                                                                          ("memory", True, True)]
    assert made.drifted() is not None and f"drift from start to end: {made.drift_words()}" in \
        " ".join(view.stability_lines(made))
    assert resnet.status == "failed" and "--image-size must be" in resnet.reason and "\n" not in resnet.reason
    assert made.status == "failed" and made.exit_code == 1
    assert set(made.refused) == {"float32", "memory"}  # the smoke roofline sets no ceiling, and says why
    assert conv.ceiling_fraction is None
    assert Store(db).get_card(made.id).entries == made.entries
    assert [p.what for p in seen if p.finished is None and p.repeated is None] == [
        "the ceilings at the start (drift)", "ceilings (roofline)", "conv", "resnet50", "conv, run 2 of 2",
        "the ceilings at the end (drift)"]


def test_devices_all_runs_the_scaling_entry_across_every_gpu_with_the_batch_per_device_kept(tmp_path):
    """Four GPUs, as their driver lists them (none is here: each run fails in its worker, in one line, and the card
    keeps what it asked for)."""
    files = {}
    for i in range(4):
        files |= {f"proc/driver/nvidia/gpus/0000:00:0{4 + i}.0/information": "Model: \t\t Tesla T4\nIRQ: 34\n",
                  **pci(f"0000:00:0{4 + i}.0", "0x10de", "0x1eb8", "0x030200")}
    files["proc/driver/nvidia/version"] = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19\n"
    report = cpu_only(tmp_path / "m", packages={"tensorflow": None, "jax": version("jax")}, files=files)
    assert report.max_shards()["gpu"] == 4
    conv_only = replace(TINY, entries=TINY.entries[:1], ceilings=bench.Entry("roofline", {"preset": "nosuch"}, {}, (), ()))
    made = Bench(report, tmp_path / "r.db", "jax", quick=True, suite=conv_only, budget_s=60, devices="all").run()
    one, four = made.entries
    assert one.name == "conv" and four.name == "conv-scaling" and four.status == "failed" and "\n" not in four.reason
    assert one.run_id and four.run_id  # each run was made, and kept with what it asked for
    asked = Store(tmp_path / "r.db").get(four.run_id).params
    assert (asked["shards"], asked["batch_size"]) == (4, 4 * Store(tmp_path / "r.db").get(one.run_id).params["batch_size"])


def test_a_scaling_entry_says_its_speedup_over_one_device_and_what_that_is_of_linear():
    one = CardEntry(name="conv", workload="conv", backend="jax", status="ok", unit="GFLOP/s", median=100.0)
    many = CardEntry(name="conv-scaling", workload="conv", backend="jax", status="ok", unit="GFLOP/s", median=360.0)
    made = scaling(many, 4, [one])
    assert made.devices == 4 and made.scaling == pytest.approx(3.6)
    assert made.verdicts == ["4 devices: 3.60x one device's conv (90% of linear)"]
    assert scaling(replace(many, status="failed", median=None), 4, [one]).scaling is None
    shown = io.StringIO()
    Console(file=shown, width=80).print(view.terminal(replace(card(), entries=[one, made])))
    assert "conv-scaling: 4 devices: 3.60x one device's conv (90% of linear)" in shown.getvalue()  # on the one screen


@pytest.mark.slow
def test_ctrl_c_keeps_a_partial_card_and_exits_130(tmp_path):
    """Interrupted in its first entry, as it starts (the ceilings of a roofline kept here, as --quick reuses them:
    no roofline to wait for). Two seconds later, as this test once waited, the conv had sometimes finished, and
    the Ctrl+C then waited 17 s for the next entry's Keras model to compile; as the entry starts, it had been lost
    before its worker was there, and the conv ran whole."""
    db = tmp_path / "r.db"
    Store(db).save(kept_roofline("jax", version("jax"), sys.version.split()[0]))
    proc = subprocess.Popen([sys.executable, "-m", "tpulab", "bench", "--quick", "--backend", "jax", "--db", str(db),
                             "-o", str(tmp_path / "card.json")], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "[1/" in line:  # the first entry is starting
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    kept = Store(db).cards()[0]
    assert kept.status == "partial" and json.loads((tmp_path / "card.json").read_text())["status"] == "partial"
    assert kept.ceilings and all(c.reused and "f" * 8 in c.reused for c in kept.ceilings)
    assert [(e.name, e.status) for e in kept.entries] == [("conv", "cancelled")]
    assert "partial" in out


def test_the_notebook_compares_a_card_with_the_article_as_html_in_the_cell(db):
    import tpulab

    result = tpulab.cards.compare(card(), "article", db=db)
    page = result._repr_html_()
    assert page.startswith('<div class="tpulab">') and "<svg" in page and "Colab K80 GPU (2018, published)" in page
    assert "conv 5.8x faster (published figure, no interval); compute ceiling (float32 matmul) 43.7x, spec figures" \
        in page and "artifact" in page
    assert "geometric mean over conv (the entries of alike work Colab K80 GPU" in " ".join(repr(result).split())


@pytest.mark.slow
@pytest.mark.parametrize("interrupted", [False, True])
def test_the_notebooks_bench_renders_its_card_in_the_cell_and_an_interrupt_keeps_it_partial(tmp_path, monkeypatch,
                                                                                             capsys, interrupted):
    """`tpulab.bench()` on this machine's JAX, the suite one conv entry and its ceilings a roofline kept here (as
    --quick reuses them). Interrupting the cell (KeyboardInterrupt in its thread, as Jupyter's stop does) as the
    conv's worker starts returns the card so far."""
    import _thread
    import threading

    import tpulab

    db = tmp_path / "r.db"
    Store(db).save(kept_roofline("jax", version("jax"), sys.version.split()[0]))
    # TINY, its refused entry weighing almost all the budget: the conv's share of 180 s is one run or two
    monkeypatch.setattr(bench, "SUITE", replace(TINY, entries=(TINY.entries[0], replace(TINY.entries[1], weight=50.0))))
    timer = threading.Timer(0.5, _thread.interrupt_main)
    if interrupted:  # half a second after the conv's run is made: its worker is starting (the JAX import alone is
        from tpulab.engine import bench_run  # longer), wherever the card's first second went on a loaded machine

        made_job = bench_run.run_job

        def interrupting(spec, *args, **kwargs):
            if spec.workload.name == "conv" and not timer.is_alive() and not timer.finished.is_set():
                timer.start()
            return made_job(spec, *args, **kwargs)

        monkeypatch.setattr(bench_run, "run_job", interrupting)
    # Python's own Ctrl+C, as a kernel has it: a suite started in the background inherits SIGINT ignored, and
    # interrupt_main then does nothing
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = tpulab.bench(quick=True, backend="jax", db=db)
    finally:
        signal.signal(signal.SIGINT, before)
    timer.cancel()
    made = result.card
    assert Store(db).cards()[0].id == made.id and made.suite.name == "test"  # kept like any card
    page = result._repr_html_()
    assert page.startswith('<div class="tpulab">') and "conv" in page, page
    assert "ceilings: float32 100.0 GFLOP/s (reused), memory 20.0 GB/s (reused)" in page, made.ceilings
    if interrupted:
        assert made.status == "partial" and "partial" in " ".join(repr(result).split())
    else:
        conv, resnet = made.entries
        assert conv.status == "ok" and conv.median and f"<td>{view.median_ci(conv)}</td>" in page
        assert resnet.status == "failed" and "--image-size must be" in resnet.reason and made.status == "failed"
        assert "[1/2 jax] conv" in capsys.readouterr().err  # its progress, as it went


def test_this_with_no_card_measured_here_says_how_to_make_one(db):
    done = run_cli("cards", "compare", "this", "article", "--db", str(db))
    assert done.returncode == 2 and "`tpulab bench --quick` makes one" in done.stderr


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_the_html_card_renders_in_headless_chromium_with_its_bars_painted(tmp_path):
    from PIL import Image

    page = tmp_path / "card.html"
    page.write_text(view.card_html(full_card()))
    shot = tmp_path / "card.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(["chromium", *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=60)
    assert "<svg" in dom.stdout and dom.stdout.count("<rect") == 6 and "decode-b8" in dom.stdout
    subprocess.run(["chromium", *flags, f"--screenshot={shot}", "--window-size=1000,1300", page.as_uri()],
                   capture_output=True, timeout=60, check=True)
    image = Image.open(shot).convert("RGB")
    blue = sum(count for count, color in image.getcolors(image.width * image.height) if color == (0x1F, 0x6F, 0xB2))
    assert blue > 6 * 200  # six bars of the chart's blue, each painted


@pytest.mark.slow
async def test_the_lab_makes_a_card_from_the_runtime_tab_with_its_progress(tmp_path, monkeypatch):
    from textual.widgets import Static

    from tpulab.lab.app import TpulabApp
    from tpulab.lab.panes.workloads import WorkloadsPane
    from tpulab.workloads import registry

    from .helpers import SIZE, text, wait_for

    # TINY, its refused entry weighing almost all the budget: the conv's share of the lab's 180 s is one run or two
    # (the reruns at twice the steps are the bench test's above)
    monkeypatch.setattr(bench, "SUITE", replace(TINY, entries=(TINY.entries[0], replace(TINY.entries[1], weight=50.0))))
    db = tmp_path / "r.db"
    app = TpulabApp(probe=False, report=on_jax(tmp_path / "m"), db=db)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "c: this machine's card" in text(app.query_one("#runtime-status", Static))
        app.query_one("#runtime-pane").focus()
        await pilot.press("c")
        assert app.runtime_pane.making_card  # from the key on: no run starts beside it, and the form's Run says why
        app.post_message(WorkloadsPane.RunRequested(registry()["conv"], registry()["conv"].defaults()))
        await pilot.pause()
        assert [n.message for n in app._notifications][-1] == "The machine card is being made: c on the Runtime tab stops it."
        assert app.run_pane.run is None
        shown = app.query_one("#runtime-card", Static)
        await wait_for(pilot, lambda: "[1/2 jax] conv" in text(shown) or "kept as card" in text(shown), 60)
        await wait_for(pilot, lambda: "kept as card" in text(shown), 120)
        assert "conv" in text(shown) and "--image-size must be" in text(shown)
    assert Store(db).cards()[0].suite.name == "test"


async def test_the_card_does_not_start_beside_a_run_in_flight(tmp_path):
    """The card measures the machine: beside a run, each would measure the other (random keys started one so)."""
    from tpulab.lab.app import TpulabApp

    from .helpers import SIZE, Replay, conv_events, wait_for

    app = TpulabApp(probe=False, report=on_jax(tmp_path / "m"), db=tmp_path / "r.db")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.run_pane.start(Replay("conv", app.report, conv_events()[:-1], held=True))  # no Finished: it holds
        await wait_for(pilot, lambda: app.run_pane.running and bool(app.run_pane.run.recorder.steps), 10)
        await pilot.press("alt+1")
        app.runtime_pane.focus()
        await pilot.press("c")
        assert not app.runtime_pane.making_card
        assert [n.message for n in app._notifications][-1] == "A run or sweep is in progress: cancel it first (x)."
        await pilot.press("x")
        await wait_for(pilot, lambda: bool(app.records), 10)
        assert app.records[0].status == "cancelled" and not app.runtime_pane.making_card


async def test_the_lab_lists_the_cards_and_sets_the_newest_beside_the_article(tmp_path):
    from textual.widgets import Static

    from tpulab.lab.app import TpulabApp

    from .helpers import text, wait_for

    db = tmp_path / "r.db"
    Store(db).save_card(card(label="machine A"))
    app = TpulabApp(probe=False, report=cpu_only(tmp_path / "m"), db=db)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        app.query_one("#results-table").focus()
        await pilot.press("k")
        shown = app.query_one("#comparison", Static)
        await wait_for(pilot, lambda: "speedups against the first card" in text(shown), 10)
        assert "c0ffee00" in text(shown) and "Colab K80 GPU" in text(shown)


@pytest.mark.slow
def test_a_backend_registered_later_gets_its_entries_with_no_change_to_the_card(tmp_path):
    from tpulab.base import plugins

    info = tmp_path / "site" / "fake_numpy-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-numpy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{plugins.BACKENDS}]\nnumpy = fake_numpy_backend:BACKEND\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, [ROOT, ROOT / "tests" / "plugins", tmp_path / "site"])),
           "TPULAB_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "tpulab", "bench", "--quick", "--backend", "numpy", "--no-reference", "-o",
                           str(tmp_path / "card.json")], capture_output=True, text=True, env=env, timeout=400, cwd=tmp_path)
    made = json.loads((tmp_path / "card.json").read_text())
    by_name = {e["name"]: e for e in made["entries"]}
    assert set(by_name) == set(bench.SUITE.headlines()) and made["backends"] == ["numpy"], done.stderr[-2000:]
    assert made["references"] == {}  # (--no-reference: llama.cpp's lines left out, and nothing said of them)
    assert by_name["conv"]["status"] == "ok" and by_name["conv"]["backend"] == "numpy"
    assert by_name["resnet50-train"]["status"] == "skipped" and "does not run on" in by_name["resnet50-train"]["reason"]


def test_quick_reuses_a_kept_roofline_of_the_same_device_and_versions_and_says_so(tmp_path, db):
    report = cpu_only(tmp_path / "m")
    Store(db).save(kept_roofline("tensorflow", report.packages["tensorflow"], report.python))
    none = bench.Suite("test", 1, ceilings=TINY.ceilings, entries=())
    made = Bench(report, db, "tensorflow", quick=True, suite=none).run()
    assert {(c.dtype, c.value) for c in made.ceilings} == {("float32", 100e9), ("memory", 20e9)}
    assert all(c.reused and "ffffffff" in c.reused and "same device and versions" in c.reused for c in made.ceilings)
    assert "(reused)" in view.ceilings_line(made)


def test_a_comparison_with_the_article_leads_with_alike_work_and_averages_no_other_work():
    """A quick card's conv (batch 32 at 128 px) and CNN (batch 64) against the article's (128 at 256 px, 1024): each
    said to be other work, not in the geometric mean; an entry of alike work leads and is the mean."""
    from tpulab.engine.article_cards import cards
    from tpulab.views.card import comparison_lines, comparison_rows

    mine = card()
    conv = next(e for e in mine.entries if e.name == "conv")
    conv.params = {"batch_size": 32, "image_size": 128, "channels": 3, "filters": 64, "kernel_size": 5, "stride": 2}
    cnn = CardEntry(name="fashion-mnist", workload="fashion-mnist", backend="jax", status="ok", unit="examples/s",
                    median=400.0, params={"batch_size": 64})
    alike = CardEntry(name="fashion-mnist", workload="fashion-mnist", backend="jax", status="ok", unit="examples/s",
                      median=400.0, params={"batch_size": 1024})
    k80 = cards()[1]
    result = compare([dataclasses.replace(mine, entries=[*mine.entries, cnn]), k80])
    rows = comparison_rows(result)
    assert rows[0][0] == "conv [GFLOP/s] (other work)" and rows[1][0] == "fashion-mnist [examples/s] (other work)"
    assert [row[-1] for row in rows[:2]] == [view.median_ci(e) for e in k80.entries]  # figures alone: no ratio
    assert result.lead and rows[-1][0] != "geometric mean, entries of alike work"  # nothing compared: no mean
    said = " ".join(comparison_lines(result))
    assert "conv: other work (batch_size 32 / 128; image_size 128 / 256; filters 64 / 256): a card whose sizes " \
        "differ from the first's gets no speedup, and no mean holds it" in said
    assert "fashion-mnist: other work (batch_size 64 / 1024)" in said
    assert f"{k80.entries[0].median / conv.median:.2f}x" not in said and "x of other work" not in said
    assert "slower (published" not in said and "faster (published" not in said

    result = compare([dataclasses.replace(mine, entries=[*mine.entries, alike]), k80])
    rows = comparison_rows(result)
    assert rows[0][0] == "fashion-mnist [examples/s]" and rows[1][0] == "conv [GFLOP/s] (other work)"  # alike leads
    assert rows[-1][-1] == f"{k80.entries[1].median / 400.0:.2f}x over 1 entry"


def quick_card() -> Card:
    """A quick card as `tpulab bench --quick` keeps one: the quick suite's conv and CNN sizes, not the article's."""
    c = card()
    conv = next(e for e in c.entries if e.name == "conv")
    conv.params = {"batch_size": 32, "image_size": 128, "channels": 3, "filters": 64, "kernel_size": 5, "stride": 2}
    c.entries.append(CardEntry(name="fashion-mnist", workload="fashion-mnist", backend="jax", status="ok",
                               unit="examples/s", median=400.0, params={"batch_size": 64}, samples=STEPS))
    return c


def test_a_quick_card_against_the_article_says_it_compares_nothing_and_shows_no_speedup(db):
    """Every entry of a quick card is other work beside the article's: the comparison leads with why and which card
    compares with it, is headed as figures, and shows no ratio anywhere (none of the article's medians over its own)."""
    from tpulab.engine.article_cards import cards

    Store(db).save_card(quick_card())
    done = run_cli("cards", "--db", str(db), "compare", "c0ffee00", "article", env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    out = " ".join(done.stdout.split())
    assert out.startswith("a quick card runs other sizes than the article: `tpulab bench` (full) compares with it "
                          "figures side by side, not compared")
    assert "speedups against the first card" not in out and "geometric mean" not in out
    ratios = [f"{e.median / mine.median:.2f}x" for c in cards() for e in c.entries for mine in quick_card().entries
              if e.name == mine.name and e.median and mine.median]
    assert ratios and not any(r in out for r in ratios)
    assert "quick and full cards side by side" not in out  # (the lead said it)
    assert "figure is an artifact, not a speed" in out  # the TPU's convolution still named for what it was


@pytest.mark.slow
def test_a_run_the_card_stops_at_its_budget_is_kept_finished_with_its_steps_not_cancelled(tmp_path):
    """A conv far longer than the card's budget: the card stops it after its current step, and the run it keeps is
    the card's measurement, finished with the steps it timed and a note saying why it stopped (it had read as
    `cancelled` in `tpulab results`)."""
    db = tmp_path / "r.db"
    endless = replace(TINY, entries=(bench.Entry("conv", {"preset": "smoke"}, {"iterations": 100_000},
                                                 (bench.Headline("conv", "gflops_per_s", "GFLOP/s"),), ()),))
    made = Bench(on_jax(tmp_path / "m"), db, "jax", quick=True, suite=endless, budget_s=14, reuse_ceilings=False).run()
    [conv] = [e for e in made.entries if e.name == "conv"]
    assert conv.status == "ok" and conv.stopped and conv.stopped.startswith("budget: stopped at its share")
    run = Store(db).get(conv.run_id)
    assert run.status == "finished" and run.error is None and run.summary.step_seconds is not None
    assert run.note and "stopped by its machine card at its share of the card's budget" in run.note
    # (its roofline may stop itself, cancelled, beside another test's load: the quiet rule of ceilings, not the budget)
    assert {r.status for r in Store(db).records() if r.workload == "conv"} == {"finished"}


def test_an_inference_entry_lists_no_training_ops_as_its_own():
    """A ResNet-50 run trains, then infers, and traces its training step: the train entry lists those ops, the
    inference entry none (they were 'gradient_tape/... Conv2DBackpropInput'), and says where the trace is."""
    from tpulab.base.events import OpRow, Profile
    from tpulab.engine.bench_run import figures

    traced = Profile(steps=2, step_seconds=0.1, host_gap=0.01, host_gap_share=0.1, ops=[
        OpRow(name="gradient_tape/conv/Conv2DBackpropInput", type="Conv2DBackpropInput", category="matmul/conv",
              calls=1, seconds=0.05, share=0.5)])
    record = make_record(workload="resnet50", profile=traced)
    train, infer = bench.SUITE.entries[2].headlines
    assert [o.name for o in figures(train, record, False)["top_ops"]] == ["gradient_tape/conv/Conv2DBackpropInput"]
    said = figures(infer, record, False)
    assert said["top_ops"] == [] and said["host_gap_share"] is None and said["bound"] is None
    assert said["verdicts"][0].startswith("op profile: the run traced its training step, not this phase")


@pytest.mark.slow
def test_a_card_says_its_whole_budget_with_the_reference_lines_and_ends_within_it(tmp_path):
    """`bench --quick` with a budget too small for the suite: it says the whole budget before it starts (the
    backend's and llama.cpp's reference lines'), every stage stops by it, each line says one thing, the entries are
    counted once each, and a card the budget left entries out of is listed incomplete, not complete."""
    db, out = tmp_path / "r.db", tmp_path / "card.json"
    done = run_cli("bench", "--quick", "--backend", "jax", "--budget", "12", "--db", str(db), "-o", str(out),
                   timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [" ".join(line.split()) for line in done.stderr.splitlines()]
    assert lines[0] == ("tpulab bench --quick: jax, then the reference lines of llamacpp, budget 18s in all: 12s for "
                        "jax, 6s for llama.cpp's reference lines; Ctrl+C keeps a partial card")
    made = json.loads(out.read_text())
    assert made["budget_s"] == 18 and made["wall_s"] <= 18
    assert made["drift"] and all("12s budget leaves no room for the drift probes" in d["why"] for d in made["drift"])
    assert made["status"] == "incomplete" and any(e["status"] in ("skipped", "cancelled") for e in made["entries"])
    counted = [line.split("]")[0] for line in lines if line.startswith("[") and "/" in line.split("]")[0]]
    assert len(counted) == len(set(counted)) > 0  # '[6/6 jax]' once: the end's drift probe is no entry
    entries = [line for line in lines if line.startswith(("conv [", "decode-", "fashion-", "resnet50", "transformer"))]
    assert len(entries) == len(made["entries"])
    for line in entries:
        assert not line.endswith(";") and "; ;" not in line
        assert "with the steps it had timed" not in line or ": cancelled" not in line
    clock = [(int(m[1]), int(m[2])) for line in lines if (m := re.search(r"· (\d+)s in, at most (\d+)s left", line))]
    assert len(clock) >= 3 and all(a <= b for (a, _), (b, _) in zip(clock, clock[1:]))  # the card's time, never reset
    assert all(17 <= spent + left <= 19 for spent, left in clock)  # ... and with its time left, the whole budget
    listed = run_cli("cards", "list", "--db", str(db))
    assert "incomplete" in listed.stdout and " complete " not in listed.stdout
