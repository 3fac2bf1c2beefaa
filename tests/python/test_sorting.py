"""Sorting (sort, argsort, msort, topk, kthvalue) and the data-dependent ops (nonzero,
masked_select, unique, unique_consecutive, equal) on tpu against CPU PyTorch, with gradients,
and without CPU fallback."""

import pytest
import torch

import torchtpu
from conftest import assert_exactly_cpu

NAN = float("nan")
DTYPES = [torch.float32, torch.bfloat16, torch.int32, torch.int64]


pytestmark = pytest.mark.usefixtures("no_cpu_fallback")


def _sample(dtype, shape=(4, 7), ties=False):
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g)
        if ties:
            x = (x * 2).round() / 2
        return x.to(dtype)
    return torch.randint(-3 if ties else -1000, 3 if ties else 1000, shape, generator=g,
                         dtype=dtype)


_same = assert_exactly_cpu  # conftest.py


# ---- sort family ----

@pytest.mark.parametrize("dtype", DTYPES + [torch.uint8, torch.bool])
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_matches_cpu_with_ties(dtype, dim, descending):
    x = _sample(dtype, ties=True) if dtype != torch.uint8 else _sample(torch.int64, ties=True).abs().to(torch.uint8)
    _same(torch.sort(x.to("tpu"), dim=dim, descending=descending, stable=True),
          torch.sort(x, dim=dim, descending=descending, stable=True))
    _same(torch.argsort(x.to("tpu"), dim=dim, descending=descending, stable=True),
          torch.argsort(x, dim=dim, descending=descending, stable=True))


@pytest.mark.parametrize("dtype", DTYPES)
def test_sort_argsort_msort_distinct_values(dtype):
    x = _sample(dtype, shape=(3, 5, 6))
    if dtype == torch.bfloat16:  # randn in bf16 has ties; make the values distinct
        x = torch.randperm(90).reshape(3, 5, 6).to(dtype)
    xt = x.to("tpu")
    for dim in (0, 1, 2):
        _same(torch.sort(xt, dim), torch.sort(x, dim))
        _same(torch.sort(xt, dim, descending=True), torch.sort(x, dim, descending=True))
        _same(xt.argsort(dim), x.argsort(dim))
    _same(torch.msort(xt), torch.msort(x))


@pytest.mark.parametrize("descending", [False, True])
def test_sort_nan_is_largest_and_signed_zeros_tie(descending):
    x = torch.tensor([[NAN, 1.0, -NAN, 0.0, -0.0, 3.0, float("-inf"), float("inf"), 1.0],
                      [2.0, 2.0, 1.0, NAN, -1.0, 5.0, NAN, -2.0, 0.0]])
    got = torch.sort(x.to("tpu"), descending=descending, stable=True)
    want = torch.sort(x, descending=descending, stable=True)
    _same(got, want)
    assert torch.equal(torch.signbit(got.values.cpu()), torch.signbit(want.values))
    _same(torch.topk(x.to("tpu"), 3, largest=not descending),
          torch.topk(x, 3, largest=not descending))
    y = torch.tensor([[NAN, 1.0, 2.0, -1.0], [3.0, NAN, NAN, 0.5]])
    for k in (1, 2, 3, 4):
        got, want = torch.kthvalue(y.to("tpu"), k), torch.kthvalue(y, k)
        _same(got.values, want.values)
        # Which of several NaNs is picked is unspecified; the index must point at the value.
        _same(y.to("tpu").gather(1, got.indices[:, None])[:, 0], want.values)


