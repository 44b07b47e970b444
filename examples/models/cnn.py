"""A small image classifier, trained on your own arrays: return `(model, (x, y))` to give tpulab data.

    tpulab --run model --model examples/models/cnn.py:build --no-ui --preset smoke

Without the data, tpulab would make random images of the model's input shape (32x32x3) itself.
"""

import keras
import numpy as np


def build():
    model = keras.Sequential([
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    rng = np.random.default_rng(0)  # stand-ins: load your own images and labels here
    x = rng.random((256, 32, 32, 3), dtype=np.float32)
    y = rng.integers(0, 10, size=(256,))
    return model, (x, y)
