"""A ShuffleNetV2-style network for 32×32 RGB images in 10 classes, written as a CIFAR training
repository writes one: each unit splits its channels in two, convolves one half (1×1, depthwise
3×3, 1×1), joins the halves and shuffles the channels with a view, a transpose and a view. Measure
the tricks on it with

    trickbench run --model examples/shufflenet.py

Under channels-last the shuffle's transpose and views act on NHWC memory, which is why this model
is the one to ask what channels-last costs a network that reshapes its channels.
"""

import torch
import torch.nn as nn


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Interleaves the channels of `groups` groups: a view, a transpose and a view."""
    n, c, h, w = x.size()
    x = x.view(n, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(n, c, h, w)


def conv_bn(inputs, outputs, kernel, stride=1, groups=1, relu=True):
    """A convolution without bias, its BatchNorm and, where asked, a ReLU."""
    layers = [
        nn.Conv2d(inputs, outputs, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(outputs),
    ]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class Unit(nn.Module):
    """A unit that keeps the resolution: half the channels pass, half are convolved."""

    def __init__(self, channels):
        super().__init__()
        half = channels // 2
        self.branch = nn.Sequential(
            conv_bn(half, half, 1),
            conv_bn(half, half, 3, groups=half, relu=False),
            conv_bn(half, half, 1),
        )

    def forward(self, x):
        kept, convolved = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat([kept, self.branch(convolved)], dim=1), 2)


class Down(nn.Module):
    """A unit that halves the resolution: both halves convolved with stride 2."""

    def __init__(self, inputs, outputs):
        super().__init__()
        half = outputs // 2
        self.left = nn.Sequential(conv_bn(inputs, inputs, 3, 2, groups=inputs, relu=False), conv_bn(inputs, half, 1))
        self.right = nn.Sequential(
            conv_bn(inputs, half, 1),
            conv_bn(half, half, 3, 2, groups=half, relu=False),
            conv_bn(half, half, 1),
        )

    def forward(self, x):
        return channel_shuffle(torch.cat([self.left(x), self.right(x)], dim=1), 2)


class ShuffleNet(nn.Module):
    """Three stages of 48, 96 and 192 channels (ShuffleNetV2 at half width), then a classifier."""

    def __init__(self, classes=10, widths=(48, 96, 192), repeats=(3, 7, 3)):
        super().__init__()
        self.stem = conv_bn(3, 24, 3)
        stages, inputs = [], 24
        for width, repeat in zip(widths, repeats):
            stages.append(Down(inputs, width))
            stages.extend(Unit(width) for _ in range(repeat))
            inputs = width
        self.stages = nn.Sequential(*stages)
        self.head = conv_bn(inputs, 512, 1)
        self.classifier = nn.Linear(512, classes)

    def forward(self, x):
        x = self.head(self.stages(self.stem(x)))
        return self.classifier(x.mean(dim=(2, 3)))


def model():
    """The network trickbench trains."""
    return ShuffleNet()


def batch(batch_size):
    """One batch: random images and their class labels."""
    images = torch.randn(batch_size, 3, 32, 32)
    labels = torch.randint(0, 10, (batch_size,))
    return images, labels
