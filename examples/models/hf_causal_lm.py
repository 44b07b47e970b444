"""A Hugging Face causal language model (GPT-2's architecture, small), built from its config with random weights.

    pip install 'tpulab[hf]'
    tpulab run model --model examples/models/hf_causal_lm.py:build --no-ui --preset smoke

`build()` returns the model and one batch as a dict (`input_ids`, `attention_mask`): tpulab calls `model(**batch)`
on random batches like it, at its batch of 8. The batch has no `labels`, so tpulab gives the model its input ids
as labels, as transformers' own training of a causal LM does, and trains the model's own loss (its output's
`loss`); the summary says so. No hub is reached: the config is written here.
"""

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def build():
    config = GPT2Config(vocab_size=2048, n_positions=128, n_embd=64, n_layer=2, n_head=2, bos_token_id=0,
                        eos_token_id=0)
    batch = {"input_ids": torch.randint(0, config.vocab_size, (8, 64)),
             "attention_mask": torch.ones(8, 64, dtype=torch.long)}
    return GPT2LMHeadModel(config), batch
