"""Memory formats on tpu as on the CPU: channels_last (and channels_last_3d) tensors keep their
strides through copies, and ops whose CPU result is channels_last (convolution, batch_norm,
pooling, elementwise ops) return channels_last tensors with the CPU's strides and values."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchtpu  # noqa: F401

CL, CL3 = torch.channels_last, torch.channels_last_3d


def cl_input(shape=(2, 3, 6, 5), fmt=CL, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).contiguous(memory_format=fmt)


def assert_like_cpu(tpu, cpu, **tol):
    assert tpu.shape == cpu.shape and tpu.dtype == cpu.dtype
    assert tpu.stride() == cpu.stride(), (tpu.stride(), cpu.stride())
    for fmt in (torch.contiguous_format, CL) if cpu.dim() == 4 else (torch.contiguous_format,):
        assert tpu.is_contiguous(memory_format=fmt) == cpu.is_contiguous(memory_format=fmt)
    torch.testing.assert_close(tpu.cpu(), cpu, **tol)


def test_copies_keep_channels_last():
    x = cl_input()
    t = x.to("tpu")
    assert_like_cpu(t, x)
    assert t.is_contiguous(memory_format=CL) and not t.is_contiguous()
    assert_like_cpu(t.contiguous(), x.contiguous())
    y = x.contiguous()
    assert_like_cpu(y.to("tpu").contiguous(memory_format=CL), y.contiguous(memory_format=CL))
    assert_like_cpu(y.to("tpu").to(memory_format=CL), y.to(memory_format=CL))
    e = torch.empty(2, 3, 4, 5, device="tpu", memory_format=CL)
    assert e.stride() == torch.empty(2, 3, 4, 5, memory_format=CL).stride()
    assert_like_cpu(torch.empty_like(t).copy_(t), torch.empty_like(x).copy_(x))
    assert_like_cpu(t.clone(), x.clone())


UNARY = {
    "relu": F.relu,
    "add_scalar": lambda x: x + 1,
    "mul_self": lambda x: x * x,
    "sigmoid": torch.sigmoid,
    "gelu": F.gelu,
    "to_double": lambda x: x.double(),
    "max_pool2d": lambda x: F.max_pool2d(x, 2),
    "avg_pool2d": lambda x: F.avg_pool2d(x, 2),
    "adaptive_avg_pool2d": lambda x: F.adaptive_avg_pool2d(x, 1),
    "batch_norm_eval": lambda x: F.batch_norm(x, torch.zeros(3, device=x.device),
                                              torch.ones(3, device=x.device)),
    "batch_norm_train": lambda x: F.batch_norm(x, None, None, training=True),
    "conv2d": lambda x: F.conv2d(x, torch.ones(4, 3, 3, 3, device=x.device) / 27, padding=1),
    "conv2d_stride2": lambda x: F.conv2d(x, torch.ones(2, 3, 2, 2, device=x.device), stride=2),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_channels_last_results_match_cpu(name):
    fn = UNARY[name]
    x = cl_input()
    assert_like_cpu(fn(x.to("tpu")), fn(x), rtol=1e-5, atol=1e-5)


def test_channels_last_binary_with_contiguous_operand():
    x, y = cl_input(), cl_input(seed=1).contiguous()
    assert_like_cpu(x.to("tpu") + y.to("tpu"), x + y)
    assert_like_cpu(y.to("tpu") * x.to("tpu"), y * x)


def test_conv_channels_last_weight_and_backward():
    x = cl_input().requires_grad_()
    w = torch.randn(4, 3, 3, 3).contiguous(memory_format=CL).requires_grad_()
    tx = x.detach().to("tpu").requires_grad_()
    tw = w.detach().to("tpu").requires_grad_()
    out, tout = F.conv2d(x, w, padding=1), F.conv2d(tx, tw, padding=1)
    assert_like_cpu(tout, out, rtol=1e-5, atol=1e-5)
    g = torch.randn(out.shape)
    out.backward(g)
    tout.backward(g.to("tpu"))
    torch.testing.assert_close(tx.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tw.grad.cpu(), w.grad, rtol=1e-5, atol=1e-5)


def test_channels_last_3d():
    x = cl_input((2, 3, 4, 5, 3), CL3)
    t = x.to("tpu")
    assert t.stride() == x.stride() and t.is_contiguous(memory_format=CL3)
    w = torch.ones(2, 3, 2, 2, 2) / 8
    assert_like_cpu(F.conv3d(t, w.to("tpu")), F.conv3d(x, w), rtol=1e-5, atol=1e-5)
    assert_like_cpu(F.relu(t), F.relu(x))


def test_channels_last_module_training_matches_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3))
    model = model.to(memory_format=CL)
    tmodel = __import__("copy").deepcopy(model).to("tpu")
    x = cl_input((4, 3, 8, 8))
    out, tout = model(x), tmodel(x.to("tpu"))
    assert_like_cpu(tout, out, rtol=1e-4, atol=1e-4)
    out.sum().backward()
    tout.sum().backward()
    for p, tp in zip(model.parameters(), tmodel.parameters()):
        torch.testing.assert_close(tp.grad.cpu(), p.grad, rtol=1e-4, atol=1e-4)


RESTART_CHILD = """
import json, torch, torchtpu, torch.nn.functional as F
g = torch.Generator().manual_seed(0)
x = torch.randn(2, 3, 6, 5, generator=g).contiguous(memory_format=torch.channels_last)
w, b, cw = torch.randn(3, generator=g), torch.randn(3, generator=g), torch.randn(4, 3, 3, 3)
fns = {
    "batch_norm": lambda x, w, b, cw: F.batch_norm(x, None, None, w, b, training=True),
    "conv": lambda x, w, b, cw: F.conv2d(x, cw),
    "relu": lambda x, w, b, cw: x.relu(),
    "avg_pool": lambda x, w, b, cw: F.avg_pool2d(x, 2),
}
res = {}
for name, fn in fns.items():
    want = fn(x, w, b, cw)
    got = fn(*(t.to("tpu") for t in (x, w, b, cw)))
    res[name] = [list(got.shape) == list(want.shape), got.stride() == want.stride(),
                 torch.allclose(got.cpu(), want, atol=1e-5)]
