"""Time from launching `tpulab` to the runtime table on screen, while TensorFlow imports behind it.

Each launch runs the real command on a pseudo-terminal (120x40) and reads what it draws until
the runtime table's title appears; `import tensorflow` in a fresh process is timed for scale.

    python benchmarks/first_paint.py [--launches 5]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = b"tpulab runtime"


def launch(timeout: float = 30.0) -> float:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "TF_CPP_MIN_LOG_LEVEL": "2",
           "TPULAB_HOME": tempfile.mkdtemp()}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tpulab"], stdin=slave, stdout=slave, stderr=slave, cwd=ROOT,
                            env=env, start_new_session=True)
    os.close(slave)
    seen = b""
    try:
        while MARKER not in seen:
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError("the runtime table never appeared")
            ready, _, _ = select.select([master], [], [], 0.01)
            if ready:
                seen = seen[-4096:] + os.read(master, 65536)
        return time.perf_counter() - t0
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.close(master)
        settle()


def settle(timeout: float = 30.0) -> None:
    """Wait for the killed app's TensorFlow probe (its own process) to finish, so launches don't overlap."""
    deadline = time.monotonic() + timeout
    while subprocess.run(["pgrep", "-f", "tpulab.engine.worker"], capture_output=True).returncode == 0:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=5)
    args = ap.parse_args()
    paint = [launch() for _ in range(args.launches)]
    tf = []
    for _ in range(2):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import tensorflow"], check=True,
                       env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, capture_output=True)
        tf.append(time.perf_counter() - t0)
    print(f"launch to first paint: median {statistics.median(paint):.2f} s, max {max(paint):.2f} s "
          f"over {args.launches} launches (goal < 1 s)")
    print(f"import tensorflow alone: median {statistics.median(tf):.2f} s; "
          f"first paint / TensorFlow import: {statistics.median(paint) / statistics.median(tf):.2f}x")


if __name__ == "__main__":
    main()
