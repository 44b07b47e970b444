"""tpulab on a lent GPU machine, offline: install from carried wheels, run every path once.

The lent machine (see CONTRIBUTING.md) has Python 3.12, JAX with CUDA,
psutil and nvidia-ml-py, but no Keras, Textual or TensorFlow, and no network. So the check
has two phases:

    python benchmarks/device_check.py build      # here, with PyPI: the wheelhouses
    python benchmarks/device_check.py run --out DIR   # there, offline: install, then the steps
    python benchmarks/device_check.py --out DIR  # what fits this machine (`make device-check`)

`build` fills .device-check/gpu with what tpulab needs beyond the GPU machine's image (for its
Python and platform, small enough to travel with the working tree) and .device-check/cpu with
tpulab's core and its jax extra for this machine's Python (no TensorFlow: it is an extra). Both
hold tpulab's own wheel, built from the tree; every wheel installs with --no-deps, into a fresh
folder that cannot see what the image already has (JAX, NumPy), so pip must not look for them.
`run` installs one of them into a fresh folder and, on the JAX
backend, runs `tpulab detect`, `tpulab top`, the roofline, conv, ResNet-50 and the transformer
(GPU sizes there, smoke sizes on a CPU); on the GPU, PyTorch's paths too (the image's own
PyTorch: conv, a verified decode, and a user's nn.Module eager against compiled, profiled) and the
machine card (`tpulab bench --quick` on JAX, kept as DIR/card.json); then it exports the records
and checks their telemetry. Each step has its own timeout, all of them 10 minutes together; the summary (each step's status,
seconds and headline figure), the records and the log land in DIR even when a step fails.
With no phase named: on a machine with an NVIDIA GPU, `run`; elsewhere `build`, then `run` on
the CPU, in a fresh virtual environment without TensorFlow (proving the offline install).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import tomllib
from packaging import tags
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parent.parent
HOUSE = ROOT / ".device-check"
CARRY_LIMIT_MIB = 64  # what the device tool copies along, the working tree included

# The GPU machine's Python and the platforms its pip accepts: its Python 3.12.3 is Ubuntu
# 24.04's, whose glibc is 2.39; pip download matches manylinux_2_N exactly, so each N is named.
GPU_PYTHON = (3, 12)
GPU_PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(39, 4, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
# What the GPU machine's image already holds (the device README's package list) and tpulab's
# wheels would otherwise bring: carrying another version would shadow the one its JAX runs on.
IMAGE_HAS = {
    "absl-py", "filelock", "h5py", "jax", "jaxlib", "markdown-it-py", "mdurl", "ml-dtypes",
    "numpy", "nvidia-ml-py", "opt-einsum", "packaging", "psutil", "pygments", "rich", "scipy",
    "typing-extensions"}

# Each workload's preset by mode: the article's sizes where a GPU makes them cheap, the
# smallest that still run every path on a CPU shared with others.
PRESETS = {
    "gpu": {"roofline": "default", "conv": "article", "resnet50": "smoke", "transformer": "tiny"},
    "cpu": {"roofline": "smoke", "conv": "smoke", "resnet50": "smoke", "transformer": "smoke"},
}
TIMEOUTS = {"install": 30, "detect": 30, "top": 10, "roofline": 35, "conv": 25,
            "resnet50": 90, "transformer": 60, "export": 10, "telemetry": 10,
            "torch conv": 20, "torch decode": 35, "torch module": 60,
            "bench": 185}  # 600 s in all, one command's limit there; `bench --quick` keeps its own 3 minutes
# The GPU image has PyTorch with CUDA: its paths run there (Keras from the carried wheels, where a path
# uses it); a CPU check's fresh environment has no PyTorch, whose wheel would not travel: GPU only.
TORCH_RUNS = {
    "torch conv": ["--run", "conv", "--preset", "article"],
    "torch decode": ["run", "decode", "--preset", "smoke", "--verify"],
    "torch module": ["run", "model", "--model", str(ROOT / "examples/models/torch_mlp.py") + ":build",
                     "--preset", "smoke", "--compile", "both", "--profile"],
}


# --- wheels ---------------------------------------------------------------------------------
def requirements(cpu: bool) -> list[str]:
    """tpulab's core dependencies (Keras, no framework), and on a CPU its jax extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"]) + (project["optional-dependencies"]["jax"] if cpu else [])


