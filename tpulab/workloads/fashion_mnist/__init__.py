"""The article's Fashion-MNIST CNN trained with Keras (`workload`): its model, data and FLOPs, run by the shared
Keras runner on every Keras backend."""

from tpulab.workloads.fashion_mnist.workload import FASHION_MNIST, build_model, forward_flops_per_example

__all__ = ["FASHION_MNIST", "build_model", "forward_flops_per_example"]
