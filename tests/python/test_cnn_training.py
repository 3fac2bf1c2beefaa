"""A small CNN (conv, batch norm, max pool, dropout, linear) trained on synthetic images on tpu.

Dropout and CPU parity. The tpu generator draws its masks with XLA's random bits (seed and
offset per call), CPU with its Mersenne Twister: the same seed gives different masks, so a run
with live dropout cannot match CPU step for step, and faking it (a mask drawn on CPU and
uploaded) would no longer test the tpu dropout kernel. So the parity run puts only the Dropout
module in eval mode (the identity; batch norm stays in training mode, updating running stats
from batch statistics), which makes both runs compute the same function; and a second test
trains with live dropout on tpu and checks what can be checked honestly: the loss falls, the
run is bit-for-bit reproducible under torch.manual_seed, a different seed gives a different run
(the masks are live), and dropout's masks keep about 1 - p of the activations scaled by 1/(1-p).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

import torchtpu


class SmallCNN(nn.Module):
    def __init__(self, p=0.25):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.dropout = nn.Dropout(p)
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        return self.head(self.dropout(self.features(x).flatten(1)))


def synthetic_data():
    g = torch.Generator().manual_seed(7)
    images = torch.randn(32, 3, 16, 16, generator=g)
    labels = torch.randint(0, 10, (32,), generator=g)
    return images, labels


def train(model, device, steps, seed=None):
    images, labels = synthetic_data()
    images, labels = images.to(device), labels.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if seed is not None:
        torch.manual_seed(seed)
    losses = []
    for step in range(steps):
        # Two minibatches of 16 alternate, so batch statistics differ from step to step.
        x, y = images[(step % 2) * 16:][:16], labels[(step % 2) * 16:][:16]
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses).cpu()


def test_cnn_training_matches_cpu_with_dropout_as_identity():
    torch.manual_seed(0)
    model = SmallCNN()
    m_cpu, m_tpu = copy.deepcopy(model), copy.deepcopy(model).to("tpu")
    for m in (m_cpu, m_tpu):
        m.train()
        m.dropout.eval()  # identity on both devices; see the module docstring
    before = torchtpu.metrics()["cpu_fallbacks"]
    losses_tpu = train(m_tpu, "tpu", 20)
    assert torchtpu.metrics()["cpu_fallbacks"] == before, torchtpu.metrics()["cpu_fallbacks_by_op"]
    losses_cpu = train(m_cpu, "cpu", 20)
    assert losses_cpu[-4:].mean() < losses_cpu[0] * 0.5
    torch.testing.assert_close(losses_tpu, losses_cpu, rtol=1e-4, atol=0)
    # Parameters and batch-norm running statistics (buffers) after 20 momentum SGD steps.
    state_cpu, state_tpu = m_cpu.state_dict(), m_tpu.state_dict()
    for name, v in state_cpu.items():
        torch.testing.assert_close(state_tpu[name].cpu(), v, rtol=1e-3, atol=1e-4,
                                   msg=lambda m, name=name: f"{name}: {m}")


def test_cnn_training_with_live_dropout_on_tpu_is_reproducible():
    torch.manual_seed(0)
    model = SmallCNN(p=0.5)
    before = torchtpu.metrics()["cpu_fallbacks"]
    runs = {}
    for name, seed in (("a", 1234), ("b", 1234), ("other", 99)):
        m = copy.deepcopy(model).to("tpu").train()
        runs[name] = (train(m, "tpu", 12, seed=seed), m.head.weight.detach().cpu())
    assert torchtpu.metrics()["cpu_fallbacks"] == before, torchtpu.metrics()["cpu_fallbacks_by_op"]
    losses, head = runs["a"]
    assert losses[-4:].mean() < losses[0] * 0.8, losses
    torch.testing.assert_close(runs["b"][0], losses, rtol=0, atol=0)
    torch.testing.assert_close(runs["b"][1], head, rtol=0, atol=0)
    assert not torch.equal(runs["other"][0], losses)

    # The masks themselves: p = 0.5 keeps about half, scaled by 2.
    torch.manual_seed(5)
    y = nn.functional.dropout(torch.ones(64, 256, device="tpu"), p=0.5, training=True).cpu()
    kept = y != 0
    assert 0.45 < kept.float().mean().item() < 0.55
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 2.0))
