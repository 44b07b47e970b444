"""A subclassed model: Keras cannot see its input until it is called, so give its shape.

    tpulab --run model --model examples/models/subclassed.py:build --input-shape 64 --no-ui --preset smoke

`--input-shape` is one example's shape without the batch axis (64 here; 32,32,3 for images).
"""

import keras


class Classifier(keras.Model):
    def __init__(self, classes=10):
        super().__init__()
        self.hidden = keras.layers.Dense(256, activation="relu")
        self.out = keras.layers.Dense(classes)

    def call(self, x):
        return self.out(self.hidden(x))


def build():
    model = Classifier()
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model
