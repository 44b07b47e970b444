"""The user's own model (`workload`): where it is found (`target`), its data (`data`), the Keras model's build and
fit (`keras`) and the PyTorch module's runner (`torch`)."""

from tpulab.workloads.user_model.workload import MODEL_WORKLOAD, UserModel, input_shape, target

__all__ = ["MODEL_WORKLOAD", "UserModel", "input_shape", "target"]
