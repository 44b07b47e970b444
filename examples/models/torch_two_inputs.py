"""A PyTorch module of two inputs that computes its own loss.

    tpulab run model --model examples/models/torch_two_inputs.py:build --no-ui --preset smoke

`forward(tokens, features)` takes token ids and dense features and returns a scalar: its own loss,
which tpulab trains on (a module's own loss, a scalar or a `loss` entry, wins over the one tpulab
would choose). The example inputs are a tuple: one batch of each input.
"""

import torch
from torch import nn


class TwoInputs(nn.Module):
    def __init__(self, vocab: int = 100, dim: int = 32, features: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.dense = nn.Linear(features, dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, tokens, features):
        mixed = self.embed(tokens).mean(dim=1) + self.dense(features)
        score = self.head(torch.relu(mixed)).squeeze(-1)
        return (score ** 2).mean()  # its own loss: tpulab trains on what it returns


def build():
    return TwoInputs(), (torch.randint(0, 100, (16, 12)), torch.randn(16, 8))
