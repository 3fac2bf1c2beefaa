"""out= overload forms whose values or dtypes the CPU accepts work on tpu the same way."""
import pytest
import torch

import torchtpu


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.int64, torch.float16])
@pytest.mark.parametrize("form", ["out", "Tensor_out", "float_out"])
def test_bernoulli_out_any_dtype(form, dtype):
    # CPU fills `out` in its own dtype (bool included); PyTorch's meta kernel refuses bool.
    torch.tpu.manual_seed(0)
    n = 4000
    p = torch.full((n,), 0.3, device="tpu")
    out = torch.empty(7, dtype=dtype, device="tpu")
    if form == "out":
        r = torch.bernoulli(p, out=out)
    elif form == "Tensor_out":
        r = torch.ops.aten.bernoulli.Tensor_out(torch.empty(n, device="tpu"), p, out=out)
    else:
        r = torch.ops.aten.bernoulli.float_out(torch.empty(n, device="tpu"), 0.3, out=out)
    assert r is out and out.dtype == dtype and out.shape == (n,)
    cpu_out = torch.empty(7, dtype=dtype)
    torch.bernoulli(torch.full((n,), 0.3), out=cpu_out)
    assert cpu_out.dtype == dtype  # the CPU accepts the same out
    v = out.cpu().double()
    assert set(v.unique().tolist()) <= {0.0, 1.0}
    assert abs(v.mean().item() - 0.3) < 0.04


# Issue 18: the out= overloads of ops that take the CPU fallback. An out= sweep over every
# OpInfo with out= support (float32, first two samples; 643 calls) found these ten OpInfos
# reaching the fallback through their out= form, all matching the CPU; they stay checked here
# (values into a fresh out, which the fallback resizes and copies back to tpu). masked_select,
# narrow_copy and logcumsumexp were among them and are native now (test_native_forms.py).
FALLBACK_OUT_OPS = ["geqrf", "linalg.eig", "linalg.eigvals", "linalg.ldl_factor",
                    "linalg.ldl_factor_ex", "linalg.ldl_solve", "linalg.lstsq"]


@pytest.mark.parametrize("name", FALLBACK_OUT_OPS)
def test_fallback_out_forms_match_cpu(name):
    from torchtpu.testing.opinfo import _move, compare, load_op_db, op_full_name

    op = next(o for o in load_op_db() if op_full_name(o) == name)

    def fresh(ref, device):
        if isinstance(ref, torch.Tensor):
            return torch.empty(0, dtype=ref.dtype, device=device)
        return type(ref)(fresh(r, device) for r in ref)

    for sample in list(op.sample_inputs("cpu", torch.float32))[:2]:
        ref = op(sample.input, *sample.args, **sample.kwargs)
        cpu_out = fresh(ref, "cpu")
        op(sample.input, *sample.args, **sample.kwargs, out=cpu_out)
        dev_out = fresh(ref, "tpu")
        moved = _move((sample.input, sample.args, sample.kwargs), "tpu", {})
        op(moved[0], *moved[1], **moved[2], out=dev_out)
        compare(dev_out, cpu_out)
