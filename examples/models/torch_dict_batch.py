"""A PyTorch module that takes its batch as a dict and returns its logits in a dict, as Hugging Face models do.

    tpulab run model --model examples/models/torch_dict_batch.py:build --no-ui --preset smoke

`build()` returns the module and one batch as a dict of tensors: tpulab calls `module(**batch)`. The output's
`logits` (a score per token and tag) are trained with cross-entropy over their last dimension, against a random
tag per token; random batches follow the example's (token ids below its largest, a mask of 0 and 1).
"""

import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = 64, tags: int = 9) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, tags)

    def forward(self, input_ids, attention_mask):
        hidden = torch.relu(self.mix(self.embed(input_ids))) * attention_mask.unsqueeze(-1)
        return {"logits": self.head(hidden)}


def build():
    batch = {"input_ids": torch.randint(0, 1000, (8, 32)), "attention_mask": torch.ones(8, 32, dtype=torch.long)}
    return Tagger(), batch
