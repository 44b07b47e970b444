"""ResNet-50 trained with Keras on synthetic images (`workload`), run by the shared Keras runner."""

from tpulab.workloads.resnet50.workload import RESNET50, forward_macs

__all__ = ["RESNET50", "forward_macs"]
