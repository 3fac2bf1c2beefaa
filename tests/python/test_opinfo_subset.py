"""The fast subset of the OpInfo conformance harness (torchtpu.testing.opinfo): common ops in
float32 must pass natively, forward and gradient, and the harness must classify an op without a
lowering as pass-with-fallback naming the fallen-back aten op. The full sweep is
scripts/opinfo_sweep.sh (report in docs/OPINFO.md)."""

from __future__ import annotations

import pytest
import torch

from torchtpu.testing import opinfo

COMMON_OPS = [
    "add", "mul", "sub", "div.no_rounding_mode", "exp", "log", "sin", "tanh", "sigmoid",
    "nn.functional.relu", "abs", "neg", "sum", "mean", "amax", "argmax", "softmax",
    "log_softmax", "mm", "bmm", "matmul", "cat", "stack", "where", "clamp", "transpose",
    "reshape", "pow", "sqrt", "maximum",
]
# An OpInfo whose op has no lowering yet (aten::linalg_ldl_factor_ex); change it when it gets one.
UNLOWERED = "linalg.ldl_factor"


@pytest.fixture(scope="module")
def subset_records():
    recs = opinfo.run_sweep(ops=COMMON_OPS + [UNLOWERED], dtypes=["float32"], max_samples=3,
                            timeout=60)
    return {r["op"]: r for r in recs}


@pytest.mark.parametrize("name", COMMON_OPS)
def test_common_op_passes_natively(subset_records, name):
    rec = subset_records[name]
    assert rec["category"] == "pass-native", rec
    assert rec["samples"] > 0
    if name not in ("argmax",):  # argmax has no gradient
        assert rec["grad"], f"{name}: gradients were not compared"


def test_unlowered_op_is_pass_with_fallback(subset_records):
    rec = subset_records[UNLOWERED]
    assert rec["category"] == "pass-with-fallback", rec
    assert any("ldl_factor" in k for k in rec["fallbacks"]), rec["fallbacks"]
    assert "ldl_factor" in rec["detail"]


def test_compare_is_strict():
    t = torch.tensor([1.0, float("nan"), float("inf")])
    opinfo.compare([t.clone(), 3, (True,)], [t, 3, (True,)])
    with pytest.raises(opinfo._Mismatch):
        opinfo.compare(torch.tensor([1.0, 0.0]), torch.tensor([1.0, float("nan")]))
    with pytest.raises(opinfo._Mismatch):
        opinfo.compare(torch.tensor([1, 2]), torch.tensor([1, 3]))
    with pytest.raises(opinfo._Mismatch):
        opinfo.compare(torch.tensor([1.0]), torch.tensor([1], dtype=torch.int64))


def test_markdown_summary_counts():
    recs = [
        {"op": "a", "dtype": "float32", "category": "pass-native", "detail": "", "fallbacks": {}},
        {"op": "b", "dtype": "float32", "category": "pass-with-fallback",
         "detail": "fallback: aten::x", "fallbacks": {"aten::x": 2}},
        {"op": "c", "dtype": "float32", "category": "error", "detail": "RuntimeError: boom",
         "fallbacks": {}},
        {"op": "c", "dtype": "int64", "category": "skipped", "detail": "why", "fallbacks": {}},
    ]
    s = opinfo.summarize(recs)
    assert s["float32_ops"] == 3
    assert round(s["float32_native_pct"], 1) == 33.3
    assert round(s["float32_native_or_fallback_pct"], 1) == 66.7
    md = opinfo.markdown_summary(recs)
    assert "`aten::x`" in md and "| c | ERROR | skip |" in md


def test_tied_indices_pass_only_when_they_pick_equal_values():
    import types

    from torch.testing._internal.common_methods_invocations import op_db

    sort = next(o for o in op_db if o.name == "sort" and not o.variant_test_name)
    sample = types.SimpleNamespace(input=torch.tensor([1.0, 1.0, 2.0]))
    values = torch.tensor([1.0, 1.0, 2.0])
    cpu = (values, torch.tensor([0, 1, 2]))
    assert opinfo._tie_equivalent(sort, sample, (values, torch.tensor([1, 0, 2])), cpu)
    # Not a permutation, though every index picks a tied value.
    assert not opinfo._tie_equivalent(sort, sample, (values, torch.tensor([0, 0, 2])), cpu)
    # Picks different values.
    assert not opinfo._tie_equivalent(sort, sample, (values, torch.tensor([2, 1, 0])), cpu)
    # Wrong values never pass, whatever the indices.
    assert not opinfo._tie_equivalent(
        sort, sample, (torch.tensor([1.0, 2.0, 2.0]), torch.tensor([0, 1, 2])), cpu)


# --- Random ops, uninitialized memory and device-restricted OpInfos -------------------------

from torch.testing._utils import wrapper_set_seed  # noqa: E402  (patched by the harness)


