"""Indexing on tpu against CPU PyTorch: advanced indexing (index.Tensor) and its backward,
index_put (with accumulate and boolean masks), scatter / scatter_add / scatter_reduce,
gather's backward, index_add / index_copy / index_fill / index_select's backward, take / put.

Every test checks that no op ran through the CPU fallback; the only exception is nonzero,
which boolean-mask reads need (their result shape depends on the mask's values).
"""

import pytest
import torch


DEV = "tpu"


pytestmark = pytest.mark.usefixtures("no_cpu_fallback")


def tpu(t):
    return t.to(DEV) if isinstance(t, torch.Tensor) else t


def tpu_key(key):
    return tuple(tpu(k) for k in key)


X = torch.randn(5, 6, 7, generator=torch.Generator().manual_seed(0))

INDEX_KEYS = {
    "first": (torch.tensor([0, 2, -1]),),
    "middle-2d": (slice(None), torch.tensor([[1, 2], [3, -4]])),
    "split": (torch.tensor([0, 1]), slice(None), torch.tensor([[2], [3]])),
    "adjacent-last": (slice(None), torch.tensor([0, 1]), torch.tensor([2, 3])),
    "scalar-and-vector": (torch.tensor(1), torch.tensor([1, 2])),
    "ellipsis": (Ellipsis, torch.tensor([1, 2])),
    "all-dims": (torch.tensor([0, 4]), torch.tensor([1, 5]), torch.tensor([6, 0])),
    "int32": (torch.tensor([3, 1], dtype=torch.int32),),
    "repeated": (torch.tensor([1, 1, 1]), slice(1, 4)),
}


@pytest.mark.parametrize("key", INDEX_KEYS.values(), ids=INDEX_KEYS.keys())
def test_index_forward_backward(key):
    xc = X.clone().requires_grad_()
    xt = X.to(DEV).requires_grad_()
    yc, yt = xc[key], xt[tpu_key(key)]
    torch.testing.assert_close(yt.cpu(), yc)
    g = torch.randn(yc.shape)
    yc.backward(g)
    yt.backward(g.to(DEV))  # index_put with accumulate
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)


@pytest.mark.parametrize("key", INDEX_KEYS.values(), ids=INDEX_KEYS.keys())
def test_index_put(key):
    v = torch.randn(X[key].shape)
    y, yt = X.clone(), X.to(DEV)
    y[key] = v
    yt[tpu_key(key)] = v.to(DEV)
    torch.testing.assert_close(yt.cpu(), y)


def test_index_put_broadcast_and_accumulate():
    idx = torch.tensor([0, 0, 1, 4, 0])
    y, yt = X.clone(), X.to(DEV)
    y.index_put_((idx,), torch.randn(7, generator=torch.Generator().manual_seed(1)),
                 accumulate=True)
    yt.index_put_((idx.to(DEV),), torch.randn(7, generator=torch.Generator().manual_seed(1))
                  .to(DEV), accumulate=True)
    torch.testing.assert_close(yt.cpu(), y)
    y[:, torch.tensor([0, 5])] = 2.5
    yt[:, torch.tensor([0, 5], device=DEV)] = 2.5
    torch.testing.assert_close(yt.cpu(), y)
    index_put = torch.ops.aten.index_put
    z = index_put(X, (None, torch.tensor([1, 1]), torch.tensor([2, 3])), torch.ones(2), True)
    zt = index_put(X.to(DEV), (None, torch.tensor([1, 1], device=DEV),
                               torch.tensor([2, 3], device=DEV)), torch.ones(2, device=DEV), True)
    torch.testing.assert_close(zt.cpu(), z)


def test_index_with_cpu_indices():
    idx = torch.tensor([4, 0, 2])
    torch.testing.assert_close(X.to(DEV)[idx].cpu(), X[idx])
    y, yt = X.clone(), X.to(DEV)
    y[idx] = 0.0
    yt[idx] = 0.0
    torch.testing.assert_close(yt.cpu(), y)


