"""A small CNN for 32×32 RGB images in 10 classes, written as a user of trickbench writes one.
Measure the training tricks on it with

    trickbench run --model examples/cnn.py
"""

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        )
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def model():
    """The network trickbench trains."""
    return Net()


def batch(batch_size):
    """One batch: random images and their class labels."""
    images = torch.randn(batch_size, 3, 32, 32)
    labels = torch.randint(0, 10, (batch_size,))
    return images, labels
