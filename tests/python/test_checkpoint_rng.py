"""torch.utils.checkpoint recomputes a block's forward in the backward; a block that draws random
numbers (dropout, Diffusers' LTX-Video VAE noise injection) must draw the same ones again, as on
the CPU, or gradients with and without checkpointing differ."""

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import torchtpu  # noqa: F401


def _block(x, w):
    noise = torch.randn(x.shape, device=x.device)
    return torch.nn.functional.dropout((x * w + noise * w).sin(), 0.3)


def _grads(device, use_reentrant):
    torch.manual_seed(0)
    x = torch.randn(6, 5).to(device)
    w = torch.randn(5).to(device).requires_grad_()
    get = torch.get_rng_state if device == "cpu" else torch.tpu.get_rng_state
    put = torch.set_rng_state if device == "cpu" else torch.tpu.set_rng_state
    state = get()
    _block(x, w).sum().backward()
    plain = w.grad.cpu()
    w.grad = None
    put(state)
    checkpoint(_block, x, w, use_reentrant=use_reentrant).sum().backward()
    return plain, w.grad.cpu()


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpointed_random_block_grads_match_plain_like_cpu(use_reentrant):
    cpu_plain, cpu_ckpt = _grads("cpu", use_reentrant)
    torch.testing.assert_close(cpu_ckpt, cpu_plain)  # what the CPU does
    tpu_plain, tpu_ckpt = _grads("tpu", use_reentrant)
    torch.testing.assert_close(tpu_ckpt, tpu_plain)


def test_initialized_flag_follows_runtime():
    torch.empty(1, device="tpu")
    assert torch.tpu._initialized is True
    with pytest.raises(AttributeError):
        torch.tpu._no_such_attribute
