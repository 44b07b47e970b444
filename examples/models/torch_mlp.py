"""A small PyTorch classifier on flat features: copy this file and change the layers.

    tpulab run model --model examples/models/torch_mlp.py:build --no-ui --preset smoke
    tpulab run model --model examples/models/torch_mlp.py:build --compile both --profile --no-ui

`build` returns an `nn.Module` and one batch of example inputs: tpulab draws random batches like it
(and class labels from the output's width), trains with Adam, and runs eager, compiled, or both.
A file that imports torch and not Keras runs on the torch backend by itself.
"""

import torch
from torch import nn


def build():
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    return model, torch.randn(32, 64)
