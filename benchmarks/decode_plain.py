"""A GPT-2 decoder written for the decode benchmark in each framework's own terms, sharing no code with
tpulab: the baseline that `benchmarks/decode.py` sets tpulab's decode against.

Each keeps its keys and values in a preallocated cache of static shape, [layers, 2, batch, heads,
context, head_dim] (as GPT-2's own code lays them out; TensorFlow: a variable per layer), and makes one
token per sequence per call, greedy, fetched to the host to stop the clock. JAX: one jitted program per
shape (the prefill, the one-token step) that writes the tokens' keys and values into the donated cache
and reads it, in place. TensorFlow: one `tf.function` per shape over a `tf.Variable` per layer for keys
and one for values, assigned in place. PyTorch: eager, under `torch.inference_mode`, over a tensor per
layer for keys and one for values written in place (`index_copy_`). Before it is timed, each
decoder's cached logits are checked against its own full forward pass.

    python benchmarks/decode_plain.py jax|tensorflow|torch '{"batch_size": 1, "prompt_len": 128, ...}'
prints {"seconds": median per token, "parameters": N, "verified": largest relative difference}.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

Params = dict[str, Any]


def weights(p: Params) -> dict[str, Any]:
    """GPT-2's weights as numpy arrays: token and position tables (the logits tied to the token table),
    per block LayerNorms and the attention and MLP projections with their biases."""
    d, m, rng = p["width"], p["mlp_width"], np.random.default_rng(p["seed"])

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, np.float32) * 0.02).astype(p["dtype"])

    def norm() -> tuple[np.ndarray, np.ndarray]:
        return np.ones(d, p["dtype"]), np.zeros(d, p["dtype"])

    def dense(i: int, o: int) -> tuple[np.ndarray, np.ndarray]:
        return w(i, o), np.zeros(o, p["dtype"])

    return {"wte": w(p["vocab"], d), "wpe": w(p["context"], d), "lnf": norm(),
            "blocks": [{"ln1": norm(), "qkv": dense(d, 3 * d), "proj": dense(d, d), "ln2": norm(),
                        "fc": dense(d, m), "out": dense(m, d)} for _ in range(p["layers"])]}


def count(tree: Any) -> int:
    if isinstance(tree, dict):
        return sum(count(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(count(v) for v in tree)
    return int(tree.size)


def jax_decoder(p: Params) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any], int]:
    """(fresh cache, call(cache, tokens, start) -> (next, logits, cache), full(tokens) -> logits, parameters)."""
    import jax
    import jax.numpy as jnp

    L, C, H = p["layers"], p["context"], p["heads"]
    hd, dt = p["width"] // H, jnp.dtype(p["dtype"])
    params = jax.tree_util.tree_map(jnp.asarray, weights(p))
    shape = (L, 2, p["batch_size"], H, C, hd)

    def layer_norm(x: Any, g: Any, b: Any) -> Any:
        x32 = x.astype(jnp.float32)
        mean = x32.mean(-1, keepdims=True)
        var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
        return ((x32 - mean) * jax.lax.rsqrt(var + 1e-5)).astype(x.dtype) * g + b

    def forward(params: Any, cache: Any, tokens: Any, start: Any) -> tuple[Any, Any]:
        t = tokens.shape[1]
        x = params["wte"][tokens] + jax.lax.dynamic_slice_in_dim(params["wpe"], start, t)
        mask = jnp.arange(C)[None, :] <= (start + jnp.arange(t))[:, None]
        for i, blk in enumerate(params["blocks"]):
            q, k, v = jnp.split(layer_norm(x, *blk["ln1"]) @ blk["qkv"][0] + blk["qkv"][1], 3, axis=-1)
            q, k, v = (y.reshape(y.shape[0], t, H, hd).transpose(0, 2, 1, 3) for y in (q, k, v))  # [B, H, T, hd]
            cache = jax.lax.dynamic_update_slice(cache, jnp.stack([k, v])[None], (i, 0, 0, 0, start, 0))
            s = (q @ cache[i, 0].transpose(0, 1, 3, 2)).astype(jnp.float32) * hd ** -0.5
            a = jax.nn.softmax(jnp.where(mask, s, -jnp.inf), axis=-1).astype(dt)
            x = x + (a @ cache[i, 1]).transpose(0, 2, 1, 3).reshape(x.shape) @ blk["proj"][0] + blk["proj"][1]
            h = layer_norm(x, *blk["ln2"])
            x = x + jax.nn.gelu(h @ blk["fc"][0] + blk["fc"][1]) @ blk["out"][0] + blk["out"][1]
        return (layer_norm(x, *params["lnf"]) @ params["wte"].T).astype(jnp.float32), cache

    def one(params: Any, cache: Any, tokens: Any, start: Any) -> tuple[Any, Any, Any]:
        logits, cache = forward(params, cache, tokens[:, :], start)
        last = logits[:, -1]
        return jnp.argmax(last, -1).astype(jnp.int32)[:, None], last, cache

    step = jax.jit(one, donate_argnums=1)
    zeros = jax.jit(lambda: jnp.zeros(shape, dt))
    full = jax.jit(lambda params, tokens: forward(params, zeros(), tokens, 0)[0])
    return zeros, lambda cache, tokens, start: step(params, cache, tokens, start), \
        lambda tokens: full(params, tokens), count(params)


def tf_decoder(p: Params) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any], int]:
    """The same decoder in TensorFlow: the cache a variable, assigned in place by each traced call."""
    import tensorflow as tf

    L, C, H, B = p["layers"], p["context"], p["heads"], p["batch_size"]
    hd = p["width"] // H
    params = tf.nest.map_structure(tf.constant, weights(p))

    def variables() -> list[Any]:
        return [tf.Variable(tf.zeros((B, H, C, hd), p["dtype"]), trainable=False) for _ in range(2 * L)]

    cache, scratch = variables(), variables()

    def layer_norm(x: Any, g: Any, b: Any) -> Any:
        mean, var = tf.nn.moments(tf.cast(x, tf.float32), axes=[-1], keepdims=True)
        return tf.cast((tf.cast(x, tf.float32) - mean) * tf.math.rsqrt(var + 1e-5), x.dtype) * g + b

    def forward(tokens: Any, start: Any, kv: Any) -> Any:
        t = tokens.shape[1]
        x = tf.gather(params["wte"], tokens) + params["wpe"][start:start + t]
        mask = tf.range(C)[None, :] <= (start + tf.range(t))[:, None]
        for i, blk in enumerate(params["blocks"]):
            q, k, v = tf.split(layer_norm(x, *blk["ln1"]) @ blk["qkv"][0] + blk["qkv"][1], 3, axis=-1)
            q, k, v = (tf.transpose(tf.reshape(y, (-1, t, H, hd)), (0, 2, 1, 3)) for y in (q, k, v))  # [B, H, T, hd]
            keys, values = kv[2 * i], kv[2 * i + 1]
            keys[:, :, start:start + t].assign(k)
            values[:, :, start:start + t].assign(v)
            s = tf.cast(tf.matmul(q, keys, transpose_b=True), tf.float32) * hd ** -0.5
            a = tf.cast(tf.nn.softmax(tf.where(mask, s, -np.inf), axis=-1), x.dtype)
            x = x + tf.reshape(tf.transpose(a @ values, (0, 2, 1, 3)), tf.shape(x)) @ blk["proj"][0] + blk["proj"][1]
            h = layer_norm(x, *blk["ln2"])
            x = x + tf.nn.gelu(h @ blk["fc"][0] + blk["fc"][1]) @ blk["out"][0] + blk["out"][1]
        return tf.cast(layer_norm(x, *params["lnf"]) @ tf.transpose(params["wte"]), tf.float32)

    def one(tokens: Any, start: Any) -> Any:
        last = forward(tokens, start, cache)[:, -1]
        return tf.cast(tf.argmax(last, -1), tf.int32)[:, None], last

    spec = tf.TensorSpec((), tf.int32)
    calls = {t: tf.function(one, input_signature=[tf.TensorSpec((B, t), tf.int32), spec]) for t in (p["prompt_len"], 1)}
    full = tf.function(lambda tokens: forward(tokens, 0, scratch))

    def call(_: Any, tokens: Any, start: int) -> tuple[Any, Any, None]:
        nxt, last = calls[tokens.shape[1]](tokens, tf.constant(start, tf.int32))
        return nxt, last, None

    return lambda: None, call, lambda tokens: full(tf.constant(tokens)), count(weights(p))


def torch_decoder(p: Params) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any], int]:
    """The same decoder in PyTorch, eager: the cache a tensor per layer for keys and one for values, written
    in place by each call."""
    import torch
    import torch.nn.functional as F

    torch.set_grad_enabled(False)
    L, C, H, B = p["layers"], p["context"], p["heads"], p["batch_size"]
    hd, dt = p["width"] // H, getattr(torch, p["dtype"])

    def tensors(tree: Any) -> Any:
        if isinstance(tree, dict):
            return {k: tensors(v) for k, v in tree.items()}
        if isinstance(tree, (list, tuple)):
            return [tensors(v) for v in tree]
        return torch.from_numpy(tree)

    params = tensors(weights(p))

    def variables() -> list[Any]:
        return [torch.zeros((B, H, C, hd), dtype=dt) for _ in range(2 * L)]

    cache, scratch = variables(), variables()

    def layer_norm(x: Any, g: Any, b: Any) -> Any:
        return F.layer_norm(x.float(), (x.shape[-1],), eps=1e-5).to(x.dtype) * g + b

    def forward(tokens: Any, start: int, kv: list[Any]) -> Any:
        t = tokens.shape[1]
        x = params["wte"][tokens] + params["wpe"][start:start + t]
        mask = torch.arange(C)[None, :] <= (start + torch.arange(t))[:, None]
        for i, blk in enumerate(params["blocks"]):
            q, k, v = (layer_norm(x, *blk["ln1"]) @ blk["qkv"][0] + blk["qkv"][1]).split(p["width"], dim=-1)
            q, k, v = (y.reshape(-1, t, H, hd).transpose(1, 2) for y in (q, k, v))  # [B, H, T, hd]
            positions = torch.arange(start, start + t)
            keys, values = kv[2 * i].index_copy_(2, positions, k), kv[2 * i + 1].index_copy_(2, positions, v)
            s = (q @ keys.transpose(-1, -2)).float() * hd ** -0.5
            a = torch.softmax(s.masked_fill(~mask, -np.inf), dim=-1).to(x.dtype)
            x = x + (a @ values).transpose(1, 2).reshape(x.shape) @ blk["proj"][0] + blk["proj"][1]
            h = layer_norm(x, *blk["ln2"])
            x = x + F.gelu(h @ blk["fc"][0] + blk["fc"][1]) @ blk["out"][0] + blk["out"][1]
        return (layer_norm(x, *params["lnf"]) @ params["wte"].T).float()

    def call(_: Any, tokens: Any, start: int) -> tuple[Any, Any, None]:
        last = forward(torch.as_tensor(np.asarray(tokens)), start, cache)[:, -1]
        return last.argmax(-1).to(torch.int32)[:, None], last, None

    return lambda: None, call, lambda tokens: forward(torch.as_tensor(tokens), 0, scratch), count(weights(p))


DECODERS = {"jax": jax_decoder, "tensorflow": tf_decoder, "torch": torch_decoder}


def main() -> None:
    framework, p = sys.argv[1], json.loads(sys.argv[2])
    assert p["block"] == "gpt2" and p["positions"] == "learned" and p["kv_heads"] == p["heads"], "GPT-2's blocks only"
    fresh, call, full, parameters = DECODERS[framework](p)
    prompt = np.random.default_rng(p["seed"]).integers(0, p["vocab"], (p["batch_size"], p["prompt_len"]), np.int32)

    def generate() -> tuple[list[float], list[np.ndarray], list[np.ndarray]]:
        nxt, logits, cache = call(fresh(), prompt, 0)
        times, cached, fed = [], [np.asarray(logits)], []
        for i in range(1, p["gen_len"]):
            fed.append(np.asarray(nxt))
            t0 = time.perf_counter()
            nxt, logits, cache = call(cache, nxt, p["prompt_len"] + i - 1)
            np.asarray(nxt)
            times.append(time.perf_counter() - t0)
            cached.append(np.asarray(logits))
        return times, cached, fed

    _, cached, fed = generate()  # compiles the prefill and the step
    reference = np.asarray(full(np.concatenate([prompt, *fed], axis=1)))[:, p["prompt_len"] - 1:]
    diff = float(np.max(np.abs(np.stack(cached, 1) - reference)) / np.max(np.abs(reference)))
    assert diff < 5e-3, f"the plain decoder's cached logits differ from its full forward pass by {diff:.3g}"
    print(json.dumps({"seconds": statistics.median(generate()[0]), "parameters": parameters, "verified": diff}))


if __name__ == "__main__":
    main()
