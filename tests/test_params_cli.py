"""Parameter declarations drive flags, validation and help; bad values get one line and exit 2."""

from __future__ import annotations

import pytest

from tpulab.cli.main import main
from tpulab.workloads import registry
from tpulab.workloads.base import Limits, ParamError

from .helpers import cpu_only

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
    (["--backend", "torch"], "--backend must be one of auto, tensorflow, jax (got 'torch')"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_bad_values_give_one_line_naming_the_parameter(capsys, monkeypatch, tmp_path, argv, expected):
    # A machine with no accelerator, with TensorFlow installed.
    monkeypatch.setattr("tpulab.cli.main.fast_report", lambda: cpu_only(tmp_path))
    assert expected in bad(capsys, *argv)


def test_a_backend_that_is_not_installed_names_its_install_command(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("tpulab.cli.main.fast_report", lambda: cpu_only(tmp_path, {"jax": None}))
    line = bad(capsys, "--backend", "jax", "--preset", "smoke")
    assert "--backend jax: JAX is not installed; install it with: pip install 'tpulab[jax]'" in line


def test_a_switch_the_backend_ignores_is_refused(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("tpulab.cli.main.fast_report", lambda: cpu_only(tmp_path, {"jax": "0.10.2"}))
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
