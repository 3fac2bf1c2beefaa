"""More NN ops on tpu against CPU PyTorch: segment_reduce (lengths/offsets, every reduction,
initial, axis, empty segments, NaN and zero elements) and its backward, rrelu (eval exact,
training draws noise from the tpu generator), fractional max pooling 2d/3d given the same
random_samples, forward and backward.

Every test checks that no op ran through the CPU fallback.
"""

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu.testing.fallbacks import fallback_counts, new_fallbacks

DEV = "tpu"


@pytest.fixture(autouse=True)
def no_cpu_fallback():
    before = fallback_counts()
    yield
    grown = new_fallbacks(before)
    assert not grown, f"ops ran through the CPU fallback: {grown}"


def _close(a, b, rtol=1e-4, atol=1e-5):
    torch.testing.assert_close(b.cpu(), a, rtol=rtol, atol=atol, equal_nan=True)


# ---- segment_reduce ----

REDUCTIONS = ["sum", "mean", "max", "min", "prod"]


def _segment(data, reduce, grad, **kw):
    """(output, data.grad) on CPU and tpu."""
    res = []
    for dev in ("cpu", DEV):
        d = data.detach().to(dev).requires_grad_()
        kw_dev = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
        out = torch.segment_reduce(d, reduce, **kw_dev)
        out.backward(grad.to(dev))
        res.append((out, d.grad))
    return res


@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("initial", [None, 2.0])
@pytest.mark.parametrize("use_offsets", [False, True])
def test_segment_reduce_1d(reduce, initial, use_offsets):
    torch.manual_seed(0)
    data = torch.randn(9)
    data[1] = data[0]  # a tie for max/min
    data[4] = 0.0  # a zero for prod
    lengths = torch.tensor([3, 0, 4, 1, 0])  # empty segments; one trailing element uncovered
    kw = {"initial": initial, "unsafe": True}
    if use_offsets:
        kw["offsets"] = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    else:
        kw["lengths"] = lengths
    grad = torch.randn(5)
    (a, ga), (b, gb) = _segment(data, reduce, grad, **kw)
    _close(a, b)
    _close(ga, gb)


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_segment_reduce_axis_and_nan(reduce):
    torch.manual_seed(1)
    data = torch.randn(4, 6, 3)
    data[1, 2, 0] = float("nan")
    data[2, 0, 1] = 0.0
    data[2, 1, 1] = 0.0
    lengths = torch.tensor([[2, 0, 4], [1, 4, 1], [6, 0, 0], [0, 2, 4]])
    grad = torch.randn(4, 3, 3)
    (a, ga), (b, gb) = _segment(data, reduce, grad, lengths=lengths, axis=1, initial=1.5)
    _close(a, b)
    _close(ga, gb)
    (a, ga), (b, gb) = _segment(data, reduce, grad, lengths=lengths, axis=1)
    _close(a, b)
    _close(ga, gb)


# ---- rrelu ----


@pytest.mark.parametrize("lower,upper", [(0.125, 1 / 3), (0.1, 0.3), (0.0, 1.0)])
def test_rrelu_eval_exact(lower, upper):
    torch.manual_seed(0)
    x = torch.randn(5, 7)
    x[0, 0] = float("nan")
    xc = x.clone().requires_grad_()
    xt = x.to(DEV).requires_grad_()
    a = F.rrelu(xc, lower, upper, training=False)
    b = F.rrelu(xt, lower, upper, training=False)
    torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0, equal_nan=True)
    g = torch.randn(5, 7)
    a.backward(g)
    b.backward(g.to(DEV))
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=0, atol=0)


def test_rrelu_training():
    torch.manual_seed(0)
    x = torch.randn(64, 33)
    lower, upper = 0.1, 0.3
    xt = x.to(DEV).requires_grad_()
    y = F.rrelu(xt, lower, upper, training=True)
    y.sum().backward()
    y, slope = y.detach().cpu(), xt.grad.cpu()
    neg = x <= 0
    assert torch.equal(y[~neg], x[~neg]) and torch.all(slope[~neg] == 1)
    r = slope[neg]
    assert r.min() >= lower and r.max() < upper and r.std() > 0.03
    torch.testing.assert_close(y[neg], x[neg] * r)
    # The noise tensor of rrelu_with_noise is written in place.
    noise = torch.empty(64, 33, device=DEV)
    out = torch.ops.aten.rrelu_with_noise(x.to(DEV), noise, lower, upper, True)
    n = noise.cpu()
    assert torch.all(n[~neg] == 1) and n[neg].min() >= lower
    torch.testing.assert_close(out.cpu(), x * n)
    # Seeded draws repeat.
    torch.manual_seed(5)
    a = F.rrelu(x.to(DEV), training=True).cpu()
    torch.manual_seed(5)
    b = F.rrelu(x.to(DEV), training=True).cpu()
    assert torch.equal(a, b)


# ---- fractional max pooling ----


@pytest.mark.parametrize(
    "shape,kernel,out",
    [
        ((2, 3, 9, 11), (2, 3), (4, 5)),
        ((3, 7, 7), (3, 3), (3, 3)),
        ((1, 2, 5, 5), (2, 2), (1, 1)),
        ((2, 3, 5, 5, 5), (2, 2, 2), (2, 3, 2)),
        ((2, 6, 7, 8), (2, 2, 3), (3, 4, 2)),
    ],
)
def test_fractional_max_pool(shape, kernel, out):
    torch.manual_seed(0)
    nd = len(kernel)
    x = torch.randn(shape)
    batched = len(shape) == nd + 2
    n = shape[0] if batched else 1
    c = shape[1] if batched else shape[0]
    fn = F.fractional_max_pool2d if nd == 2 else F.fractional_max_pool3d
    for _ in range(3):
        rs = torch.rand(n, c, nd)
        xc = x.clone().requires_grad_()
        xt = x.to(DEV).requires_grad_()
        a, ai = fn(xc, kernel, output_size=out, return_indices=True, _random_samples=rs)
        b, bi = fn(xt, kernel, output_size=out, return_indices=True, _random_samples=rs.to(DEV))
        torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0)
        assert torch.equal(bi.cpu(), ai)
        g = torch.randn_like(a)
        a.backward(g)
        b.backward(g.to(DEV))
        _close(xc.grad, xt.grad)


# ---- ctc_loss ----


@pytest.mark.parametrize("concat", [False, True])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss(concat, zero_infinity):
    torch.manual_seed(0)
    t, n, c, s = 8, 4, 5, 4
    log_probs = torch.randn(t, n, c).log_softmax(2)
    targets = torch.randint(1, c, (n, s))
    targets[0, 1] = targets[0, 0]  # a repeated label needs a blank between
    input_lengths = [8, 6, 2, 8]  # sample 2 cannot emit its targets: infinite loss
    target_lengths = [4, 3, 3, 0]
    if concat:
        targets = torch.cat([targets[i, : target_lengths[i]] for i in range(n)])
    res = []
    for dev in ("cpu", DEV):
        x = log_probs.clone().to(dev).requires_grad_()
        loss = F.ctc_loss(x, targets.to(dev), input_lengths, target_lengths, reduction="none",
                          zero_infinity=zero_infinity)
        loss.backward(torch.arange(1.0, n + 1).to(dev))
        res.append((loss.detach(), x.grad))
    (a, ga), (b, gb) = res
    _close(a, b)
    _close(ga, gb)
