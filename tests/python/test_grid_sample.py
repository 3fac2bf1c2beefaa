"""grid_sampler_2d / grid_sampler_3d (F.grid_sample) and antialiased interpolate against CPU
PyTorch, forward and backward, over the mode / padding / align_corners matrix, with no CPU
fallback."""
import pytest
import torch
import torch.nn.functional as F

import torchtpu

TOL = dict(rtol=1e-4, atol=1e-5)


def _fallbacks():
    return dict(torchtpu.metrics()["cpu_fallbacks_by_op"])


def _check(fn, inputs, grad_args=(0, 1)):
    before = _fallbacks()
    cpu = [x.detach().clone().requires_grad_(i in grad_args) for i, x in enumerate(inputs)]
    dev = [x.detach().to("tpu").requires_grad_(i in grad_args) for i, x in enumerate(inputs)]
    out_cpu, out_tpu = fn(*cpu), fn(*dev)
    assert out_tpu.dtype == out_cpu.dtype and out_tpu.shape == out_cpu.shape
    torch.testing.assert_close(out_tpu.cpu(), out_cpu, **TOL)
    grad = torch.randn_like(out_cpu)
    out_cpu.backward(grad)
    out_tpu.backward(grad.to("tpu"))
    for i in grad_args:
        torch.testing.assert_close(dev[i].grad.cpu(), cpu[i].grad, **TOL)
    assert _fallbacks() == before, {k: v for k, v in _fallbacks().items() if before.get(k) != v}


PADDINGS = ["zeros", "border", "reflection"]


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_2d(mode, padding, align):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 7)
    grid = torch.rand(2, 4, 6, 2) * 2.6 - 1.3  # some samples outside [-1, 1]
    _check(lambda a, g: F.grid_sample(a, g, mode=mode, padding_mode=padding,
                                      align_corners=align), [x, grid])


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d(mode, padding, align):
    # Forward and backward (grid_sampler_3d_backward is native too).
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5, 6)
    grid = torch.rand(2, 3, 4, 5, 3) * 2.6 - 1.3
    _check(lambda a, g: F.grid_sample(a, g, mode=mode, padding_mode=padding,
                                      align_corners=align), [x, grid])


def test_grid_sample_input_grad_only():
    torch.manual_seed(0)
    x, grid = torch.randn(1, 2, 4, 4), torch.rand(1, 3, 3, 2) * 2 - 1
    _check(lambda a, g: F.grid_sample(a, g, align_corners=False), [x, grid], grad_args=(0,))
    _check(lambda a, g: F.grid_sample(a, g, align_corners=False), [x, grid], grad_args=(1,))


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("size,scale", [((3, 5), None), ((9, 13), None), ((4, 11), None),
                                        (None, (0.6, 1.7))])
def test_interpolate_antialias(mode, align, size, scale):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 8)
    _check(lambda a: F.interpolate(a, size=size, scale_factor=scale, mode=mode,
                                   align_corners=align, antialias=True), [x], grad_args=(0,))