def test_mask_write():
    mask = X > 0
    y, yt = X.clone(), X.to(DEV)
    y[mask] = 0.5
    yt[mask.to(DEV)] = 0.5
    torch.testing.assert_close(yt.cpu(), y)
    vals = torch.arange(int(mask.sum()), dtype=torch.float32)
    y[mask] = vals
    yt[mask.to(DEV)] = vals.to(DEV)
    torch.testing.assert_close(yt.cpu(), y)
    rows = X[:, :, 0] > 0
    y[rows] = torch.ones(int(rows.sum()), 7)
    yt[rows.to(DEV)] = torch.ones(int(rows.sum()), 7, device=DEV)
    torch.testing.assert_close(yt.cpu(), y)


@pytest.mark.allow_fallback("aten::nonzero")  # the mask read asks the mask's true count
def test_mask_read_forward_backward():
    mask = X > 0
    xc = X.clone().requires_grad_()
    xt = X.to(DEV).requires_grad_()
    yc, yt = xc[mask], xt[mask.to(DEV)]
    torch.testing.assert_close(yt.cpu(), yc)
    (yc * 3).sum().backward()
    (yt * 3).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    y, yt = X.clone(), X.to(DEV)
    y[mask] += 1.0  # a read (nonzero, then a gather) and a write
    yt[mask.to(DEV)] += 1.0
    torch.testing.assert_close(yt.cpu(), y)


# ---- scatter family ----

S = torch.randn(4, 5, generator=torch.Generator().manual_seed(2))
SRC = torch.randn(3, 6, generator=torch.Generator().manual_seed(3))
IDX = torch.tensor([[0, 1, 2, 0, 3], [1, 1, 0, 3, 2]])


def test_scatter_src_and_value():
    # Unique targets: scatter without reduction leaves duplicate writes unordered.
    uidx = torch.tensor([[0, 1, 2, 3, 0], [2, 3, 0, 1, 1]])
    torch.testing.assert_close(S.to(DEV).scatter(0, uidx.to(DEV), SRC.to(DEV)).cpu(),
                               S.scatter(0, uidx, SRC))
    idx1 = torch.tensor([[0, 1, 2], [4, 0, 1]])
    torch.testing.assert_close(S.to(DEV).scatter(1, idx1.to(DEV), 2.5).cpu(),
                               S.scatter(1, idx1, 2.5))
    z, zt = S.clone(), S.to(DEV)
    z.scatter_(1, idx1, 3.0)
    zt.scatter_(1, idx1.to(DEV), 3.0)
    torch.testing.assert_close(zt.cpu(), z)


def test_scatter_add_and_reduce_arg():
    torch.testing.assert_close(S.to(DEV).scatter_add(0, IDX.to(DEV), SRC.to(DEV)).cpu(),
                               S.scatter_add(0, IDX, SRC))
    torch.testing.assert_close(S.to(DEV).scatter(0, IDX.to(DEV), SRC.to(DEV), reduce="add").cpu(),
                               S.scatter(0, IDX, SRC, reduce="add"))
    torch.testing.assert_close(S.to(DEV).scatter(0, IDX.to(DEV), 2.0, reduce="multiply").cpu(),
                               S.scatter(0, IDX, 2.0, reduce="multiply"))


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce(reduce, include_self):
    out = S.to(DEV).scatter_reduce(0, IDX.to(DEV), SRC.to(DEV), reduce, include_self=include_self)
    torch.testing.assert_close(out.cpu(),
                               S.scatter_reduce(0, IDX, SRC, reduce, include_self=include_self))


def test_scatter_reduce_int_mean_and_nan_max():
    si = torch.arange(-10, 10).reshape(4, 5)
    src = torch.full((2, 5), 3)
    torch.testing.assert_close(si.to(DEV).scatter_reduce(0, IDX.to(DEV), src.to(DEV), "mean").cpu(),
                               si.scatter_reduce(0, IDX, src, "mean"))
    s = S.clone()
    s[1, 1] = float("nan")
    torch.testing.assert_close(s.to(DEV).scatter_reduce(0, IDX.to(DEV), SRC.to(DEV), "amax").cpu(),
                               s.scatter_reduce(0, IDX, SRC, "amax"), equal_nan=True)


