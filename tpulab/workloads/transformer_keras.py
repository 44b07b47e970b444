"""The transformer's model in Keras layers (imported in a worker only): pre-LayerNorm decoder blocks."""

from __future__ import annotations

import keras


class TokenAndPosition(keras.layers.Layer):
    """Token embedding plus a learned position embedding (GPT-2's)."""

    def __init__(self, vocab: int, seq_len: int, width: int, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.tokens = keras.layers.Embedding(vocab, width)
        self.positions = keras.layers.Embedding(seq_len, width)

    def call(self, x: object) -> object:
        length = keras.ops.shape(x)[-1]
        return self.tokens(x) + self.positions(keras.ops.arange(length))


def decoder(layers: int, width: int, heads: int, seq_len: int, vocab: int) -> keras.Model:
    """Causal self-attention and a 4x-wide GELU feed-forward network per block; logits over the vocabulary."""
    tokens = keras.Input((seq_len,), dtype="int32")
    h = TokenAndPosition(vocab, seq_len, width)(tokens)
    for _ in range(layers):
        a = keras.layers.LayerNormalization(epsilon=1e-5)(h)
        a = keras.layers.MultiHeadAttention(heads, width // heads)(a, a, use_causal_mask=True)
        h = h + a
        f = keras.layers.LayerNormalization(epsilon=1e-5)(h)
        f = keras.layers.Dense(4 * width, activation="gelu")(f)
        h = h + keras.layers.Dense(width)(f)
    h = keras.layers.LayerNormalization(epsilon=1e-5)(h)
    logits = keras.layers.Dense(vocab)(h)
    logits = keras.layers.Activation("linear", dtype="float32")(logits)  # float32 logits under mixed precision
    return keras.Model(tokens, logits, name="decoder")
