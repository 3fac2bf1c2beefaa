"""Weight normalization (nn.utils.weight_norm / parametrizations.weight_norm, which reach the
fused aten::_weight_norm_interface) and Embedding(max_norm=...) (aten::embedding_renorm_) run
natively on tpu and match CPU, forward and backward."""

from __future__ import annotations

import copy

import pytest
import torch

import torchtpu  # noqa: F401
from torchtpu.testing.fallbacks import fallback_counts, new_fallbacks


@pytest.mark.parametrize("shape,dim", [((5, 4), 0), ((5, 4), 1), ((6, 3, 4), 0), ((6, 3, 4), -1),
                                       ((4, 2, 3, 3), 0), ((4, 2, 3, 3), -1)])
def test_weight_norm_interface_matches_cpu(shape, dim):
    torch.manual_seed(0)
    v = torch.randn(shape, requires_grad=True)
    gshape = [1] * len(shape)
    d = dim % len(shape)
    gshape[d] = shape[d]
    g = torch.rand(gshape, requires_grad=True)
    vt = v.detach().to("tpu").requires_grad_()
    gt = g.detach().to("tpu").requires_grad_()
    before = fallback_counts()
    w, norms = torch._weight_norm_interface(vt, gt, d)
    (w * torch.arange(w.numel(), device="tpu").view(w.shape)).sum().backward()
    assert not new_fallbacks(before)
    rw, rnorms = torch._weight_norm_interface(v, g, d)
    (rw * torch.arange(rw.numel()).view(rw.shape)).sum().backward()
    torch.testing.assert_close(w.cpu(), rw, rtol=1e-5, atol=1e-6)
    assert norms.shape == rnorms.shape and norms.dtype == rnorms.dtype
    torch.testing.assert_close(norms.cpu(), rnorms, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(vt.grad.cpu(), v.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gt.grad.cpu(), g.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_weight_norm_interface_half_keeps_float_norms(dtype):
    v = torch.randn(4, 6).to(dtype)
    g = torch.rand(4, 1).to(dtype)
    w, norms = torch._weight_norm_interface(v.to("tpu"), g.to("tpu"), 0)
    rw, rnorms = torch._weight_norm_interface(v, g, 0)
    assert w.dtype == rw.dtype and norms.dtype == rnorms.dtype
    torch.testing.assert_close(w.cpu(), rw, rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(norms.cpu(), rnorms, rtol=1.6e-2, atol=1e-2)


def test_weight_norm_parametrization_trains_like_cpu():
    torch.manual_seed(0)
    m = torch.nn.Sequential(
        torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(3, 8, 3)),
        torch.nn.ReLU(),
        torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(8, 2, 3), dim=2))
    mt = copy.deepcopy(m).to("tpu")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    optt = torch.optim.SGD(mt.parameters(), lr=0.1)
    x = torch.randn(4, 3, 12)
    before = fallback_counts()
    for _ in range(3):
        loss = m(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losst = mt(x.to("tpu")).pow(2).mean()
        optt.zero_grad()
        losst.backward()
        optt.step()
        torch.testing.assert_close(losst.cpu(), loss, rtol=1e-5, atol=1e-6)
    assert not new_fallbacks(before)
    for p, pt in zip(m.parameters(), mt.parameters()):
        torch.testing.assert_close(pt.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-5)


def test_weight_norm_interface_rejects_a_middle_dim():
    v = torch.randn(2, 3, 4, device="tpu")
    g = torch.rand(1, 3, 1, device="tpu")
    with pytest.raises(RuntimeError, match="dim must be 0 or the last dim"):
        torch._weight_norm_interface(v, g, 1)
    assert torch._weight_norm_interface(v, torch.rand(2, 1, 1, device="tpu"), 0)[0].shape == v.shape


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf"), 0.0])
def test_embedding_renorm_matches_cpu(norm_type):
    torch.manual_seed(0)
    weight = torch.randn(10, 4) * 2
    idx = torch.tensor([[1, 3, 3], [9, 1, 0]])
    wt = weight.to("tpu")
    before = fallback_counts()
    out = torch.embedding_renorm_(wt, idx.to("tpu"), 1.0, norm_type)
    assert not new_fallbacks(before)
    ref = torch.embedding_renorm_(weight.clone(), idx, 1.0, norm_type)
    assert out is wt  # in place, like CPU
    torch.testing.assert_close(wt.cpu(), ref, rtol=1e-5, atol=1e-6)


def test_embedding_max_norm_trains_like_cpu():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(12, 5, max_norm=1.0)
    embt = copy.deepcopy(emb).to("tpu")
    idx = torch.randint(0, 12, (4, 6))
    before = fallback_counts()
    out = embt(idx.to("tpu"))
    out.sum().backward()
    assert not new_fallbacks(before)
    ref = emb(idx)
    ref.sum().backward()
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(embt.weight.detach().cpu(), emb.weight.detach(), rtol=1e-5,
                               atol=1e-6)
    torch.testing.assert_close(embt.weight.grad.cpu(), emb.weight.grad)
