"""Shared test set-up: every test keeps its results in its own folder, never the user's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def tpulab_home(tmp_path, monkeypatch):
    home = tmp_path / "tpulab-home"
    monkeypatch.setenv("TPULAB_HOME", str(home))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    return home


def run_cli(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real command in a child process, as a user would run it, in a wide terminal."""
    return subprocess.run([sys.executable, "-m", "tpulab", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "COLUMNS": "200", **(env or {})})


def json_events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]
