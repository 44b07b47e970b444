"""FLOP formulas checked against TensorFlow's own output shapes; the peak flag on the article's artifact."""

from __future__ import annotations

import time

import pytest

from tpulab.base.events import Compiled, Device, Finished, Started, Step
from tpulab.base.timing import conv_flops, conv_output_size, percentile, summarize
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec
from tpulab.workloads.conv import CONV


@pytest.mark.parametrize("size, kernel, stride, padding", [
    (256, 5, 2, "SAME"), (256, 5, 1, "SAME"), (255, 5, 2, "SAME"), (32, 5, 2, "VALID"),
    (33, 3, 1, "VALID"), (28, 5, 1, "SAME"), (7, 7, 2, "VALID"),
])
def test_conv_output_size_matches_tensorflow(tf, size, kernel, stride, padding):
    y = tf.nn.conv2d(tf.zeros([1, size, size, 1]), tf.zeros([kernel, kernel, 1, 1]), stride, padding)
    assert y.shape[1] == conv_output_size(size, kernel, stride, padding)


def test_conv_flops():
    # The article's convolution: 2 x 128 x 128 x 128 x 256 x 5 x 5 x 3
    assert conv_flops(128, 256, 256, 3, 256, 5, 2, "SAME") == 80_530_636_800
    assert conv_flops(1, 4, 4, 1, 1, 3, 1, "VALID") == 2 * 2 * 2 * 9
    assert conv_flops(2, 5, 5, 3, 4, 3, 2, "SAME") == 2 * 2 * 3 * 3 * 4 * 9 * 3
    assert conv_flops(8, 32, 32, 3, 16, 5, 1, "VALID") == 2 * 8 * 28 * 28 * 16 * 25 * 3


def test_stats():
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s.count, s.median, s.min, s.max, s.mean) == (5, 3.0, 1.0, 5.0, 3.0)
    assert s.p10 == pytest.approx(1.4) and s.p90 == pytest.approx(4.6)
    assert percentile([1.0], 0.9) == 1.0
    assert summarize([]) is None


def run_events(recorder: RunRecorder, flops: float, seconds: list[float]) -> None:
    recorder.feed(Started(workload="conv", device=Device(kind="cpu", name="test CPU"), dtype="float32",
                          flops_per_step=flops, steps_total=len(seconds) + 1, per_replica_batch=1))
    recorder.feed(Compiled(seconds=1.0))
    for i, s in enumerate(seconds, 2):
        recorder.feed(Step(step=i, seconds=s))
    recorder.feed(Finished())


def test_the_articles_artifact_is_flagged(tf, cpu_machine):
    """A convolution whose result is never used: TensorFlow prunes it, and the time is dispatch only."""
    x = tf.random.normal([16, 128, 128, 3])
    w = tf.random.normal([5, 5, 3, 64])

    @tf.function
    def conv_op():  # the article's mistake: the op's output goes nowhere
        tf.nn.conv2d(x, w, 2, "SAME")

    conv_op()
    seconds = []
    for _ in range(5):
        t0 = time.perf_counter()
        conv_op()
        seconds.append(time.perf_counter() - t0)
    rec = RunRecorder(RunSpec(CONV, {**CONV.defaults(), "batch_size": 16}, "tensorflow", "asked for", "cpu"), cpu_machine)
    run_events(rec, conv_flops(16, 128, 128, 3, 64, 5, 2, "SAME"), seconds)
    s = rec.summary()
    assert s.peak_fraction is not None and s.peak_fraction > 1
    [flag] = [f for f in s.flags if f.code == "beats-peak"]
    assert "is the output consumed?" in flag.message


def test_a_credible_run_is_not_flagged(cpu_machine):
    rec = RunRecorder(RunSpec(CONV, {**CONV.defaults(), "batch_size": 128}, "tensorflow", "asked for", "cpu"), cpu_machine)
    run_events(rec, 80.5e9, [2.0, 2.1, 1.9, 2.05])
    s = rec.summary()
    assert s.peak_fraction is not None and 0 < s.peak_fraction < 1 and s.flags == []
    assert s.step_seconds is not None and s.step_seconds.count == 4
    assert s.median == pytest.approx(2.025)
    assert s.gflops_per_s == pytest.approx(80.5 / 2.025)
    assert s.examples_per_s == pytest.approx(128 / 2.025)
    assert s.compile_seconds == 1.0


def test_few_and_noisy_samples_are_flagged(cpu_machine):
    rec = RunRecorder(RunSpec(CONV, {**CONV.defaults(), "batch_size": 1}, "tensorflow", "asked for", "cpu"), cpu_machine)
    run_events(rec, 1e6, [1.0, 1.0])
    assert [f.code for f in rec.summary().flags] == ["few-samples"]
    rec = RunRecorder(RunSpec(CONV, {**CONV.defaults(), "batch_size": 1}, "tensorflow", "asked for", "cpu"), cpu_machine)
    run_events(rec, 1e6, [1.0] * 5 + [3.0] * 5)
    assert [f.code for f in rec.summary().flags] == ["noisy"]


def test_a_rate_reads_as_a_count_and_a_view_s_prefix_never_shows_a_value_below_one():
    """'51 examples/s' beside '1.6k examples/s', never '0.051 kex/s'; an SI unit keeps its prefix in its name."""
    from tpulab.base import fmt

    view = fmt.prefix_of([1600.0, 51.0])
    assert fmt.rate(51.0, "examples/s", view) == "51 examples/s"
    assert fmt.rate(1600.0, "examples/s", view) == "1.6k examples/s"
    assert fmt.rate(3.25, "tokens/s") == "3.2 tokens/s"
    assert fmt.rate(40.3e9, "FLOP/s") == "40.3 GFLOP/s" and fmt.rate(5e8, "B/s") == "500.0 MB/s"
