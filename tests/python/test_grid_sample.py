"""grid_sampler_2d / grid_sampler_3d (F.grid_sample) and antialiased interpolate against CPU
PyTorch, forward and backward, over the mode / padding / align_corners matrix, with no CPU
fallback."""
import pytest
import torch
import torch.nn.functional as F

from torchtpu.testing.fallbacks import fallback_counts, new_fallbacks
from conftest import check_forward_backward

TOL = dict(rtol=1e-4, atol=1e-5)


def _check(fn, inputs, grad_args=(0, 1)):
    check_forward_backward(fn, inputs, grad_args, **TOL)


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


# ---- grid_sampler_3d backward ----

@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d_backward(mode, padding, align):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5, 6)
    grid = torch.rand(2, 3, 4, 5, 3) * 3 - 1.5  # many samples outside [-1, 1]

    def fn(a, g):
        return F.grid_sample(a, g, mode=mode, padding_mode=padding, align_corners=align)

    cpu = [x.clone().requires_grad_(), grid.clone().requires_grad_()]
    dev = [x.to("tpu").requires_grad_(), grid.to("tpu").requires_grad_()]
    before = fallback_counts()
    out_cpu, out_dev = fn(*cpu), fn(*dev)
    gout = torch.randn_like(out_cpu)
    g_cpu = torch.autograd.grad(out_cpu, cpu, gout)
    g_dev = torch.autograd.grad(out_dev, dev, gout.to("tpu"))
    for a, e in zip(g_dev, g_cpu):
        assert a.dtype == e.dtype and a.shape == e.shape
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-5)
    # Only the grid's gradient (the input's is not requested).
    g_grid = torch.autograd.grad(fn(x.to("tpu"), dev[1]), dev[1], gout.to("tpu"))[0]
    torch.testing.assert_close(g_grid.cpu(), g_cpu[1], rtol=1e-4, atol=1e-5)
    assert not new_fallbacks(before)


def test_grid_sample_3d_backward_opinfo_samples():
    from torch.testing._internal.common_methods_invocations import op_db

    before = fallback_counts()
    for name in ("grid_sampler_3d", "nn.functional.grid_sample"):
        info = next(o for o in op_db if o.name == name)
        for s in info.sample_inputs("cpu", torch.float32, requires_grad=True):
            if s.input.dim() != 5:
                continue
            args = [a for a in s.args]
            cpu_out = info.op(s.input, *args, **s.kwargs)
            g_cpu = torch.autograd.grad(cpu_out.sum(), [s.input, args[0]])
            d_in = s.input.detach().to("tpu").requires_grad_()
            d_grid = args[0].detach().to("tpu").requires_grad_()
            dev_out = info.op(d_in, d_grid, *args[1:], **s.kwargs)
            g_dev = torch.autograd.grad(dev_out.sum(), [d_in, d_grid])
            for a, e in zip(g_dev, g_cpu):
                torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-5)
    assert not new_fallbacks(before)


CPU_FALLBACK_OP = torch.ops.aten._grid_sampler_2d_cpu_fallback


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", [0, 1, 2])
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_grid_sampler_2d_cpu_fallback_op(mode, padding, align):
    # PyTorch's reference form of the 2-D sampler, callable directly: its only kernel is
    # CompositeExplicitAutograd and reads host memory, so on tpu it silently returned zeros
    # (issue 32: [0, 0, 0, 0] where the CPU gives [-0.75, -0.375, 0.375, 0.75]). It lowers to the
    # sampler now: default, out= and backward against the CPU.
    torch.manual_seed(1)
    x = torch.randn(2, 3, 5, 7)
    grid = torch.rand(2, 4, 6, 2) * 2.6 - 1.3
    args = (mode, padding, align)
    _check(lambda a, g: CPU_FALLBACK_OP(a, g, *args), [x, grid])
    want = CPU_FALLBACK_OP(x, grid, *args)
    out = torch.empty(0, device="tpu")
    r = torch.ops.aten._grid_sampler_2d_cpu_fallback.out(x.to("tpu"), grid.to("tpu"), *args,
                                                        out=out)
    assert r is out
    torch.testing.assert_close(out.cpu(), want, **TOL)
    go = torch.randn_like(want)
    back = torch.ops.aten._grid_sampler_2d_cpu_fallback_backward
    for got, ref in zip(back(go.to("tpu"), x.to("tpu"), grid.to("tpu"), *args),
                        back(go, x, grid, *args)):
        torch.testing.assert_close(got.cpu(), ref, **TOL)


def test_grid_sampler_2d_cpu_fallback_issue_example():
    x = torch.tensor([[[[-1.0, -0.5, 0.0], [-0.5, 0.0, 0.5], [0.0, 0.5, 1.0]]]])
    grid = torch.tensor([[[[-0.5, -0.5], [0.5, -0.5]], [[-0.5, 0.5], [0.5, 0.5]]]])
    before = fallback_counts()
    got = CPU_FALLBACK_OP(x.to("tpu"), grid.to("tpu"), 0, 0, False).cpu()
    assert not new_fallbacks(before)
    want = CPU_FALLBACK_OP(x, grid, 0, 0, False)
    assert want.abs().sum() > 0
    torch.testing.assert_close(got, want, **TOL)
