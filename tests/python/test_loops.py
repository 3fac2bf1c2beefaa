"""Ops lowered with a stablehlo.while: gcd and lcm (elementwise Euclid) and ctc_loss (alpha and
beta recursions over time), against CPU PyTorch and with no CPU fallback."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torchtpu.testing.fallbacks import fallback_counts, make, new_fallbacks

DEV = "tpu"

INT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]


def _edge_values(dtype, op):
    info = torch.iinfo(dtype)
    lo = info.min
    # lcm(INT_MIN, ...) divides INT_MIN by -1 on the CPU, which traps for 32/64-bit ints.
    if op is torch.lcm and dtype in (torch.int32, torch.int64):
        lo += 1
    vals = [lo, info.max, 0, 1, 2, 6, 12, 35, 14, 100, info.max - 1]
    if info.min < 0:
        vals += [-1, -6, -12, -100, lo + 1]
    return torch.tensor(vals, dtype=dtype)


@pytest.mark.parametrize("op", [torch.gcd, torch.lcm], ids=["gcd", "lcm"])
@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_gcd_lcm_edge_values(op, dtype):
    vals = _edge_values(dtype, op)
    # Every pair of edge values, both ways round.
    a = vals.repeat_interleave(len(vals))
    b = vals.repeat(len(vals))
    before = fallback_counts()
    got = op(a.to(DEV), b.to(DEV)).cpu()
    assert new_fallbacks(before) == {}
    expected = op(a, b)
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)


@pytest.mark.parametrize("op", [torch.gcd, torch.lcm], ids=["gcd", "lcm"])
@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_gcd_lcm_random_broadcast(op, dtype):
    info = torch.iinfo(dtype)
    high = min(info.max, 5000)
    low = 0 if info.min == 0 else -high
    a = make((5, 1, 7), dtype, seed=1, low=low, high=high)
    b = make((3, 7), dtype, seed=2, low=low, high=high)
    before = fallback_counts()
    got = op(a.to(DEV), b.to(DEV)).cpu()
    assert new_fallbacks(before) == {}
    assert torch.equal(got, op(a, b))


def test_gcd_lcm_mixed_dtypes_inplace_out_and_empty():
    a = make((6,), torch.int8, seed=3, low=-50, high=50)
    b = make((6,), torch.int64, seed=4, low=-1000, high=1000)
    before = fallback_counts()
    got = torch.gcd(a.to(DEV), b.to(DEV)).cpu()
    assert got.dtype == torch.int64
    assert torch.equal(got, torch.gcd(a, b))
    x = b.clone().to(DEV)
    x.lcm_(a.to(DEV))
    assert torch.equal(x.cpu(), torch.lcm(b, a))
    out = torch.empty(6, dtype=torch.int64, device=DEV)
    torch.gcd(b.to(DEV), b.flip(0).to(DEV), out=out)
    assert torch.equal(out.cpu(), torch.gcd(b, b.flip(0)))
    e = torch.empty(0, 3, dtype=torch.int32)
    assert torch.gcd(e.to(DEV), e.to(DEV)).cpu().shape == (0, 3)
    assert new_fallbacks(before) == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
@pytest.mark.parametrize("op", [torch.gcd, torch.lcm], ids=["gcd", "lcm"])
def test_gcd_lcm_reject_non_integer(op, dtype):
    x = make((3,), dtype)
    with pytest.raises(RuntimeError, match=op.__name__):
        op(x, x)
    # PyTorch's own meta function for lcm rejects bool before the lowering runs, with a
    # message that does not name the op (the same on device="meta").
    name = None if (op is torch.lcm and dtype == torch.bool) else op.__name__
    with pytest.raises(RuntimeError, match=name):
        op(x.to(DEV), x.to(DEV)).cpu()


# ---- ctc_loss: alpha/beta recursions in a while over time ----


def _ctc_case(t, n, c, s, blank, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    log_probs = torch.randn(t, n, c, generator=g, dtype=torch.float64).log_softmax(2).to(dtype)
    labels = [k for k in range(c) if k != blank]
    targets = torch.tensor(labels)[torch.randint(0, len(labels), (n, s), generator=g)]
    if s > 1:
        targets[0, 1] = targets[0, 0]  # a repeated label needs a blank between
    input_lengths = torch.randint(max(1, t // 2), t + 1, (n,), generator=g)
    input_lengths[0] = t
    target_lengths = torch.randint(0, s + 1, (n,), generator=g)
    target_lengths[0] = min(s, max(0, (t - 1) // 2))  # feasible even with the repeat
    target_lengths[-1] = 0
    if n > 2:
        # Too short to emit its targets (infinite loss unless zero_infinity).
        input_lengths[1] = 1
        target_lengths[1] = s
    return log_probs, targets, input_lengths, target_lengths


def _run_ctc(dev, log_probs, targets, il, tl, blank, reduction, zero_infinity, concat,
             tensor_lengths):
    if concat:
        targets = torch.cat([targets[i, : tl[i]] for i in range(len(tl))])
    if not tensor_lengths:
        il, tl = il.tolist(), tl.tolist()
    else:
        il, tl = il.to(dev), tl.to(dev)
    x = log_probs.clone().to(dev).requires_grad_()
    loss = F.ctc_loss(x, targets.to(dev), il, tl, blank=blank, reduction=reduction,
                      zero_infinity=zero_infinity)
    g = torch.linspace(0.5, 2.0, loss.numel(), dtype=loss.dtype).reshape(loss.shape)
    loss.backward(g.to(dev))
    return loss.detach().cpu(), x.grad.cpu()


def _check_ctc(t, n=4, c=6, s=5, blank=0, reduction="none", zero_infinity=False, concat=False,
               tensor_lengths=False, dtype=torch.float32, seed=0):
    case = _ctc_case(t, n, c, s, blank, seed, dtype)
    args = (blank, reduction, zero_infinity, concat, tensor_lengths)
    before = fallback_counts()
    loss, grad = _run_ctc(DEV, *case, *args)
    assert new_fallbacks(before) == {}
    e_loss, e_grad = _run_ctc("cpu", *case, *args)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-12)
    tol["equal_nan"] = True  # an infinite loss without zero_infinity has NaN gradients
    assert loss.dtype == e_loss.dtype and grad.dtype == e_grad.dtype
    torch.testing.assert_close(loss, e_loss, **tol)
    torch.testing.assert_close(grad, e_grad, **tol)


@pytest.mark.parametrize("t", [1, 2, 7, 16, 17, 50, 200])
def test_ctc_loss_time_lengths(t):
    _check_ctc(t, s=min(5, max(1, t // 3)))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_reductions(reduction, zero_infinity):
    _check_ctc(40, reduction=reduction, zero_infinity=zero_infinity)


@pytest.mark.parametrize("concat", [False, True], ids=["padded", "concatenated"])
@pytest.mark.parametrize("tensor_lengths", [False, True], ids=["int_lengths", "tensor_lengths"])
def test_ctc_loss_target_layouts(concat, tensor_lengths):
    _check_ctc(30, blank=3, concat=concat, tensor_lengths=tensor_lengths, zero_infinity=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_ctc_loss_dtypes_blank_last(dtype):
    _check_ctc(25, n=3, c=5, blank=4, reduction="sum", dtype=dtype)


def test_ctc_loss_all_targets_empty_and_zero_input_length():
    before = fallback_counts()
    log_probs = torch.randn(20, 3, 4, dtype=torch.float64).log_softmax(2)
    targets = torch.zeros(3, 0, dtype=torch.long)
    for il in ([20, 5, 1], [20, 0, 3]):
        res = []
        for dev in ("cpu", DEV):
            x = log_probs.clone().to(dev).requires_grad_()
            loss = F.ctc_loss(x, targets.to(dev), il, [0, 0, 0], blank=1, reduction="none")
            loss.sum().backward()
            res.append((loss.detach().cpu(), x.grad.cpu()))
        torch.testing.assert_close(res[1][0], res[0][0])
        torch.testing.assert_close(res[1][1], res[0][1])
    # No input frames with a non-empty target: infinite loss, zero gradient for that sample.
    targets = torch.tensor([[1, 2], [2, 2], [3, 0]])
    for zero_infinity in (False, True):
        res = []
        for dev in ("cpu", DEV):
            x = log_probs.clone().to(dev).requires_grad_()
            loss = F.ctc_loss(x, targets.to(dev), [20, 0, 0], [2, 2, 0], blank=0,
                              reduction="none", zero_infinity=zero_infinity)
            loss.sum().backward()
            res.append((loss.detach().cpu(), x.grad.cpu()))
        torch.testing.assert_close(res[1][0], res[0][0])
        torch.testing.assert_close(res[1][1], res[0][1], equal_nan=True)
    assert new_fallbacks(before) == {}


# ---- Jacobi svd/eigh: the sweep loop stops on convergence ----


def _jacobi_inputs(n, dtype):
    g = torch.Generator().manual_seed(n)
    a = torch.randn(n, n, generator=g, dtype=torch.float64)
    u = torch.randn(n, 1, generator=g, dtype=torch.float64)
    cases = {
        "random": a,
        "zero": torch.zeros(n, n, dtype=torch.float64),
        "diagonal": torch.diag(torch.arange(n, 0, -1, dtype=torch.float64)),
        "identity": torch.eye(n, dtype=torch.float64),
        "rank1": u @ u.T,
        "graded": a * torch.logspace(-8, 8, n, dtype=torch.float64),
    }
    return {k: v.to(dtype) for k, v in cases.items()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("n", [2, 5, 16])
def test_jacobi_svd_eigh_converged_inputs(n, dtype):
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    before = fallback_counts()
    for name, a in _jacobi_inputs(n, dtype).items():
        scale = max(a.abs().max().item(), 1.0)
        u, s, vh = (t.cpu() for t in torch.linalg.svd(a.to(DEV)))
        torch.testing.assert_close(s / scale, torch.linalg.svdvals(a) / scale, **tol, msg=name)
        torch.testing.assert_close((u * s) @ vh / scale, a / scale, **tol, msg=name)
        torch.testing.assert_close(u.T @ u, torch.eye(n, dtype=dtype), **tol, msg=name)
        sym = a + a.T
        w, v = (t.cpu() for t in torch.linalg.eigh(sym.to(DEV)))
        torch.testing.assert_close(w / scale, torch.linalg.eigvalsh(sym) / scale, **tol, msg=name)
        torch.testing.assert_close((v * w) @ v.T / scale, sym / scale, **tol, msg=name)
        torch.testing.assert_close(v.T @ v, torch.eye(n, dtype=dtype), **tol, msg=name)
    assert new_fallbacks(before) == {}
