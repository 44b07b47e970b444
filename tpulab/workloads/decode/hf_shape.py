"""A transformers causal LM's shape, read from its config.json (JSON: no transformers in this process), as decode's
shape parameters, so that its arithmetic (parameters, bytes per token, the KV cache) follows the model."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from tpulab.workloads.base import ParamError

Config = Mapping[str, Any]
MODEL = "model"
MAX_CONTEXT = 131072  # --context's largest: a longer position table is read as this (the cache holds no more)


def _llama(c: Config) -> dict[str, Any]:
    heads = c["num_attention_heads"]
    return {"layers": c["num_hidden_layers"], "width": c["hidden_size"], "heads": heads,
            "kv_heads": c.get("num_key_value_heads") or heads, "mlp_width": c["intermediate_size"],
            "vocab": c["vocab_size"], "context": c.get("max_position_embeddings", 2048), "positions": "rope",
            "block": "llama"}


def _gpt2(c: Config) -> dict[str, Any]:
    width = c.get("n_embd", 768)
    return {"layers": c.get("n_layer", 12), "width": width, "heads": c.get("n_head", 12),
            "kv_heads": c.get("n_head", 12), "mlp_width": c.get("n_inner") or 4 * width,
            "vocab": c.get("vocab_size", 50257), "context": c.get("n_positions", 1024), "positions": "learned",
            "block": "gpt2"}


FAMILIES: dict[str, Callable[[Config], dict[str, Any]]] = {"llama": _llama, "mistral": _llama, "qwen2": _llama,
                                                           "gpt2": _gpt2}
SHAPE = ("layers", "width", "heads", "kv_heads", "mlp_width", "vocab", "context", "positions", "block")


def shape_of(source: str, config: Config) -> dict[str, Any]:
    """The shape parameters of `hf:source`'s config; `ParamError` on --model, in one line, for a model_type
    decode does not know, a config missing a size, or attention heads of another width than width / heads."""
    kind = config.get("model_type", "")
    family = FAMILIES.get(kind)
    if family is None:
        raise ParamError(MODEL, f"--model hf:{source}: its model_type is {kind or 'not given'}; decode knows "
                         f"{', '.join(FAMILIES)} (their shapes give its figures)")
    try:
        shape = family(config)
    except KeyError as e:
        raise ParamError(MODEL, f"--model hf:{source}: its config.json has no {e.args[0]}") from None
    head = config.get("head_dim")
    if head and head * shape["heads"] != shape["width"]:
        raise ParamError(MODEL, f"--model hf:{source}: its heads are {head} wide, not its width / heads "
                         f"({shape['width']} / {shape['heads']}): decode's arithmetic cannot count them")
    shape["context"] = min(int(shape["context"]), MAX_CONTEXT)
    return shape


def with_model(p: Mapping[str, Any], source: str, config: Config,
               defaults: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The parameters with the model's shape, and why each shape value is what it is; `ParamError` where one was
    set to another value than the default and the config's (the model's shape is its config's)."""
    shape = shape_of(source, config)
    for name, value in shape.items():
        if p[name] != value and p[name] != defaults[name]:
            raise ParamError(name, f"--{name.replace('_', '-')} {p[name]}: hf:{source}'s config.json says {value} "
                             "(with --model, the shape is the model's)")
    why = {name: f"from hf:{source}'s config.json" for name in shape}
    return {**p, **shape}, why
