"""A small PyTorch CNN on 28x28 grey images, the article's shape, with its own data.

    tpulab run model --model examples/models/torch_cnn.py:build --no-ui --preset smoke

`build` returns `(module, (x, y))`: tpulab trains on these images and labels (cross-entropy, as
integer labels and a class per output column say) instead of random ones.
"""

import torch
from torch import nn


def build():
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10),
    )
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(256, 1, 28, 28, generator=generator)
    y = torch.randint(0, 10, (256,), generator=generator)
    return model, (x, y)
