"""A Hugging Face model through tpulab against a hand-written loop, on torch (issue: the models people bring).

1. The step: a BERT-shaped sequence classifier (BertForSequenceClassification from a config folder, random
   weights) trained by `tpulab run model --model hf:DIR` and by a bare loop of
   `model(**batch).loss.backward(); opt.step()` in a fresh process set up as the torch worker is, at the same
   batch; eager, then compiled (`--compile on` against `torch.compile(model)`). The ratio of the steady medians
   (goal <= 1.03x each).
2. The build: from the config to the end of the first training step, in tpulab's torch runner (its load, batch,
   loss and FLOP count before the step) and in a plain script doing the same, each in a fresh process with torch
   and transformers imported before the clock starts (goal <= 1.1x).

BERT-base's shape (12 layers of 768, sequences of 128) is the default; `make bench` runs a small one.

    python benchmarks/hf_models.py [--rounds 3] [--steps 30] [--batch-size 8] [--layers 12] [--hidden 768]
                                   [--seq-len 128] [--no-compiled]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from through import as_worker, record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LOOP = r"""
import json, statistics, sys, time
import torch
from transformers import AutoConfig, BertForSequenceClassification
folder, b, seq, steps, compiled = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
torch.manual_seed(0)
model = BertForSequenceClassification(AutoConfig.from_pretrained(folder, local_files_only=True))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(0)
vocab, classes = model.config.vocab_size, model.config.num_labels
batches = [{"input_ids": torch.randint(0, vocab, (b, seq), generator=g),
            "attention_mask": torch.ones(b, seq, dtype=torch.long),
            "labels": torch.randint(0, classes, (b,), generator=g)} for _ in range(2)]
step = torch.compile(model) if compiled else model
times = []
for i in range(steps):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = step(**batches[i % 2]).loss
    loss.backward()
    opt.step()
    float(loss.detach())
    times.append(time.perf_counter() - t0)
print(json.dumps(statistics.median(times[1:])))
"""

FIRST_STEP = r"""
import json, sys, time
import torch, transformers
folder, b, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0 = time.perf_counter()
config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
model = getattr(transformers, config.architectures[0])(config)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(0)
batch = {"input_ids": torch.randint(0, config.vocab_size, (b, seq), generator=g),
         "attention_mask": torch.ones(b, seq, dtype=torch.long), "labels": torch.randint(0, 2, (b,), generator=g)}
opt.zero_grad(set_to_none=True)
loss = model(**batch).loss
loss.backward()
opt.step()
float(loss.detach())
print(json.dumps(time.perf_counter() - t0))
"""

THROUGH_TPULAB = r"""
import json, sys, time
import torch, transformers
from tpulab.backends.torch import TorchRuntime
from tpulab.base.events import Compiled
from tpulab.workloads import registry
from tpulab.workloads.running import CancelToken
from tpulab.workloads.user_model.torch import run
folder, b, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
w = registry()["model"]
p = w.parse({"model": "hf:" + folder, "backend": "torch", "device": "cpu", "batch_size": b, "seq_len": seq,
             "epochs": 1, "steps_per_epoch": 1, "predict_steps": 0})
done = []
class First(Exception):
    pass
def sink(event):
    if isinstance(event, Compiled):
        done.append(time.perf_counter())
        raise First
t0 = time.perf_counter()
try:
    run(w, p, sink, CancelToken(), TorchRuntime())
except First:
    pass
print(json.dumps(done[0] - t0))
"""


def config_folder(args: argparse.Namespace, folder: Path) -> str:
    from transformers import BertConfig

    BertConfig(hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=max(1, args.hidden // 64),
               intermediate_size=4 * args.hidden, max_position_embeddings=max(512, args.seq_len), num_labels=2,
               architectures=["BertForSequenceClassification"]).save_pretrained(folder)
    return str(folder)


def python(script: str, *argv: object) -> float:
    out = subprocess.run([sys.executable, "-c", script, *map(str, argv)], capture_output=True, text=True,
                         env={**as_worker("torch"), "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def tpulab_step(args: argparse.Namespace, folder: str, compiled: bool) -> float:
    values = {"model": f"hf:{folder}", "batch_size": args.batch_size, "seq_len": args.seq_len, "epochs": 1,
              "steps_per_epoch": args.steps, "predict_steps": 0, "device": "cpu", "backend": "torch",
              "compile": "on" if compiled else "off"}
    return float(record("model", values).median)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--no-compiled", action="store_true", help="the eager step and the build only")
    args = ap.parse_args()
    os.chdir(ROOT)
    modes = (False,) if args.no_compiled else (False, True)
    ratios: dict[str, list[float]] = {"eager": [], "compiled": [], "build": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = config_folder(args, Path(tmp) / "bert")
        for r in range(args.rounds):
            for compiled in modes:
                name = "compiled" if compiled else "eager"
                loop = (folder, args.batch_size, args.seq_len, args.steps, int(compiled))
                if r % 2:
                    ours, base = tpulab_step(args, folder, compiled), python(LOOP, *loop)
                else:
                    base, ours = python(LOOP, *loop), tpulab_step(args, folder, compiled)
                ratios[name].append(ours / base)
                print(f"round {r + 1}: {name} step tpulab/loop {ratios[name][-1]:.3f}x ({ours * 1e3:.1f} ms against "
                      f"{base * 1e3:.1f} ms)", flush=True)
            first = (folder, args.batch_size, args.seq_len)
            if r % 2:
                ours, base = python(THROUGH_TPULAB, *first), python(FIRST_STEP, *first)
            else:
                base, ours = python(FIRST_STEP, *first), python(THROUGH_TPULAB, *first)
            ratios["build"].append(ours / base)
            print(f"round {r + 1}: config to first step tpulab/script {ratios['build'][-1]:.3f}x ({ours:.2f} s "
                  f"against {base:.2f} s)", flush=True)
    print(f"BERT-shaped classifier: {args.layers} layers of {args.hidden}, batch {args.batch_size} x {args.seq_len} "
          f"tokens, {args.steps} steps, {args.rounds} rounds")
    for name, goal in (("eager", 1.03), ("compiled", 1.03), ("build", 1.1)):
        values = ratios[name]
        if values:
            what = f"{name} step: tpulab / hand-written loop" if name != "build" else "config to first step: " \
                "tpulab / plain script"
            print(f"{what}: median {statistics.median(values):.3f}x (rounds {min(values):.3f}-{max(values):.3f}) "
                  f"(goal <= {goal:.2f}x)")


if __name__ == "__main__":
    main()
