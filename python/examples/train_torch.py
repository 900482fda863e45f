"""Train a small torch classifier whose layers run through bufkern's autograd Functions.

Synthetic task: noisy sine waves of three frequencies, one class per
frequency. The model is a 1-D convolution (bufkern.torch.conv), a ReLU (torch),
a sum over the time axis (bufkern.torch.sum_axis), layer normalization
(bufkern.torch.layer_norm), a linear layer (bufkern.torch.bmm) and the mean
cross-entropy against one-hot labels (bufkern.torch.xent_weighted_mean). The
library runs every layer's forward pass and its backward pass, all but the
elementwise steps (the ReLU, the 1/LENGTH scaling and the cross-entropy
gradient's products), which torch does; Adam updates the parameters.

    python3 python/examples/train_torch.py --steps 300

prints the loss every 50 steps and the final training accuracy. Pass
--device cuda to train on a GPU (a CUDA build of the library and of torch).
"""

from __future__ import annotations

import argparse
import math
from typing import List

import torch

import bufkern.torch as bkt

CLASSES = 3
LENGTH = 32


def make_data(count: int, generator: torch.Generator, dtype=torch.float64, device="cpu"):
    """(signals (count, 1, LENGTH), labels (count,)): class c is a sine of
    frequency c + 1 cycles per window, with a random phase and Gaussian noise."""
    labels = torch.randint(0, CLASSES, (count,), generator=generator)
    phase = torch.rand(count, 1, generator=generator) * 2 * math.pi
    t = torch.arange(LENGTH, dtype=torch.float64) / LENGTH
    signals = torch.sin(2 * math.pi * (labels.to(torch.float64) + 1).unsqueeze(1) * t + phase)
    signals = signals + 0.3 * torch.randn(count, LENGTH, generator=generator, dtype=torch.float64)
    return signals.unsqueeze(1).to(dtype=dtype, device=device), labels.to(device)


class Classifier(torch.nn.Module):
    """conv (1 -> channels, kernel 7, same padding) -> ReLU -> sum over time ->
    layer norm -> linear (channels -> CLASSES)."""

    def __init__(self, channels: int, generator: torch.Generator, dtype=torch.float64):
        super().__init__()
        self.kernel = torch.nn.Parameter(torch.randn(channels, 1, 7, generator=generator, dtype=dtype) * 0.4)
        self.bias = torch.nn.Parameter(torch.zeros(channels, dtype=dtype))
        self.gamma = torch.nn.Parameter(torch.ones(channels, dtype=dtype))
        self.beta = torch.nn.Parameter(torch.zeros(channels, dtype=dtype))
        self.weight = torch.nn.Parameter(
            torch.randn(channels, CLASSES, generator=generator, dtype=dtype) / math.sqrt(channels)
        )

    def forward(self, signals: torch.Tensor) -> torch.Tensor:
        h = bkt.conv(signals, self.kernel, self.bias, pad_before=3, pad_after=3)
        h = bkt.sum_axis(torch.relu(h), axis=-1) / LENGTH
        h = bkt.layer_norm(h, self.gamma, self.beta, eps=1e-5)
        return bkt.bmm(h, self.weight)


def train(steps: int = 300, seed: int = 0, device: str = "cpu", batch: int = 64):
    """Train for `steps` Adam steps, each on a fresh batch; returns (model, the
    loss of every step)."""
    generator = torch.Generator().manual_seed(seed)
    model = Classifier(channels=8, generator=generator).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.03)
    losses: List[float] = []
    for _ in range(steps):
        signals, labels = make_data(batch, generator, device=device)
        one_hot = torch.nn.functional.one_hot(labels, CLASSES).to(signals.dtype)
        loss = bkt.xent_weighted_mean(model(signals), one_hot)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return model, losses


def accuracy(model: Classifier, seed: int, device: str = "cpu", count: int = 512) -> float:
    """The fraction of `count` fresh signals (drawn from `seed`) that the model classifies right."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        signals, labels = make_data(count, generator, device=device)
        predicted = bkt.softmax(model(signals), dim=-1).argmax(-1)
    return float((predicted == labels).to(torch.float64).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    model, losses = train(args.steps, args.seed, args.device)
    for step in range(0, len(losses), 50):
        print(f"step {step:4d}  loss {losses[step]:.4f}")
    print(f"step {len(losses) - 1:4d}  loss {losses[-1]:.4f}")
    print(f"accuracy on fresh signals: {accuracy(model, args.seed + 1, args.device):.3f}")


if __name__ == "__main__":
    main()
