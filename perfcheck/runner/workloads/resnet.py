"""ResNet with bottleneck blocks (the ResNet-50 v1.5 layout), written in plain torch.nn."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ._common import Workload, build_model, input_generator, randn


class Bottleneck(nn.Module):
    """1x1 reduce -> 3x3 (strided) -> 1x1 expand, each conv-bn, with a residual add before the last ReLU."""

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        # Striding in the 3x3 rather than the first 1x1 is the "v1.5" variant that benchmarks use.
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        # nn.Identity instead of None keeps forward free of a branch on module attributes.
        self.downsample: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """Stem (7x7/2 conv, max-pool), bottleneck stages doubling the width, global average pool, linear head."""

    def __init__(
        self, blocks_per_stage: Sequence[int], base_width: int = 64, num_classes: int = 1000
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, base_width, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(base_width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        stages: list[nn.Module] = []
        in_channels = base_width
        for i, n_blocks in enumerate(blocks_per_stage):
            width = base_width * 2**i
            blocks: list[nn.Module] = []
            for j in range(n_blocks):
                # Only the first block of stages after the first downsamples.
                stride = 2 if i > 0 and j == 0 else 1
                blocks.append(Bottleneck(in_channels, width, stride))
                in_channels = width * Bottleneck.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def _build(
    device: str | torch.device,
    blocks_per_stage: Sequence[int],
    base_width: int,
    num_classes: int,
    batch: int,
    image_size: int,
) -> Workload:
    model = build_model(lambda: ResNet(blocks_per_stage, base_width, num_classes), device)
    x = randn(batch, 3, image_size, image_size, device=device, generator=input_generator())
    return model, (x,)


def resnet50(device: str | torch.device) -> Workload:
    """ResNet-50: stages [3, 4, 6, 3], outputs 256..2048 wide, 1000 classes; input 128 x 3 x 224 x 224."""
    return _build(device, (3, 4, 6, 3), base_width=64, num_classes=1000, batch=128, image_size=224)


def resnet_tiny(device: str | torch.device) -> Workload:
    """Same code, stages [1, 1], widths 8 and 16 (32 and 64 out), 10 classes; input 4 x 3 x 32 x 32."""
    return _build(device, (1, 1), base_width=8, num_classes=10, batch=4, image_size=32)