print(json.dumps({"res": res, "hits": torchtpu.metrics()["disk_cache_signature_hits"]}))
"""


def test_channels_last_results_survive_a_restart(run_python, tmp_path):
    # The second process finds each op's program through its on-disk signature recipe, which
    # must carry the result's logical shape and strides (it once returned the physical shape).
    import json

    for _ in range(2):
        out = run_python(RESTART_CHILD, TORCHTPU_CACHE_DIR=str(tmp_path / "cache"),
                         TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "torch"))
        r = json.loads(out.stdout.strip().splitlines()[-1])
        assert all(all(v) for v in r["res"].values()), r
    assert r["hits"] > 0, r


LAYOUTS = {
    "channels_last": lambda: cl_input(),
    "channels_last_3d": lambda: cl_input((2, 3, 4, 3, 2), CL3),
    "transposed": lambda: torch.randn(5, 7).t(),
    "permuted": lambda: torch.randn(2, 3, 4).permute(2, 0, 1),
    "strided_slice": lambda: torch.randn(6, 8)[:, ::2],
    "expanded": lambda: torch.randn(3, 1).expand(3, 4),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dtype_casts_and_host_copies_keep_cpu_strides(layout):
    x = LAYOUTS[layout]()
    t = x.to("tpu")
    for dtype in (torch.float64, torch.float16, torch.int32, torch.bool):
        got, want = t.to(dtype), x.to(dtype)
        assert got.stride() == want.stride(), (dtype, got.stride(), want.stride())
        torch.testing.assert_close(got.cpu(), want)
        back = got.cpu()  # .cpu() keeps the device tensor's strides, like the CPU's .clone()
        assert back.stride() == got.stride() == want.stride()


@pytest.mark.parametrize("case", [((4, 3), 0, 1, 3, 1), ((4, 6), 1, 1, 5, 2), ((5, 4), 0, 0, 4, 2),
                                  ((6, 4, 2), 1, 1, 3, 1)], ids=str)
@pytest.mark.parametrize("transposed", [False, True])
def test_slice_inverse_matches_cpu(case, transposed):
    shape, dim, start, end, step = case
    base = torch.randn(shape)
    if transposed:  # a base whose dims are stored in reverse order
        base = base.transpose(0, -1).contiguous().transpose(0, -1)
    index = (slice(None),) * dim + (slice(start, end, step),)
    want = torch.ops.aten.slice_inverse(base[index], base, dim, start, end, step)
    tb = base.to("tpu")
    got = torch.ops.aten.slice_inverse(tb[index], tb, dim, start, end, step)
    assert got.shape == want.shape and got.stride() == want.stride()
    assert got.storage_offset() == want.storage_offset()
    assert torch.equal(got.cpu(), want)


def test_im2col_out_into_strided_out_keeps_logical_values():
    # Issue 18 listed im2col.out among forms failing to lower; every kernel/dilation/padding/
    # stride combination we tried matches the CPU. One form differs by the CPU's fault: into a
    # non-contiguous out, the CPU's im2col_out writes the contiguous layout through the raw
    # pointer (its values are the contiguous result reinterpreted with out's strides); tpu writes
    # the logical values, as the functional im2col gives them.
    x = torch.randn(1, 2, 5, 5, generator=torch.Generator().manual_seed(0))
    args = ([2, 2], [1, 1], [0, 0], [1, 1])
    want = torch.ops.aten.im2col(x, *args)
    out = torch.empty(1, 16, 8, device="tpu").transpose(1, 2)
    got = torch.ops.aten.im2col.out(x.to("tpu"), *args, out=out)
    assert got is out and out.stride() == (128, 1, 8)
    torch.testing.assert_close(out.cpu(), want, rtol=0, atol=0)
    cpu_out = torch.empty(1, 16, 8).transpose(1, 2)
    torch.ops.aten.im2col.out(x, *args, out=cpu_out)
    assert torch.equal(torch.as_strided(cpu_out, (1, 8, 16), (128, 16, 1)), want)  # the CPU bug
    for k, d, p, s in [([3, 2], [2, 1], [1, 2], [2, 1]), ([2, 2], [3, 3], [2, 2], [3, 3]),
                       ([4, 1], [1, 2], [0, 3], [1, 4])]:
        ref = torch.ops.aten.im2col(x, k, d, p, s)
        res = torch.ops.aten.im2col.out(x.to("tpu"), k, d, p, s,
                                        out=torch.empty(0, device="tpu"))
        torch.testing.assert_close(res.cpu(), ref, rtol=0, atol=0)