def supported_tags(python: tuple[int, int] | None, platforms: list[str] | None) -> set[tags.Tag]:
    """The wheel tags an interpreter accepts: this one's (None), else CPython `python` on those."""
    if python is None:
        return set(tags.sys_tags())
    return {*tags.cpython_tags(python, platforms=platforms),
            *tags.compatible_tags(python, f"cp{python[0]}{python[1]}", platforms)}


def misfits(wheels: Iterable[str], accepted: set[tags.Tag]) -> list[str]:
    """Why these wheel files would not install together there: a tag it refuses, or two versions."""
    problems: list[str] = []
    seen: dict[str, object] = {}  # each project's version
    for name in wheels:
        project, version, _, wheel_tags = parse_wheel_filename(name)
        if not wheel_tags & accepted:
            problems.append(f"{name}: no tag the target accepts")
        if project in seen and seen[project] != version:
            problems.append(f"{project}: two versions, {seen[project]} and {version}")
        seen[project] = version
    return problems


def image_has(wheel: str) -> bool:
    return canonicalize_name(parse_wheel_filename(wheel)[0]) in IMAGE_HAS


def tree_digest() -> str:
    """A digest of what tpulab's wheel is built from, to tell a wheelhouse built from another tree."""
    h = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    for path in sorted((ROOT / "tpulab").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(ROOT)).encode() + path.read_bytes())
    return h.hexdigest()


def build(target: str) -> Path:
    """Fill .device-check/TARGET with the wheels `run` installs there, and say their size."""
    house = HOUSE / target
    shutil.rmtree(house, ignore_errors=True)
    platform_args = [] if target == "cpu" else [
        "--python-version", ".".join(map(str, GPU_PYTHON)), "--implementation", "cp",
        *(a for p in GPU_PLATFORMS for a in ("--platform", p))]
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "download", "--only-binary=:all:", *platform_args, "-d", house,
                    *requirements(cpu=target == "cpu")], check=True)
    if target == "gpu":
        for wheel in house.glob("*.whl"):
            if image_has(wheel.name):
                wheel.unlink()
    digest = tree_digest()  # before the copy: others may be editing the tree meanwhile
    with tempfile.TemporaryDirectory() as src:  # a copy: pip builds in the source tree
        shutil.copytree(ROOT / "tpulab", Path(src) / "tpulab",
                        ignore=shutil.ignore_patterns("__pycache__"))
        for part in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / part, Path(src) / part)
        subprocess.run([*pip, "wheel", "--no-deps", "-w", house, src], check=True)
    (house / "tree.sha256").write_text(digest)
    wheels = sorted(w.name for w in house.glob("*.whl"))
    accepted = supported_tags(None, None) if target == "cpu" else supported_tags(
        GPU_PYTHON, GPU_PLATFORMS)
    if problems := misfits(wheels, accepted):
        raise SystemExit(f"{house}: " + "; ".join(problems))
    mib = sum(w.stat().st_size for w in house.glob("*.whl")) / 2**20
    print(f"{house.relative_to(ROOT)}: {len(wheels)} wheels, {mib:.1f} MiB")
    if target == "gpu":
        tree = tree_mib()
        print(f"with the working tree ({tree:.1f} MiB): {mib + tree:.1f} of the "
              f"{CARRY_LIMIT_MIB} MiB the device tool carries")
        if mib + tree > CARRY_LIMIT_MIB:
            raise SystemExit(f"{house}: too large to carry")
    return house


def tree_mib() -> float:
    """The size of what the device tool copies without being asked: files git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = [ROOT / f for f in listed.split("\0") if f]
    return sum(f.stat().st_size for f in files if f.is_file()) / 2**20


# --- steps ----------------------------------------------------------------------------------
class StepFailed(Exception):
    """A step's command ran, but its output shows it did not do its job."""


@dataclass
class Step:
    name: str
    argv: list[str]
    timeout: float
    headline: Callable[[str], str] = lambda stdout: ""  # the step's figure, from its stdout
    save: str | None = None  # keep its stdout in this file of the out folder