def test_sort_scalar_empty_and_out():
    s = torch.tensor(3.5)
    _same(torch.sort(s.to("tpu")), torch.sort(s))
    e = torch.empty(0, 3)
    _same(torch.sort(e.to("tpu"), dim=0), torch.sort(e, dim=0))
    x = _sample(torch.float32)
    v = torch.empty(0, device="tpu")
    i = torch.empty(0, dtype=torch.long, device="tpu")
    torch.sort(x.to("tpu"), dim=1, out=(v, i))
    _same((v, i), torch.sort(x, dim=1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_cpu(dtype, largest):
    x = _sample(dtype, shape=(5, 9))
    if dtype == torch.bfloat16:
        x = torch.randperm(45).reshape(5, 9).to(dtype)
    for k, dim in ((1, -1), (4, 1), (3, 0), (9, 1)):
        _same(torch.topk(x.to("tpu"), k, dim=dim, largest=largest),
              torch.topk(x, k, dim=dim, largest=largest))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_kthvalue_matches_cpu(dtype, keepdim):
    x = _sample(dtype, shape=(5, 9))
    if dtype == torch.bfloat16:
        x = torch.randperm(45).reshape(5, 9).to(dtype)
    for k, dim in ((1, 1), (5, -1), (9, 1), (3, 0)):
        _same(torch.kthvalue(x.to("tpu"), k, dim=dim, keepdim=keepdim),
              torch.kthvalue(x, k, dim=dim, keepdim=keepdim))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", ["sort", "topk", "kthvalue", "msort"])
def test_sorting_gradients_match_cpu(op, dtype):
    x = torch.randperm(24).reshape(4, 6).to(dtype) / 8
    fns = {
        "sort": lambda t: torch.sort(t, dim=1, descending=True).values,
        "topk": lambda t: torch.topk(t, 3, dim=0).values,
        "kthvalue": lambda t: torch.kthvalue(t, 2, dim=1, keepdim=True).values,
        "msort": torch.msort,
    }
    xc = x.clone().requires_grad_()
    xt = x.to("tpu").requires_grad_()
    out_c, out_t = fns[op](xc), fns[op](xt)
    g = torch.randn(out_c.shape).to(dtype)
    out_c.backward(g)
    out_t.backward(g.to("tpu"))
    _same(xt.grad, xc.grad)


def test_compiled_sort_and_topk_match_eager():
    torch._dynamo.reset()
    from torchtpu import _dynamo as tpu_dynamo

    graphs_before = set(tpu_dynamo.graph_metrics())

    def f(t):
        v, i = torch.sort(t, dim=-1, descending=True)
        top = torch.topk(t, 2, dim=0)
        return v * 2, i, top.values.sum(0), top.indices

    x = torch.randperm(30).reshape(5, 6).float()
    xt = x.to("tpu").requires_grad_()
    got = torch.compile(f, backend="tpu")(xt)
    _same(tuple(t.detach() for t in got), f(x))
    (got[0].sum() + got[2].sum()).backward()
    xc = x.clone().requires_grad_()
    want = f(xc)
    (want[0].sum() + want[2].sum()).backward()
    _same(xt.grad, xc.grad)
    graphs = {k: v for k, v in tpu_dynamo.graph_metrics().items() if k not in graphs_before}
    assert graphs and all("eager_reason" not in g for g in graphs.values()), graphs
    torch._dynamo.reset()


# ---- data-dependent output shapes ----

@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
def test_nonzero_argwhere_and_as_tuple(dtype):
    x = _sample(dtype, shape=(3, 4, 5), ties=True)
    xt = x.to("tpu")
    _same(torch.nonzero(xt), torch.nonzero(x))
    _same(torch.argwhere(xt), torch.argwhere(x))
    _same(torch.nonzero(xt, as_tuple=True), torch.nonzero(x, as_tuple=True))


def test_nonzero_edge_cases():
    for x in (torch.zeros(3, 4), torch.ones(5), torch.tensor(2.0), torch.tensor(0.0),
              torch.empty(0, 3), torch.tensor([NAN, 0.0, -0.0, 1.0])):
        _same(torch.nonzero(x.to("tpu")), torch.nonzero(x))
    x = torch.tensor([1.0, 0.0, 3.0, 0.0])
    _same(torch.nonzero_static(x.to("tpu"), size=3), torch.nonzero_static(x, size=3))
    _same(torch.nonzero_static(x.to("tpu"), size=1, fill_value=7),
          torch.nonzero_static(x, size=1, fill_value=7))
    _same(torch.count_nonzero(x.to("tpu")), torch.count_nonzero(x))


def test_nonzero_is_two_cached_programs_and_one_read():
    x = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]], device="tpu")
    torch.nonzero(x)
    m0 = torchtpu.metrics()
    got = torch.nonzero(x)
    m1 = torchtpu.metrics()
    assert m1["programs_compiled"] == m0["programs_compiled"]
    assert m1["executions"] - m0["executions"] == 2
    assert m1["d2h_transfers"] - m0["d2h_transfers"] == 1
    _same(got, torch.tensor([[0, 0], [0, 2], [1, 1]]))


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
def test_boolean_mask_indexing_and_masked_select(dtype):
    x = _sample(dtype, shape=(4, 5))
    mask = _sample(torch.bool, shape=(4, 5))
    xt, mt = x.to("tpu"), mask.to("tpu")
    _same(xt[mt], x[mask])
    _same(torch.masked_select(xt, mt), torch.masked_select(x, mask))
    row = mask[0]  # broadcasts over rows
    _same(torch.masked_select(xt, row.to("tpu")), torch.masked_select(x, row))
    _same(torch.masked_select(xt[0], mt), torch.masked_select(x[0], mask))
    _same(torch.masked_select(xt, torch.zeros(4, 5, dtype=torch.bool, device="tpu")),
          torch.masked_select(x, torch.zeros(4, 5, dtype=torch.bool)))


