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