@dataclass
class Outcome:
    step: str
    status: str  # ok, failed, timed out
    seconds: float
    headline: str


def run_steps(steps: list[Step], out: Path, env: dict[str, str], title: str) -> list[Outcome]:
    """Run each step in its own process group, killed at its timeout; the summary after each."""
    outcomes: list[Outcome] = []
    with open(out / "steps.log", "w") as log:
        for step in steps:
            log.write(f"=== {step.name}: {' '.join(step.argv)}\n")
            log.flush()
            start = time.monotonic()
            proc = subprocess.Popen(step.argv, stdout=subprocess.PIPE, stderr=log, text=True,
                                    env=env, start_new_session=True)
            try:
                stdout, _ = proc.communicate(timeout=step.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the workers a run started, too
                stdout, _ = proc.communicate()
                status, headline = "timed out", f"killed after {step.timeout:g} s"
            else:
                status, headline = judge(step, proc.returncode, stdout)
            log.write(stdout)
            if step.save:
                (out / step.save).write_text(stdout)
            outcomes.append(Outcome(step.name, status, time.monotonic() - start, headline))
            write_summary(out, title, outcomes)
    return outcomes


def judge(step: Step, returncode: int, stdout: str) -> tuple[str, str]:
    """(status, headline) of a step that ended by itself."""
    ok = returncode == 0
    try:
        headline = step.headline(stdout)
    except StepFailed as e:
        ok, headline = False, str(e)
    except (ValueError, KeyError, IndexError, TypeError) as e:  # output not as expected
        ok, headline = False, f"{type(e).__name__}: {e}"
    if returncode != 0:
        headline = f"exit {returncode}; {headline}"
    return ("ok" if ok else "failed"), headline


def write_summary(out: Path, title: str, outcomes: list[Outcome]) -> str:
    lines = [title, f"{'step':<12} {'status':<9} {'seconds':>7}  headline"]
    lines += [f"{o.step:<12} {o.status:<9} {o.seconds:>7.1f}  {o.headline}" for o in outcomes]
    ok = sum(o.status == "ok" for o in outcomes)
    lines.append(f"{ok} of {len(outcomes)} steps ok in {sum(o.seconds for o in outcomes):.0f} s")
    text = "\n".join(lines) + "\n"
    (out / "summary.txt").write_text(text)
    (out / "summary.json").write_text(json.dumps(
        {"title": title, "steps": [asdict(o) for o in outcomes]}, indent=1))
    return text


# --- headlines: each reads a step's stdout, and fails it where the output shows it must ----
def last_line(stdout: str) -> str:
    if not stdout.strip():
        raise StepFailed("no output (its stderr is in steps.log)")
    return stdout.strip().splitlines()[-1]


def detected(kind: str) -> Callable[[str], str]:
    def headline(stdout: str) -> str:
        view = json.loads(stdout)["frameworks"].get("jax", {})
        if "error" in view:
            raise StepFailed(f"jax: {view['error']}")
        gpus = [g["name"] for g in view.get("gpus", [])]
        if kind == "gpu" and not gpus:
            raise StepFailed(f"jax {view.get('jax')} sees no GPU: {view.get('devices')}")
        return f"jax {view.get('jax')} on {view.get('platform')}: {', '.join(gpus) or 'no GPU'}"
    return headline


def result(stdout: str) -> dict:
    """The run's record: the last line of `--json` output."""
    record = json.loads(last_line(stdout))
    if record.get("event") != "result":
        raise StepFailed(f"the last line is a {record.get('event')!r} event, not the result")
    if record["status"] != "finished":
        raise StepFailed(f"run {record['status']}: {record.get('error')}")
    return record


def num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def figures(stdout: str) -> str:
    """A run's headline: its rate of work, GFLOP/s and first call."""
    s = result(stdout)["summary"]
    parts = [f"{num(s['throughput'])} {s['throughput_unit']}"] if s.get("throughput") else []
    parts += [f"{num(s['gflops_per_s'])} GFLOP/s"] if s.get("gflops_per_s") else []
    return ", ".join(parts + [f"compile {s['compile_seconds']:.1f} s"])


def ceilings(stdout: str) -> str:
    """The roofline's headline: the best matmul per dtype, and the copy."""
    best: dict[str, float] = {}
    for k in result(stdout)["summary"]["kernels"]:
        key, rate = (k["dtype"], k["flops_per_s"]) if k["kind"] == "matmul" else (
            "copy", k["bytes_per_s"])
        best[key] = max(best.get(key, 0.0), rate / 1e9)
    return ", ".join(f"{k} {num(v)} {'GB/s' if k == 'copy' else 'GFLOP/s'}" for k, v in best.items())


def card(path: Path) -> Callable[[str], str]:
    """`tpulab bench`'s headline, from the card it wrote: its entries by status, and the first failed one's reason."""
    def headline(_: str) -> str:
        if not path.is_file():
            raise StepFailed(f"no card at {path} (its stderr is in steps.log)")
        made = json.loads(path.read_text())
        entries = made["entries"]
        ok = [e for e in entries if e["status"] == "ok"]
        failed = [e for e in entries if e["status"] == "failed"]
        said = f"card {made['id'][:8]}: {len(ok)} of {len(entries)} entries ok"
        return said + (f"; {failed[0]['name']}: {failed[0].get('reason')}" if failed else "")
    return headline


def sampled(kind: str) -> Callable[[str], str]:
    def headline(stdout: str) -> str:
        samples = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        devices = sorted({f"{d['kind']}{d['index']}" for s in samples for d in s["devices"]})
        if kind == "gpu" and not any(d.startswith("gpu") for d in devices):
            said = samples[-1]["unavailable"] if samples else "no output"
            raise StepFailed(f"no GPU in {len(samples)} samples: {said}")
        return f"{len(samples)} samples; devices: {', '.join(devices) or 'none but the host'}"
    return headline


def telemetry_check(records: Path, kind: str) -> str:
    """What the runs' own samples say of the device; a GPU's utilisation and memory must be there."""
    runs = json.loads(records.read_text())["records"]
    samples = [s for r in runs for s in r.get("telemetry") or []]
    if not samples:
        raise StepFailed(f"no telemetry samples in {len(runs)} records")
    if kind == "cpu":
        rss = max(s["rss"] or 0 for s in samples)
        return f"{len(samples)} samples in {len(runs)} runs, worker rss peak {rss / 2**20:.0f} MiB"
    gpu = [d for s in samples for d in s["devices"] if d["kind"] == "gpu"]
    util = [d["util"] for d in gpu if d["util"] is not None]
    mem = [d["mem_used"] for d in gpu if d["mem_used"] is not None]
    if not util or not mem:
        said = {k: v for r in runs for k, v in r["summary"]["telemetry"]["unavailable"].items()}
        raise StepFailed(f"{len(gpu)} GPU readings without util or memory: {said}")
    return (f"{len(samples)} samples in {len(runs)} runs; GPU util peak {max(util):.0f}%, "
            f"memory peak {max(mem) / 2**30:.1f} GiB")


# --- the run ----------------------------------------------------------------------------------
def install(house: Path, site: Path) -> Step:
    """Every wheel of the house into `site`, offline, each without its dependencies."""
    wheels = sorted(house.glob("*.whl"))
    built = house / "tree.sha256"

    def headline(_: str) -> str:
        if not wheels:
            raise StepFailed(f"no wheels in {house}: build it, and carry it along")
        fresh = built.is_file() and built.read_text() == tree_digest()
        note = "from this tree" if fresh else "built from another tree: build again"
        return f"{len(wheels)} wheels installed, tpulab {note}"
    return Step("install", [sys.executable, "-m", "pip", "install", "-q", "--no-index",
                            "--no-deps", "--no-compile", "--disable-pip-version-check",
                            "--root-user-action=ignore", "--target", str(site), *map(str, wheels)],
                TIMEOUTS["install"], headline)


def plan(kind: str, python: str, house: Path, site: Path, out: Path, db: Path) -> list[Step]:
    """The steps of a check in `kind` mode, tpulab run by `python` from the wheels of `house`."""
    tpulab = [python, "-m", "tpulab"]
    steps = [install(house, site),
             Step("detect", [*tpulab, "detect", "--json", "--deep"], TIMEOUTS["detect"], detected(kind),
                  save="detect.json"),
             Step("top", [*tpulab, "top", "--json", "--count", "3", "--interval", "0.5"],
                  TIMEOUTS["top"], sampled(kind), save="top.jsonl")]
    for workload, preset in PRESETS[kind].items():
        steps.append(Step(workload, [*tpulab, "--run", workload, "--no-ui", "--json",
                                     "--preset", preset, "--db", str(db), "--backend", "jax",
                                     "--device", kind], TIMEOUTS[workload],
                          ceilings if workload == "roofline" else figures))
    if kind == "gpu":
        steps += [Step(name, [*tpulab, *argv, "--no-ui", "--json", "--db", str(db), "--backend", "torch",
                              "--device", kind], TIMEOUTS[name], figures) for name, argv in TORCH_RUNS.items()]
    if kind == "gpu":  # the machine card on JAX, its ceilings the roofline's above (--quick reuses them)
        steps.append(Step("bench", [*tpulab, "bench", "--quick", "--backend", "jax", "--db", str(db), "-o",
                                    str(out / "card.json")], TIMEOUTS["bench"], card(out / "card.json")))
    records = out / "records.json"
    steps.append(Step("export", [*tpulab, "results", "export", "--db", str(db), "--format",
                                 "json", "-o", str(records)], TIMEOUTS["export"], last_line))
    steps.append(Step("telemetry", [sys.executable, __file__, "telemetry", str(records),
                                    "--kind", kind], TIMEOUTS["telemetry"], last_line))
    return steps


def has_gpu() -> bool:
    """An NVIDIA GPU that its driver answers for."""
    try:
        return "GPU 0" in subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                         timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False


def run(kind: str, out: Path) -> list[Outcome]:
    """Install the wheelhouse for `kind` offline into a fresh folder, then run the steps."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tpulab-device-check-") as tmp:
        python = sys.executable  # the GPU machine's own, with its JAX
        if kind == "cpu":  # a Python that has no TensorFlow: only what the wheelhouse brings
            venv.create(Path(tmp) / "venv", symlinks=True)
            python = str(Path(tmp) / "venv" / "bin" / "python")
        site = Path(tmp) / "site"
        env = {**os.environ, "PYTHONPATH": str(site), "TPULAB_HOME": str(Path(tmp) / "home"),
               "PYTHONUNBUFFERED": "1"}
        title = (f"tpulab device check, {kind} mode, Python {sys.version.split()[0]}, "
                 f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        steps = plan(kind, python, HOUSE / kind, site, out, Path(tmp) / "results.db")
        outcomes = run_steps(steps, out, env, title)
    print((out / "summary.txt").read_text(), end="")
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="phase")
    b = sub.add_parser("build", help="download the wheelhouses (needs PyPI)")
    b.add_argument("--target", choices=["gpu", "cpu", "both"], default="both")
    r = sub.add_parser("run", help="install offline and run the steps")
    r.add_argument("--mode", choices=["auto", "gpu", "cpu"], default="auto")
    t = sub.add_parser("telemetry", help="check the telemetry of exported records")
    t.add_argument("records", type=Path)
    t.add_argument("--kind", choices=["gpu", "cpu"], required=True)
    parser.add_argument("--out", type=Path, default=HOUSE / "out", help="summary, records, log")
    r.add_argument("--out", type=Path, default=argparse.SUPPRESS, help="as above")
    args = parser.parse_args(argv)
    if args.phase == "build":
        for target in ["gpu", "cpu"] if args.target == "both" else [args.target]:
            build(target)
        return 0
    if args.phase == "telemetry":
        try:
            print(telemetry_check(args.records, args.kind))
        except (StepFailed, OSError) as e:
            print(e)
            return 1
        return 0
    mode = args.mode if args.phase == "run" else "auto"
    kind = ("gpu" if has_gpu() else "cpu") if mode == "auto" else mode
    if args.phase is None and kind == "cpu":
        build("gpu")
        build("cpu")
    outcomes = run(kind, args.out)
    return 0 if all(o.status == "ok" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