def test_masked_select_gradient_and_mask_dtype_error():
    x = torch.randn(3, 4)
    mask = x > 0
    xc = x.clone().requires_grad_()
    xt = x.to("tpu").requires_grad_()
    out_c, out_t = torch.masked_select(xc, mask), torch.masked_select(xt, mask.to("tpu"))
    g = torch.randn(out_c.shape)
    out_c.backward(g)
    out_t.backward(g.to("tpu"))
    _same(xt.grad, xc.grad)
    with pytest.raises(RuntimeError, match="expected BoolTensor"):
        torch.masked_select(xt.detach(), mask.to(torch.uint8).to("tpu"))


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
@pytest.mark.parametrize("return_inverse", [False, True])
@pytest.mark.parametrize("return_counts", [False, True])
def test_unique_matches_cpu(dtype, return_inverse, return_counts):
    x = _sample(dtype, shape=(3, 8), ties=True)
    kw = dict(return_inverse=return_inverse, return_counts=return_counts)
    _same(torch.unique(x.to("tpu"), sorted=True, **kw), torch.unique(x, sorted=True, **kw))
    _same(torch.unique_consecutive(x.to("tpu"), **kw), torch.unique_consecutive(x, **kw))
    _same(torch._unique2(x.to("tpu"), True, return_inverse, return_counts),
          torch._unique2(x, True, return_inverse, return_counts))


def test_unique_edge_cases():
    for x in (torch.tensor([NAN, 1.0, NAN, 1.0, 2.0, -0.0, 0.0]), torch.tensor(5),
              torch.empty(0), torch.tensor([7, 7, 7])):
        for kw in (dict(), dict(return_inverse=True, return_counts=True)):
            _same(torch.unique(x.to("tpu"), **kw), torch.unique(x, **kw))
            _same(torch.unique_consecutive(x.to("tpu"), **kw), torch.unique_consecutive(x, **kw))
    x = torch.tensor([3, 1, 1, 2])
    # sorted=False: the order is unspecified on CPU too; the set and inverse must agree.
    vals, inv = torch.unique(x.to("tpu"), sorted=False, return_inverse=True)
    assert torch.equal(vals.cpu()[inv.cpu()], x)
    _same(torch.unique_consecutive(x.to("tpu"), dim=0), torch.unique_consecutive(x, dim=0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_unique_dim_matches_cpu(dtype):
    g = torch.Generator().manual_seed(0)
    for shape, dim in (((6, 3), 0), ((6, 3), 1), ((4, 5, 2), 1), ((4, 5, 2), -1), ((5,), 0)):
        x = torch.randint(0, 2, shape, generator=g).to(dtype)
        for kw in (dict(), dict(return_inverse=True, return_counts=True)):
            _same(torch.unique(x.to("tpu"), dim=dim, **kw), torch.unique(x, dim=dim, **kw))
            _same(torch.unique_consecutive(x.to("tpu"), dim=dim, **kw),
                  torch.unique_consecutive(x, dim=dim, **kw))
        _same(torch.ops.aten.unique_dim(x.to("tpu"), dim), torch.ops.aten.unique_dim(x, dim))
        _same(torch.ops.aten.unique_dim_consecutive(x.to("tpu"), dim),
              torch.ops.aten.unique_dim_consecutive(x, dim))


def test_equal():
    x = torch.randn(3, 4)
    xt = x.to("tpu")
    assert torch.equal(xt, x.clone().to("tpu"))
    assert not torch.equal(xt, (x + 1).to("tpu"))
    assert not torch.equal(xt, xt[:2])
    assert torch.equal(xt.int(), x.int().to("tpu"))
    assert torch.equal(torch.ones(2, device="tpu"), torch.ones(2, dtype=torch.int32, device="tpu"))
    n = torch.tensor([NAN, 1.0], device="tpu")
    assert not torch.equal(n, n)
    assert torch.equal(torch.empty(0, device="tpu"), torch.empty(0, device="tpu"))


def test_print_works_without_cpu_fallback(run_python):
    proc = run_python(
        """
        import torch, torchtpu
        torch.manual_seed(0)
        print(torch.randn(3, 3, device="tpu"))
        print(torch.tensor([1.5, float("nan"), float("inf"), 0.0], device="tpu"))
        print(torch.arange(6, device="tpu").reshape(2, 3))
        print(torch.randn(2, 2, device="tpu", dtype=torch.bfloat16))
        print(torch.randn(2000, device="tpu"))
        print("FALLBACKS", torchtpu.metrics()["cpu_fallbacks"])
        """,
        TORCHTPU_CPU_FALLBACK="0",
    )
    assert "device='tpu:0'" in proc.stdout and "FALLBACKS 0" in proc.stdout, proc.stdout
