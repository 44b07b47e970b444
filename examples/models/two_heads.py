"""Two inputs (features and word ids) and two named outputs, each with its own loss.

    tpulab --run model --model examples/models/two_heads.py:build --no-ui --preset smoke

tpulab makes each input by its name, shape and dtype (word ids below the Embedding's 1000) and
each target from its output and loss: class labels for "topic", floats for "score".
"""

import keras


def build():
    features = keras.Input((16,), name="features")
    words = keras.Input((20,), dtype="int32", name="words")
    text = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(1000, 32)(words))
    h = keras.layers.Dense(64, activation="relu")(keras.layers.Concatenate()([features, text]))
    topic, score = keras.layers.Dense(5, name="topic")(h), keras.layers.Dense(1, name="score")(h)
    model = keras.Model({"features": features, "words": words}, {"topic": topic, "score": score})
    model.compile(optimizer="adam", loss={"topic": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                                          "score": "mse"})
    return model
