"""PyTorch models a library builds from a name, inside the worker: Hugging Face `transformers` (`hf:`) from a
config on disk, `timm` (`timm:`) by name. Weights are random unless pretrained ones are asked for and on disk;
batches are random, made from the config (token ids below its vocabulary, images of its size). No hub is
reached: transformers and huggingface_hub are told they are offline before they load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from tpulab.base.errors import TpulabError, one_line
from tpulab.workloads.shared.hf_torch import hf_model
from tpulab.workloads.shared.model_source import library
from tpulab.workloads.user_model.batch import Inputs
from tpulab.workloads.user_model.target import Target

Draw = Callable[[int, torch.Generator], Inputs]  # n random examples, as the module takes them


@dataclass(frozen=True)
class Built:
    """A library's module and how to make its batches: `draw(n, generator)`, and what they are in words."""

    module: nn.Module
    draw: Draw
    said: str


def build(t: Target, weights: str, seq_len: int) -> Built:
    return hf(t.source, weights, seq_len) if t.library == "hf" else timm_model(t.source)


def hf(source: str, weights: str, seq_len: int) -> Built:
    """A transformers model of the class its config names, from the config (random weights) or its files
    (`tpulab.workloads.shared.hf_torch`)."""
    module, config = hf_model(source, weights)
    return Built(module, *batches(source, config, str(module.main_input_name), seq_len))


def batches(source: str, config: Any, takes: str, seq_len: int) -> tuple[Draw, str]:
    """Random batches of what the model's main input is: token ids (with their attention mask) or pixels."""
    if takes == "input_ids":
        positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        if positions and seq_len > positions:
            raise TpulabError(f"--seq-len must be at most {positions}, hf:{source}'s positions (got {seq_len})")
        vocab = int(config.vocab_size)

        def tokens(n: int, g: torch.Generator) -> Inputs:
            return Inputs(kwargs={"input_ids": torch.randint(0, vocab, (n, seq_len), generator=g),
                                  "attention_mask": torch.ones(n, seq_len, dtype=torch.long)})
        return tokens, f"random token ids from its config ({vocab:,} in its vocabulary, {seq_len} per example)"
    if takes == "pixel_values":
        size = config.image_size
        side = tuple(size) if isinstance(size, (tuple, list)) else (size, size)
        channels = int(getattr(config, "num_channels", 3))
        return (lambda n, g: Inputs(kwargs={"pixel_values": torch.randn(n, channels, *side, generator=g)}),
                f"random images from its config ({channels} x {side[0]} x {side[1]})")
    raise TpulabError(f"hf:{source}: its model takes {takes}, which tpulab cannot make from its config: return "
                      "(model, batch) from a function of yours (--model FILE.py:FUNCTION)")


def timm_model(name: str) -> Built:
    """A timm model by name, random weights; images of the size its pretrained config names."""
    timm = library("timm")
    try:
        module = timm.create_model(name, pretrained=False)
    except RuntimeError as e:
        raise TpulabError(f"timm:{name}: {one_line(e)} (timm.list_models('*{name[:12]}*') lists the names it knows)"
                          ) from None
    size = tuple(module.pretrained_cfg.get("input_size") or (3, 224, 224))
    return Built(module, lambda n, g: Inputs((torch.randn(n, *size, generator=g),)),
                 f"random images of its input size ({' x '.join(map(str, size))})")