def test_gather_backward():
    sc = S.clone().requires_grad_()
    st = S.to(DEV).requires_grad_()
    idx = torch.tensor([[0, 0, 1], [4, 4, 4], [2, 1, 0], [3, 3, 0]])
    sc.gather(1, idx).sum().backward()
    st.gather(1, idx.to(DEV)).sum().backward()  # scatter_add
    torch.testing.assert_close(st.grad.cpu(), sc.grad)


# ---- index_add / index_copy / index_fill / take / put ----


def test_index_add_and_index_select_backward():
    i = torch.tensor([0, 2, 0, 5])
    src = torch.randn(5, 4, 7)
    torch.testing.assert_close(X.to(DEV).index_add(1, i.to(DEV), src.to(DEV), alpha=2).cpu(),
                               X.index_add(1, i, src, alpha=2))
    xc = X.clone().requires_grad_()
    xt = X.to(DEV).requires_grad_()
    xc.index_select(1, i).sum().backward()
    xt.index_select(1, i.to(DEV)).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)


def test_index_copy_and_fill():
    ii = torch.tensor([3, 0, 1])
    src = torch.randn(5, 6, 3)
    torch.testing.assert_close(X.to(DEV).index_copy(2, ii.to(DEV), src.to(DEV)).cpu(),
                               X.index_copy(2, ii, src))
    torch.testing.assert_close(X.to(DEV).index_fill(1, ii.to(DEV), -2.0).cpu(),
                               X.index_fill(1, ii, -2.0))
    z, zt = X.clone(), X.to(DEV)
    z.index_fill_(0, ii, 7)
    zt.index_fill_(0, ii.to(DEV), 7)
    torch.testing.assert_close(zt.cpu(), z)


def test_take_and_put():
    idx = torch.tensor([[0, 5], [-1, 100]])
    torch.testing.assert_close(X.to(DEV).take(idx.to(DEV)).cpu(), X.take(idx))
    xc = X.clone().requires_grad_()
    xt = X.to(DEV).requires_grad_()
    xc.take(torch.tensor([0, 5, 5])).sum().backward()
    xt.take(torch.tensor([0, 5, 5], device=DEV)).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    pi = torch.tensor([0, 5, 0])
    torch.testing.assert_close(
        X.to(DEV).put(pi.to(DEV), torch.ones(3, device=DEV), accumulate=True).cpu(),
        X.put(pi, torch.ones(3), accumulate=True))


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce_forward_backward(reduce, include_self):
    s, src = torch.randn(5, 3), torch.rand(4, 3) + 0.5
    idx = torch.tensor([0, 0, 2, 4])
    sc, cc = s.clone().requires_grad_(), src.clone().requires_grad_()
    st, ct = s.to(DEV).requires_grad_(), src.to(DEV).requires_grad_()
    yc = sc.index_reduce(0, idx, cc, reduce, include_self=include_self)
    yt = st.index_reduce(0, idx.to(DEV), ct, reduce, include_self=include_self)
    torch.testing.assert_close(yt.cpu(), yc)
    if include_self:  # CPU's backward requires include_self for amax/amin
        yc.sum().backward()
        yt.sum().backward()
        torch.testing.assert_close(st.grad.cpu(), sc.grad)
        torch.testing.assert_close(ct.grad.cpu(), cc.grad)


def test_index_reduce_integer_mean_rounds_down():
    si = torch.arange(-7, 8).view(5, 3)
    idx, src = torch.tensor([0, 0, 2, 4]), torch.full((4, 3), 2)
    torch.testing.assert_close(si.to(DEV).index_reduce(0, idx.to(DEV), src.to(DEV), "mean").cpu(),
                               si.index_reduce(0, idx, src, "mean"))


def test_masked_scatter():
    mask = torch.rand(3, 4, generator=torch.Generator().manual_seed(4)) > 0.5
    src = torch.randn(24)
    torch.testing.assert_close(X[:3, :4, 0].to(DEV).masked_scatter(mask.to(DEV), src.to(DEV)).cpu(),
                               X[:3, :4, 0].masked_scatter(mask, src))
    z, zt = torch.zeros(2, 3, 4), torch.zeros(2, 3, 4, device=DEV)
    z.masked_scatter_(mask, src)  # the mask broadcasts over the leading dim
    zt.masked_scatter_(mask.to(DEV), src.to(DEV))
    torch.testing.assert_close(zt.cpu(), z)
