"""A Hugging Face image classifier (a small ViT), built from its config with random weights.

    pip install 'tpulab[hf]'
    tpulab run model --model examples/models/hf_image_classifier.py:build --no-ui --preset smoke

`build()` returns the model and one batch, `{"pixel_values": ...}`: its output (an `ImageClassifierOutput`) has
`logits` and, with no labels given, no loss, so tpulab trains cross-entropy on the logits against a random class
per image, and says that the loss is its choice.
"""

import torch
from transformers import ViTConfig, ViTForImageClassification


def build():
    config = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=128, num_labels=10)
    return ViTForImageClassification(config), {"pixel_values": torch.randn(16, 3, 32, 32)}