def test_random_and_uninitialized_ops_are_compared_not_skipped():
    recs = {r["op"]: r for r in opinfo.run_sweep(
        ops=["bernoulli", "nn.functional.dropout", "empty_strided", "jiterator_unary"],
        dtypes=["float32"], max_samples=4, timeout=120)}
    for name in ("bernoulli", "nn.functional.dropout"):
        assert recs[name]["category"] == "pass-native", recs[name]
        assert recs[name]["check"] == "distribution", recs[name]
    assert recs["empty_strided"]["category"] == "pass-native", recs["empty_strided"]
    assert recs["empty_strided"]["check"] == "metadata"
    # onlyCUDA: not an OpInfo supporting float32 on CPU.
    assert recs["jiterator_unary"]["dtype"] == "-"
    assert "only on cuda" in recs["jiterator_unary"]["detail"]


class _FakeRandomOpInfo:
    """Just what run_one reads of an OpInfo: a random op (wrapped in wrapper_set_seed, as op_db
    does) whose tpu draws are `scale` times CPU's."""

    def __init__(self, scale: float):
        self.name, self.variant_test_name, self.supports_autograd = "fake_rand", "", False
        self.scale = scale
        self.op = lambda x: wrapper_set_seed(self._draw, x)

    def __call__(self, *args, **kwargs):
        return self.op(*args, **kwargs)

    def _draw(self, x):
        r = torch.rand_like(x)
        return r * self.scale if x.device.type == "tpu" else r

    def sample_inputs(self, device, dtype, requires_grad=False):
        import types

        yield types.SimpleNamespace(input=torch.zeros(64, dtype=dtype, device=device), args=(),
                                    kwargs={}, output_process_fn_grad=lambda o: o)


def test_distribution_check_catches_a_biased_generator():
    ok = opinfo.run_one(_FakeRandomOpInfo(1.0), "float32")
    assert ok["category"] == "pass-native" and ok["check"] == "distribution", ok
    bad = opinfo.run_one(_FakeRandomOpInfo(1.1), "float32")
    assert bad["category"] == "mismatch", bad
    assert "in distribution" in bad["detail"]


def test_run_shuffle_bound_tolerates_dependent_values_and_catches_shifts():
    import numpy as np

    rng = np.random.default_rng(1)
    # Each run is one value repeated (like dropout3d dropping whole channels): pooled values are
    # strongly dependent, and a value-level test would reject these equal distributions.
    same_a = [np.full(100, rng.normal()) for _ in range(60)]
    same_b = [np.full(100, rng.normal()) for _ in range(60)]
    assert opinfo._distributions_differ(same_a, same_b, 1e-4, 1e-5) is None
    a = [rng.normal(size=100) for _ in range(40)]
    b = [rng.normal(size=100) for _ in range(40)]
    assert opinfo._distributions_differ(a, b, 1e-4, 1e-5) is None
    shifted = [x + 0.2 for x in b]
    assert opinfo._distributions_differ(a, shifted, 1e-4, 1e-5) is not None
    wider = [x * 1.5 for x in b]
    assert opinfo._distributions_differ(a, wider, 1e-4, 1e-5) is not None


def test_wider_dtype_run_arbitrates_when_cpu_overflows():
    # CPU's float16 matrix_exp overflows to NaN on a sample whose float32 result is finite; tpu
    # evaluates wider and returns the float32 result rounded: that is a pass, not a mismatch.
    from torch.testing._internal.common_methods_invocations import op_db

    op = next(o for o in op_db if o.name == "matrix_exp")
    rec = opinfo.run_one(op, "float16", max_samples=16)
    assert rec["category"] == "pass-native", rec


class _FakeBernoulliOpInfo(_FakeRandomOpInfo):
    """bernoulli with a per-element p; on tpu, `ignore_p` draws every element with the mean p,
    which keeps the pooled share of ones (the pooled test cannot see it)."""

    def __init__(self, ignore_p: bool):
        super().__init__(1.0)
        self.ignore_p = ignore_p

    def _draw(self, x):
        if x.device.type == "tpu" and self.ignore_p:
            return torch.bernoulli(torch.full_like(x, float(x.mean())))
        return torch.bernoulli(x)

    def sample_inputs(self, device, dtype, requires_grad=False):
        import types

        p = torch.linspace(0.02, 0.98, 64, dtype=dtype, device=device)
        yield types.SimpleNamespace(input=p, args=(), kwargs={},
                                    output_process_fn_grad=lambda o: o)


def test_distribution_check_catches_ignored_per_element_parameters():
    assert opinfo.run_one(_FakeBernoulliOpInfo(False), "float32")["category"] == "pass-native"
    bad = opinfo.run_one(_FakeBernoulliOpInfo(True), "float32")
    assert bad["category"] == "mismatch", bad
    assert "per-position" in bad["detail"]
