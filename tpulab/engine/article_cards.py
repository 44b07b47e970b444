"""The 2018 article's machines as reference cards: its published figures, never measured here.

The article (a magazine's hands-on test of Colab's free TPU, 2018-10-11) timed one raw convolution
(128 images 256x256x3, 256 kernels 5x5x3, stride 2, SAME: 80.5 GFLOP per call) with `%timeit` and a
5-layer CNN on Fashion-MNIST (5 epochs of 100 steps of 1024 examples) by its wall time. Each figure here is
that published figure turned into the card's unit, with the arithmetic in its verdicts. The TPU's 1.22 ms
convolution is the artifact it was: the program had no outputs, so the convolution was pruned and what was
timed is dispatch (8 shards x 80.5 GFLOP in 1.22 ms would be 528 TFLOP/s, three times a v2-8's peak).
The CNN's figures are bounds read off a wall time that includes compiling and validation.
"""

from __future__ import annotations

from tpulab.base.timing import conv_flops
from tpulab.engine.card import Card, CardCeiling, CardEntry, CardSuite
from tpulab.machine.peaks import gpu_peak, tpu_peak

ARTICLE = "article"  # what `tpulab cards compare this article` names
PUBLISHED = ("published in the 2018 Colab TPU article (2018-10-11), not measured here; "
             "tpulab/engine/article_cards.py gives the arithmetic")
CONV_FLOP = conv_flops(128, 256, 256, 3, 256, 5, 2, "SAME")  # 80.5 GFLOP per call
CONV = {"batch_size": 128, "image_size": 256, "channels": 3, "filters": 256, "kernel_size": 5, "stride": 2}
CNN = {"batch_size": 1024, "epochs": 5, "steps_per_epoch": 100}
CNN_EXAMPLES = 5 * 100 * 1024


def _conv(seconds: float, said: str, artifact: str | None = None, shards: int = 1) -> CardEntry:
    rate = shards * CONV_FLOP / seconds / 1e9
    return CardEntry(name="conv", workload="conv", backend="tensorflow 1.x", status="ok", unit="GFLOP/s",
                     median=rate, n=None, params={**CONV, "shards": shards}, article="conv", artifact=artifact,
                     verdicts=[f"published: {said}; {shards} x {CONV_FLOP / 1e9:.1f} GFLOP / {seconds * 1e3:g} ms "
                               f"= {rate:,.1f} GFLOP/s"])


def _cnn(seconds: float, said: str) -> CardEntry:
    rate = CNN_EXAMPLES / seconds
    return CardEntry(name="fashion-mnist", workload="fashion-mnist", backend="tensorflow 1.x (Keras)", status="ok",
                     unit="examples/s", median=rate, params=CNN, article="cnn",
                     verdicts=[f"published: {said}; 5 epochs x 100 steps x 1024 examples / {seconds:g} s = "
                               f"{rate:,.0f} examples/s at most (the wall time includes compiling and validation)"])


def _card(key: str, label: str, accelerator: list[dict[str, object]], entries: list[CardEntry],
          ceilings: list[CardCeiling]) -> Card:
    return Card(id=f"article-{key}", created_at="2018-10-11T00:00:00+00:00", ended_at="2018-10-11T00:00:00+00:00",
                suite=CardSuite(name="article-2018", version=1, quick=False), published=PUBLISHED,
                machine={"label": label, "device": key, "accelerators": accelerator, "packages": {}},
                backends=["tensorflow 1.x (2018)"], ceilings=ceilings, entries=entries)  # no package measured here


def _spec(device: str, flops: float, source: str) -> CardCeiling:
    return CardCeiling(device=device, kind="compute", dtype="float32", value=flops, unit="FLOP/s",
                       source=f"spec: {source}", measured=False)


def cards() -> list[Card]:
    """The article's three machines: Colab's CPU, its K80 GPU and its TPU v2-8."""
    k80, v2 = gpu_peak("K80", "float32"), tpu_peak("v2")
    assert k80 is not None and v2 is not None
    tpu_cores = 8
    tpu_flops = v2.value * tpu_cores
    artifact = (f"an artifact: the TPU program had no outputs, so the convolution was pruned and 1.22 ms timed its "
                f"dispatch; 8 shards x {CONV_FLOP / 1e9:.1f} GFLOP in 1.22 ms is {8 * CONV_FLOP / 1.22e-3 / 1e12:.0f} "
                f"TFLOP/s, {8 * CONV_FLOP / 1.22e-3 / tpu_flops:.1f}x a v2-8's {tpu_flops / 1e12:.0f} TFLOP/s peak: "
                "no hardware can do it")
    tpu_conv = _conv(1.22e-3, "tf.contrib.tpu.batch_parallel(conv_op, num_shards=8), %timeit 1.22 ms", artifact, 8)
    tpu_conv.spec_fraction = tpu_conv.median * 1e9 / tpu_flops if tpu_conv.median else None
    cpu_on_tpu = _conv(2.47, "the same code on the TPU runtime, %timeit 2.47 s: the CPU did the work")
    cpu_on_tpu.name, cpu_on_tpu.article = "conv-unsharded", None
    gpu_conv = _conv(0.280, "the same code on the GPU runtime, %timeit 280 ms")
    gpu_conv.spec_fraction = gpu_conv.median * 1e9 / k80.value if gpu_conv.median else None
    return [
        _card("cpu", "Colab CPU (2018, published)", [],
              [_conv(2.44, "the convolution on the CPU runtime, %timeit 2.44 s")], []),
        _card("k80", "Colab K80 GPU (2018, published)",
              [{"kind": "gpu", "name": "Tesla K80 (one GK210)", "found_by": "the article"}],
              [gpu_conv, _cnn(120.0, "5 epochs 'over 2 minutes' on the GPU")],
              [_spec("gpu: Tesla K80", k80.value, k80.source)]),
        _card("tpu-v2", "Colab TPU v2-8 (2018, published)",
              [{"kind": "tpu", "name": "TPU v2-8", "cores": tpu_cores, "found_by": "COLAB_TPU_ADDR (the article)"}],
              [tpu_conv, cpu_on_tpu, _cnn(40.0, "5 epochs 'just over 40 s' on the TPU (keras_to_tpu_model)")],
              [_spec("tpu: v2-8", tpu_flops, f"{tpu_cores} cores x ({v2.source})")]),
    ]

