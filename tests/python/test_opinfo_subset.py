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
