"""A small classifier on flat features: copy this file and change the layers.

    tpulab --run model --model examples/models/mlp.py:build --no-ui --preset smoke

`build` returns a compiled Keras 3 model; tpulab times `fit` and `predict` on random inputs of
its input shape (and labels from its output), on the backend and shards you choose.
"""

import keras


def build():
    model = keras.Sequential([
        keras.Input((64,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model
