"""A Hugging Face `transformers` PyTorch model from a config on disk, inside the worker: the class its config.json
names, with random weights, or with its weights where pretrained ones are asked for and on disk. No hub is reached:
transformers and huggingface_hub are told they are offline before they load. Shared by the `model` workload
(`hf:`) and decode (`--model hf:`)."""

from __future__ import annotations

import os
from typing import Any

from torch import nn

from tpulab.base.errors import TpulabError, one_line
from tpulab.workloads.shared.model_source import library


def hf_model(source: str, weights: str) -> tuple[nn.Module, Any]:
    """(the model, its transformers config): of the class its config names, random weights unless `weights` is
    pretrained; one-line `TpulabError`s where the config, its class or its weights are missing."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # read before the hub's client loads: the cache only, never the network
    transformers = library("hf")
    try:
        config = transformers.AutoConfig.from_pretrained(source, local_files_only=True)
    except (OSError, ValueError) as e:
        raise TpulabError(f"hf:{source}: no config in that folder or the local Hugging Face cache "
                          f"({os.environ.get('HF_HOME', '~/.cache/huggingface')}): tpulab reaches no hub at run time; "
                          f"download it once (hf download {source} config.json) or pass its folder ({one_line(e)})"
                          ) from None
    arch = next(iter(config.architectures or ()), None)
    cls = getattr(transformers, arch, None) if arch else None
    if cls is None:
        raise TpulabError(f"hf:{source}: its config.json names no model class transformers has ({arch or 'none'}): "
                          "add \"architectures\": [\"...\"] with the class to build (save_pretrained writes it)")
    if weights == "pretrained":
        try:
            module = cls.from_pretrained(source, local_files_only=True)
        except (OSError, ValueError) as e:
            raise TpulabError(f"--weights pretrained: hf:{source} has no weights on disk ({one_line(e)}): download "
                              "them once, or run with --weights random") from None
    else:
        module = cls(config)
    return module, config
