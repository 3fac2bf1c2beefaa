"""torch._grouped_mm / F.grouped_mm (the MoE expert products Transformers sends to the "tpu"
device type) run natively in every float dtype, forward and backward, against per-group
matmuls on the CPU."""

from __future__ import annotations

import pytest
import torch

import torchtpu  # noqa: F401
from torchtpu.testing.fallbacks import fallback_counts, new_fallbacks


def reference(a, w, offs, bias=None):
    """Per-group CPU matmuls; positions past the last offset stay zero."""
    ends = offs.tolist()
    starts = [0] + ends[:-1]
    if a.dim() == 3 and w.dim() == 3:
        out = a @ w
    elif a.dim() == 2 and w.dim() == 3:
        out = torch.zeros(a.shape[0], w.shape[2], dtype=a.dtype)
        for g, (s, e) in enumerate(zip(starts, ends)):
            out[s:e] = a[s:e] @ w[g]
    elif a.dim() == 2 and w.dim() == 2:
        out = torch.stack([a[:, s:e] @ w[s:e] for s, e in zip(starts, ends)])
    else:
        out = torch.zeros(a.shape[1], w.shape[1], dtype=a.dtype)
        for g, (s, e) in enumerate(zip(starts, ends)):
            out[:, s:e] = a[g] @ w[:, s:e]
    return out if bias is None else out + bias


OFFS = torch.tensor([3, 3, 8], dtype=torch.int32)  # an empty group, and 2 rows past the end

CASES = {
    "2d_x_3d": ((10, 4), (3, 4, 5)),
    "2d_x_2d": ((6, 10), (10, 5)),
    "3d_x_2d": ((3, 6, 4), (4, 10)),
    "3d_x_3d": ((3, 6, 4), (3, 4, 5)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_grouped_mm_matches_per_group_matmuls(case, dtype):
    torch.manual_seed(0)
    sa, sw = CASES[case]
    a, w = torch.randn(sa).to(dtype), torch.randn(sw).to(dtype)
    offs = None if case == "3d_x_3d" else OFFS
    before = fallback_counts()
    out = torch.nn.functional.grouped_mm(a.to("tpu"), w.to("tpu"),
                                         offs=None if offs is None else offs.to("tpu"))
    assert not new_fallbacks(before)
    ref = reference(a.float(), w.float(), offs if offs is not None else torch.tensor([]))
    assert out.dtype == dtype and out.shape == ref.shape
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(out.cpu().float(), ref, **tol)


def test_grouped_mm_out_dtype_and_bias():
    torch.manual_seed(0)
    a, w = torch.randn(10, 4).bfloat16(), torch.randn(3, 4, 5).bfloat16()
    bias = torch.randn(5)
    out = torch._grouped_mm(a.to("tpu"), w.to("tpu"), offs=OFFS.to("tpu"),
                            out_dtype=torch.float32)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), reference(a.float(), w.float(), OFFS), rtol=1e-5,
                               atol=1e-5)
    out_b = torch._grouped_mm(a.float().to("tpu"), w.float().to("tpu"), offs=OFFS.to("tpu"),
                              bias=bias.to("tpu"))
    torch.testing.assert_close(out_b.cpu(), reference(a.float(), w.float(), OFFS, bias),
                               rtol=1e-5, atol=1e-5)


def test_grouped_mm_new_offsets_reuse_the_program():
    a, w = torch.randn(10, 4, device="tpu"), torch.randn(3, 4, 5, device="tpu")
    torch._grouped_mm(a, w, offs=OFFS.to("tpu"))
    compiles = torchtpu.metrics()["cache_misses"]
    other = torch.tensor([1, 5, 10], dtype=torch.int32)
    out = torch._grouped_mm(a, w, offs=other.to("tpu"))
    assert torchtpu.metrics()["cache_misses"] == compiles
    torch.testing.assert_close(out.cpu(), reference(a.cpu(), w.cpu(), other), rtol=1e-5,
                               atol=1e-5)


def test_grouped_mm_backward_matches_cpu():
    torch.manual_seed(0)
    a, w = torch.randn(10, 4, requires_grad=True), torch.randn(3, 4, 5, requires_grad=True)
    at = a.detach().to("tpu").requires_grad_()
    wt = w.detach().to("tpu").requires_grad_()
    gout = torch.randn(10, 5)
    before = fallback_counts()
    torch._grouped_mm(at, wt, offs=OFFS.to("tpu")).backward(gout.to("tpu"))
    assert not new_fallbacks(before)
    reference(a, w, OFFS).backward(gout)
    torch.testing.assert_close(at.grad.cpu(), a.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), w.grad, rtol=1e-5, atol=1e-5)


def test_grouped_mm_bad_input_names_the_problem():
    a, w = torch.randn(10, 4, device="tpu"), torch.randn(3, 4, 5, device="tpu")
    with pytest.raises(RuntimeError, match="offs is required"):
        torch._grouped_mm(a, w)
    with pytest.raises(RuntimeError, match="contraction dimension"):
        torch._grouped_mm(a, torch.randn(3, 5, 5, device="tpu"), offs=OFFS.to("tpu"))
    with pytest.raises(RuntimeError, match="offs has 2 groups"):
        torch._grouped_mm(a, w, offs=OFFS[:2].to("tpu"))
    with pytest.raises(RuntimeError, match="int32"):
        torch._grouped_mm(a, w, offs=OFFS.long().to("tpu"))
    # The process stays usable.
    assert torch._grouped_mm(a, w, offs=OFFS.to("tpu")).shape == (10, 5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_mm_compiles_in_any_float_dtype(dtype):
    # PyTorch's meta kernel (used while tracing) only takes bf16; tpu tensors get ours.
    from torchtpu import _dynamo as tpu_dynamo

    torch._dynamo.reset()
    torch.manual_seed(0)
    a, w = torch.randn(10, 4).to(dtype), torch.randn(3, 4, 5).to(dtype)

    def f(a, w, offs):
        return torch.nn.functional.grouped_mm(a, w, offs=offs).relu()

    before = set(tpu_dynamo.graph_metrics())
    out = torch.compile(f, backend="tpu", fullgraph=True)(a.to("tpu"), w.to("tpu"),
                                                          OFFS.to("tpu"))
    graphs = {k: v for k, v in tpu_dynamo.graph_metrics().items() if k not in before}
    assert graphs and not any("eager_reason" in g for g in graphs.values()), graphs
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(out.cpu().float(), reference(a.float(), w.float(), OFFS).relu(),
                               **tol)
    torch._dynamo.reset()
