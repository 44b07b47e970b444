"""Your own training step, written for JAX: run it with --backend jax.

    tpulab --run model --model examples/models/jax_train_step.py:build --backend jax --no-ui --preset smoke

Keras calls train_step(state, data) on JAX and train_step(data) on TensorFlow, so a step is
written for one backend; on the other tpulab says so in one line.
"""

import jax
import keras


class OwnStep(keras.Model):
    def loss_and_updates(self, trainable, non_trainable, x, y):
        y_pred, non_trainable = self.stateless_call(trainable, non_trainable, x, training=True)
        return self.compute_loss(x, y, y_pred), non_trainable

    def train_step(self, state, data):
        trainable, non_trainable, optimizer_variables, metrics_variables = state
        x, y = data
        grad = jax.value_and_grad(self.loss_and_updates, has_aux=True)
        (loss, non_trainable), grads = grad(trainable, non_trainable, x, y)
        trainable, optimizer_variables = self.optimizer.stateless_apply(optimizer_variables, grads, trainable)
        return {"loss": loss}, (trainable, non_trainable, optimizer_variables, metrics_variables)


def build():
    x = keras.Input((64,))
    model = OwnStep(x, keras.layers.Dense(10)(keras.layers.Dense(256, activation="relu")(x)))
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model
