"""Parameter declarations drive flags, validation and help; bad values get one line and exit 2."""

from __future__ import annotations

import re

import pytest

from tpulab.cli.main import main
from tpulab.workloads import registry
from tpulab.workloads.base import Limits, ParamError

from .helpers import cpu_only, run_cli

CPU = Limits({"cpu": 8, "gpu": 0, "tpu": 0}, "cpu")


def bad(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(["--run", "conv", "--no-ui", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("argv, expected", [
    (["--batch-size", "0"], "--batch-size must be an integer from 1 to 4096 (got '0')"),
    (["--batch-size", "-8"], "--batch-size must be an integer from 1 to 4096 (got '-8')"),
    (["--batch-size", "lots"], "--batch-size must be an integer from 1 to 4096 (got 'lots')"),
    (["--iterations", "2.5"], "--iterations must be an integer from 1 to 100000 (got '2.5')"),
    (["--padding", "same"], "--padding must be one of SAME, VALID (got 'same')"),
    (["--shards", "3", "--batch-size", "128"], "--batch-size must be divisible by --shards 3 (got 128)"),
    (["--shards", "9", "--batch-size", "72"], "--shards must be an integer from 1 to 8 on CPU"),
    (["--shards", "2", "--mode", "naive", "--batch-size", "7"], "--batch-size must be divisible by --shards 2"),
    (["--mode", "batch-parallel"], "--mode batch-parallel needs a TPU on TensorFlow"),
    (["--device", "gpu"], "--device gpu: no GPU was found on this machine"),
    (["--preset", "huge"], "--preset must be one of smoke, article, article-sharded (got 'huge')"),
    (["--backend", "mxnet"], "--backend must be one of auto, tensorflow, jax, torch, llamacpp, server (got 'mxnet')"),
    (["--frobnicate"], "unknown option --frobnicate"),
])
def test_bad_values_give_one_line_naming_the_parameter(capsys, monkeypatch, cpu_machine, argv, expected):
    # A machine with no accelerator, with TensorFlow installed.
    monkeypatch.setattr("tpulab.cli.run.fast_report", lambda: cpu_machine)
    assert expected in bad(capsys, *argv)


def test_a_backend_that_is_not_installed_names_its_install_command(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("tpulab.cli.run.fast_report", lambda: cpu_only(tmp_path, {"jax": None}))
    line = bad(capsys, "--backend", "jax", "--preset", "smoke")
    assert "--backend jax: JAX is not installed; install it with: pip install 'tpulab[jax]'" in line


def test_a_switch_the_backend_ignores_is_refused(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("tpulab.cli.run.fast_report", lambda: cpu_only(tmp_path, {"jax": "0.10.2"}))
    with pytest.raises(SystemExit) as exc:
        main(["--run", "fashion-mnist", "--no-ui", "--backend", "jax", "--xla", "--dataset", "synthetic"])
    assert exc.value.code == 2
    assert "--xla means nothing on --backend jax: JAX always compiles with XLA" in capsys.readouterr().err


def test_shards_bound_follows_the_device():
    w = registry()["conv"]
    tpu = Limits({"cpu": 8, "gpu": 0, "tpu": 8}, "tpu")
    assert w.resolve({"shards": "8", "device": "tpu"}, tpu)["shards"] == 8
    one_gpu = Limits({"cpu": 8, "gpu": 1, "tpu": 0}, "gpu")
    with pytest.raises(ParamError, match=r"--shards must be an integer from 1 to 1 on GPU \(the number of GPUs\)"):
        w.resolve({"shards": "2"}, one_gpu)
    assert w.resolve({"shards": "2", "device": "cpu"}, one_gpu)["shards"] == 2


def test_preset_then_user_values_override_defaults(fashion_data):
    w = registry()["fashion-mnist"]
    p = w.resolve({"epochs": "3", "xla": True}, CPU, preset="smoke")
    assert p["batch_size"] == 64 and p["epochs"] == 3 and p["xla"] is True
    assert p["learning_rate"] == pytest.approx(1e-3)


def test_every_parameter_has_a_flag_with_help_and_range(capsys):
    for name, w in registry().items():
        with pytest.raises(SystemExit) as exc:
            main(["--run", name, "--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        for spec in w.params:
            assert spec.flag in out, (name, spec.flag)
        assert "an integer from 1 to" in out


def test_bool_flags_take_on_and_off():
    from tpulab.cli.main import build_parser
    args = build_parser("fashion-mnist").parse_args(["--run", "fashion-mnist", "--no-validation", "--xla"])
    assert args.validation is False and args.xla is True
    spec = registry()["fashion-mnist"].spec("xla")
    assert spec.parse("off") is False and spec.parse("on") is True
    with pytest.raises(ParamError, match="--xla must be on or off"):
        spec.parse("maybe")


def test_no_ui_without_a_workload_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--no-ui"])
    assert exc.value.code == 2
    assert "--no-ui needs --run WORKLOAD" in capsys.readouterr().err


def test_processes_without_shards_take_one_device_each():
    w = registry()["conv"]
    assert w.resolve({"backend": "jax", "device": "cpu", "processes": "2", "batch_size": "8"}, CPU)["shards"] == 2
    assert w.resolve({"backend": "jax", "device": "cpu", "processes": "2", "shards": "4", "batch_size": "8"},
                     CPU)["shards"] == 4  # given shards are kept, and checked against the processes
    with pytest.raises(ParamError, match="--shards must be a multiple of --processes 2"):
        w.resolve({"backend": "jax", "device": "cpu", "processes": "2", "shards": "3", "batch_size": "6"}, CPU)


def test_sweep_takes_no_ui_like_every_command():
    from tpulab.cli.main import build_parser

    argv = ["sweep", "conv", "--no-ui", "--batch-size", "4,8"]
    args = build_parser("conv", argv).parse_args(argv)
    assert args.command == "sweep" and args.no_ui and args.batch_size == "4,8"


@pytest.mark.parametrize("before, after", [
    (["--db", "x.db", "results", "list"], ["results", "list", "--db", "x.db"]),
    (["--db", "x.db", "--json", "results"], ["results", "--db", "x.db", "--json"]),
    (["--db", "x.db", "cards", "show", "this"], ["cards", "show", "this", "--db", "x.db"]),
    (["--json", "detect"], ["detect", "--json"]),
    (["--json", "top"], ["top", "--json"]),
    (["--no-save", "--json", "--telemetry", "off", "sweep", "conv"],
     ["sweep", "conv", "--no-save", "--json", "--telemetry", "off"]),
])
def test_a_shared_option_reads_alike_before_and_after_the_command(before, after):
    from tpulab.cli.main import _workload_named, build_parser

    def parsed(argv: list[str]) -> dict:
        return vars(build_parser(_workload_named(argv), argv).parse_args(argv))

    assert parsed(before) == parsed(after)


def refused(capsys, *argv: str) -> str:
    """The one line a command line that cannot be read gets, with exit code 2."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("argv, expected", [
    (["--run", "conv", "--no-ui", "--bach-size", "8"], "tpulab: error: unknown option --bach-size; did you mean "
                                                       "--batch-size?"),
    (["run", "conv", "--no-ui", "--bach-size=8"], "unknown option --bach-size; did you mean --batch-size?"),
    (["sweep", "conv", "--bach-size", "4,8"], "tpulab sweep: error: unknown option --bach-size; did you mean "
                                              "--batch-size?"),
    (["--run", "convv", "--no-ui", "--batch-size", "8"], "tpulab: error: unknown workload 'convv'; did you mean conv?"),
    (["run", "convv", "--no-ui"], "tpulab: error: unknown workload 'convv'; did you mean conv?"),
    (["sweep", "convv", "--batch-size", "4,8"], "tpulab sweep: error: unknown workload 'convv'; did you mean conv?"),
    (["results", "shwo", "abc"], "tpulab results: error: unknown action 'shwo'; did you mean show?"),
    (["doctr"], "tpulab: error: unknown command 'doctr'; did you mean doctor?"),
    (["results", "list", "--backend", "jaxx"], "unknown backend 'jaxx'; did you mean jax?"),
    (["run", "zzz"], "unknown workload 'zzz' (choose from conv, "),
    (["results", "export", "-x", "out.json"], "unknown option -x"),
])
def test_a_mistyped_option_or_name_is_named_with_the_nearest_known_one(capsys, argv, expected):
    assert expected in refused(capsys, *argv)


def test_values_that_look_like_options_are_read_as_values(capsys, monkeypatch, cpu_machine):
    monkeypatch.setattr("tpulab.cli.run.fast_report", lambda: cpu_machine)
    assert "--batch-size must be an integer from 1 to 4096 (got '-8')" in refused(capsys, "run", "conv", "--no-ui",
                                                                                   "--batch-size", "-8")


def test_run_as_a_command_is_the_run_option(capsys):
    from tpulab.cli.main import build_parser, run_as_option

    helps = []
    for argv in (["run", "conv", "--no-ui", "--help"], ["--run", "conv", "--no-ui", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
        helps.append(capsys.readouterr().out)
    # issue 64, item 19: `tpulab run WORKLOAD --help` is that command's usage, with every flag --run takes
    assert helps[0].startswith("usage: tpulab run conv [-h] [--no-ui]") and helps[1].startswith("usage: tpulab [-h]")
    assert "--version" not in helps[0] and "COMMAND" not in helps[0] and "The same as `tpulab --run conv`" in helps[0]
    options = [set(re.findall(r"^  (--[a-z][a-z-]+)", h, re.M)) for h in helps]  # each option's line of help
    assert "--batch-size" in options[0] and options[0] == options[1] - {"--version", "--run"}
    shown = run_cli("run", "decode", "--help", env={"COLUMNS": "80"})
    assert shown.returncode == 0 and shown.stdout.startswith("usage: tpulab run decode [-h]"), shown.stdout[:200]
    assert max(map(len, shown.stdout.splitlines())) <= 80 and "--prompt-len" in shown.stdout
    assert refused(capsys, "run", "conv", "--bach-size", "8") == ("tpulab: error: unknown option --bach-size; did you "
                                                                  "mean --batch-size?")
    flags = ["--no-ui", "--preset", "smoke", "--batch-size", "8", "--no-save", "--json"]
    as_command = build_parser("conv").parse_args(run_as_option(["run", "conv", *flags]))
    assert vars(as_command) == vars(build_parser("conv").parse_args(["--run", "conv", *flags]))
    assert "the following arguments are required: WORKLOAD" in refused(capsys, "run")


def test_a_training_runs_lines_fit_80_columns_whole():
    """Each step of a run on stand-in data carries the tag on its own line, not wrapped onto the next:
    at 80 columns the figures close up, and the GFLOP/s (the summary has it) gives way."""
    import io

    from rich.console import Console

    from tpulab.base.events import Compiled, Device, Epoch, Started, Step
    from tpulab.engine.record import RunRecorder
    from tpulab.engine.spec import RunSpec
    from tpulab.machine.detect import detect
    from tpulab.views.console import RunPrinter

    w = registry()["fashion-mnist"]
    rec = RunRecorder(RunSpec(w, {**w.defaults(), "dataset": "synthetic"}, "tensorflow", "auto", "cpu"), detect())
    metrics = {"loss": 5.1108, "sparse_categorical_accuracy": 0.1328}
    events = [Started(workload=w.name, device=Device(kind="cpu", name="Intel(R) Xeon(R) Processor", replicas=1,
                                                     strategy="OneDeviceStrategy"),
                      dtype="float32", flops_per_step=32e9, steps_total=1600, per_replica_batch=1024,
                      dataset="synthetic", synthetic=True),
              Compiled(seconds=2.87, synthetic=True),
              *(Step(step=i, seconds=1.2345, examples_per_s=829.5, metrics=metrics, warmup=i == 2, synthetic=True)
                for i in (2, 1000)),
              Epoch(epoch=1, seconds=754.0, metrics={**metrics, "val_loss": 3.0055,
                                                      "val_sparse_categorical_accuracy": 0.1562}, synthetic=True)]
    out = io.StringIO()
    printer = RunPrinter(rec, Console(file=out, width=80))
    for e in events:
        rec.feed(e)
        printer(e)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80, lines
    steps = [line for line in lines if line.startswith("step ")]
    assert steps == ["step 2/1600 1.234 s 830 ex/s loss 5.1108 accuracy 0.1328 (warm-up) [synthetic]",
                     "step 1000/1600 1.234 s 830 ex/s loss 5.1108 accuracy 0.1328 [synthetic]"]
    assert "epoch 1: 12m34s, loss 5.1108, accuracy 0.1328  [synthetic data]" in lines
    assert "  validation loss 3.0055, validation accuracy 0.1562" in lines
    assert "first call (trace + compile, 1 step(s)): 2.870 s  not in the steady state" in lines
    wide = io.StringIO()
    RunPrinter(rec, Console(file=wide, width=200))(events[3])  # room enough: every figure, two spaces apart
    assert wide.getvalue().strip() == ("step 1000/1600  1.234 s  830 ex/s  25.9 GFLOP/s  loss 5.1108  "
                                       "accuracy 0.1328  [synthetic]")


def test_a_long_run_of_quick_steps_is_followed_at_a_constant_cost_per_step():
    """30,000 steps of a run fed to the recorder and the headless printer, as a tiny conv of many iterations
    streams them: every figure the printer reads per step is kept as the steps come, so following them takes
    about a second here (each pass over the steps so far, per step, took minutes: the notebook's interrupt
    test once drained 100,000 that way)."""
    import io
    import time

    from rich.console import Console

    from tpulab.base.events import Compiled, Device, Started, Step
    from tpulab.engine.record import RunRecorder
    from tpulab.engine.spec import RunSpec
    from tpulab.machine.detect import detect
    from tpulab.views.console import RunPrinter

    w, n = registry()["conv"], 30_000
    rec = RunRecorder(RunSpec(w, {**w.defaults(), "device": "cpu"}, "jax", "asked for", "cpu"), detect())
    out = io.StringIO()
    printer = RunPrinter(rec, Console(file=out, width=80))
    events = [Started(workload="conv", device=Device(kind="cpu", name="test CPU"), dtype="float32", flops_per_step=1e6,
                      steps_total=n + 1, per_replica_batch=8), Compiled(seconds=0.1)]
    events += [Step(step=i, seconds=1e-4, examples_per_s=8e4) for i in range(2, n + 2)]
    t0 = time.perf_counter()
    for e in events:
        rec.feed(e)
        printer(e)
    took = time.perf_counter() - t0
    assert rec.steps_done() == n + 1 and len(rec.steady_seconds()) == n
    assert out.getvalue().count("estimate: about") == 1 and took < 10, took


def test_run_after_other_options_says_to_put_it_first():
    out = run_cli("--no-save", "run", "conv")  # it would otherwise open the lab, the workload ignored
    assert out.returncode == 2 and "put run first: tpulab run WORKLOAD [flags]" in out.stderr
