"""A timm image model (a ResNet-18 for 10 classes), random weights, on small images.

    pip install 'tpulab[timm]'
    tpulab run model --model examples/models/timm_model.py:build --no-ui --preset smoke

`build()` returns the model and one batch of example images: tpulab trains it on random images like them with
cross-entropy (a class per image), at the example's batch of 16. `--model timm:resnet18` builds the same
architecture by name instead, on images of the size its config names (224 x 224).
"""

import timm
import torch


def build():
    return timm.create_model("resnet18", pretrained=False, num_classes=10), torch.randn(16, 3, 64, 64)
