"""Faults lose nothing: the real CLI, its real worker, real signals, a real full filesystem."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tpulab.base.errors import EXIT_FAILED
from tpulab.engine.store import SCHEMA_VERSION, Store, export_json

from .helpers import ROOT, json_events, make_record, rest_of, run_cli

LONG_RUN = ["--run", "conv", "--no-ui", "--json", "--batch-size", "8", "--image-size", "64", "--filters", "16",
            "--iterations", "100000", "--telemetry", "off"]


def hangup_ends_it() -> None:
    """The CLI as a terminal's session starts it: SIGHUP ends it, even where the suite itself was started under
    `nohup` (which ignores it, for every process it starts)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def started(backend: str, steps: int = 3) -> tuple[subprocess.Popen[str], int]:
    """A long conv run on `backend`, once `steps` steps are timed, and its worker's pid."""
    proc = subprocess.Popen([sys.executable, "-m", "tpulab", *LONG_RUN, "--backend", backend], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=hangup_ends_it)
    seen = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        seen += '"event": "step"' in line
        if seen == steps:
            break
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    workers = [int(c) for c in children if b"tpulab.engine.worker" in Path(f"/proc/{c}/cmdline").read_bytes()]
    assert len(workers) == 1, children
    return proc, workers[0]


def gone(pid: int, within: float) -> bool:
    """Whether the process ends (or is left a zombie, nothing running) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    return False


pytestmark = pytest.mark.slow  # each test starts a framework in a worker, or several


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP])
def test_the_worker_ends_when_its_parent_dies(sig):
    """Killed, or its terminal closed (SIGHUP), the parent leaves no worker keeping the cores busy (on JAX, the
    quicker to start: the worker's next event meets the closed pipe, whatever its framework)."""
    proc, worker = started("jax")
    try:
        proc.send_signal(sig)
        proc.wait(30)
        assert gone(worker, 10), "the worker outlived its parent"
    finally:
        if not gone(worker, 0):
            os.kill(worker, signal.SIGKILL)


def test_a_killed_worker_fails_the_run_in_one_line_and_keeps_its_steps():
    proc, worker = started("tensorflow")  # whose routine notices on stderr are no last words
    os.kill(worker, signal.SIGKILL)
    out, err = rest_of(proc, 60)
    assert proc.returncode == EXIT_FAILED, err
    result = json_events(out)[-1]
    assert result["event"] == "result" and result["status"] == "failed" and len(result["steps"]) >= 3
    said = [line for line in err.splitlines() if line.startswith("tpulab:")]
    # TensorFlow's routine notices (oneDNN, CUDA) are no last words: a worker that said nothing else has none
    assert said == ["tpulab: the run failed: the worker was killed by SIGKILL (out of memory? try a smaller batch or "
                    "image size)"], err
    kept = json.loads(run_cli("results", "list", "--json").stdout)
    assert [(r["id"], r["status"]) for r in kept] == [(result["id"], "failed")]


def test_a_store_of_a_newer_tpulab_is_refused_in_one_line_and_left_as_it_was(tmp_path):
    db = tmp_path / "r.db"
    Store(db).save(make_record())
    with sqlite3.connect(db) as con:
        con.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    con.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    export_json([make_record()], tmp_path / "x")
    for argv in (["results", "--db", str(db), "list"], ["results", "--db", str(db), "import", str(tmp_path / "x")]):
        out = run_cli(*argv)
        assert out.returncode == EXIT_FAILED and out.stderr == (
            f"tpulab: error: the results database {db} has schema 99, newer than this tpulab's {SCHEMA_VERSION}: upgrade tpulab, "
            "or pass --db OTHER_PATH\n")
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


# --- a full disk -------------------------------------------------------------------------------
DRIVER = textwrap.dedent("""
    import hashlib, json, os, resource, shutil, signal, subprocess, sys
    mode, home, seed, export, out = sys.argv[1:6]
    if mode == "tmpfs":
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", home], check=True)
    shutil.copy(seed, os.path.join(home, "results.db"))
    db = os.path.join(home, "results.db")
    if mode == "tmpfs":  # filled to the last byte
        fd = os.open(os.path.join(home, "filler"), os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"x" * 4096)
        except OSError:
            os.close(fd)

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))

    def tpulab(*args, full=True):
        done = subprocess.run([sys.executable, "-m", "tpulab", *args], capture_output=True, text=True,
                              env={**os.environ, "TPULAB_HOME": home, "COLUMNS": "200"},
                              preexec_fn=limited if full and mode == "rlimit" else None)
        return {"rc": done.returncode, "out": done.stdout, "err": done.stderr}

    smoke = ["--run", "conv", "--no-ui", "--preset", "smoke", "--telemetry", "off", "--backend", "jax"]
    said = {"run": tpulab(*smoke), "json": tpulab(*smoke, "--json"), "import": tpulab("results", "import", export),
            "export": tpulab("results", "export", "-o", os.path.join(home, "out.json"))}
    said["sha"] = hashlib.sha256(open(db, "rb").read()).hexdigest()
    if mode == "tmpfs":
        os.remove(os.path.join(home, "filler"))
    with open(os.path.join(out, "json-run.jsonl"), "w") as f:
        f.write(said["json"]["out"])
    said["after"] = tpulab("results", "list", "--json", full=False)
    said["later"] = tpulab("results", "import", os.path.join(out, "json-run.jsonl"), full=False)
    json.dump(said, open(os.path.join(out, "said.json"), "w"))
""")


def mountable() -> bool:
    """Whether this test may mount a tmpfs of its own (root in a private mount namespace)."""
    try:
        return subprocess.run(["unshare", "-m", "mount", "-t", "tmpfs", "tmpfs", "/mnt"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_a_full_disk_loses_no_run_and_says_so(tmp_path):
    """tpulab's home on a full filesystem (a 2 MiB tmpfs filled up; where none can be mounted, a file size limit
    that every write past 16 KiB meets): each write fails in one line on stderr naming the cause and the path, exit
    1; the figures and a --json run's record stay in the output; what was kept is unchanged, and reads back whole
    once there is space, with the --json run imported from its output."""
    kept = make_record()
    seed = tmp_path / "seed.db"
    Store(seed).save(kept)
    export = tmp_path / "other.json"
    export_json([make_record()], export)
    home = tmp_path / "home"
    home.mkdir()
    mode = "tmpfs" if mountable() else "rlimit"
    (tmp_path / "driver.py").write_text(DRIVER)
    command = [sys.executable, str(tmp_path / "driver.py"), mode, str(home), str(seed), str(export), str(tmp_path)]
    subprocess.run(["unshare", "-m", *command] if mode == "tmpfs" else command, check=True, timeout=600, cwd=ROOT)
    said = json.loads((tmp_path / "said.json").read_text())
    db = home / "results.db"
    why = "no space left on device" if mode == "tmpfs" else "file too large for the file size limit (ulimit -f)"
    cannot = f"cannot write the results database {db}: {why}; nothing kept was changed:"
    for name in ("run", "json", "import", "export"):
        assert said[name]["rc"] == EXIT_FAILED, said[name]
        assert len(said[name]["err"].splitlines()) == 1 and cannot in said[name]["err"], said[name]["err"]
        assert "read" not in said[name]["err"]  # a failed write is never called a failed read
    assert said["run"]["err"].startswith("tpulab: error: run ") and "was not kept: " in said["run"]["err"]
    assert "steady iteration time" in said["run"]["out"]  # its figures stay on screen
    assert json_events(said["json"]["out"])[-1]["event"] == "result"
    assert "save the output to a file, then `tpulab results import FILE`" in said["json"]["err"]
    assert said["sha"] == hashlib.sha256(seed.read_bytes()).hexdigest()  # nothing kept was changed
    assert said["after"]["rc"] == 0 and [r["id"] for r in json.loads(said["after"]["out"])] == [kept.id]
    assert said["later"]["rc"] == 0 and ": 1 run(s) and 0 sweep(s) added" in said["later"]["out"]
