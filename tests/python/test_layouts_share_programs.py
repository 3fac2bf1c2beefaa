"""Layouts: equivalent ones share one program, and new tensors keep the CPU's strides.

On XLA:CPU and XLA:GPU a storage's device buffer is 1-D (csrc/device/storage.h, flat_buffers):
the dims of the op that made it say nothing its bytes do not, so a view reads through one program
whatever made its storage (a [32, 64] matmul result viewed as [2, 16, 64], an unsqueezed [2]).
TPU buffers are tiled and keep their shapes: there those are distinct programs, as before.
Program counts are behaviour (which signatures share a program), never timings."""

import pytest
import torch
from torch.testing import assert_close

import torchtpu
from torchtpu import _C


def compiled():
    """Programs built: compiled, or loaded from the on-disk cache when one is enabled."""
    torch.tpu.synchronize()
    m = torchtpu.metrics()
    return m["programs_compiled"] + m.get("disk_cache_hits", 0)


def flat_buffers():
    return _C._platform() in ("cpu", "cuda", "rocm")


def test_a_view_reads_through_one_program_whatever_made_its_storage():
    a, b = torch.randn(2, 16, 64), torch.randn(32, 64)
    made_3d = torch.neg(a.to("tpu"))  # a program's [2, 16, 64] result
    made_2d = torch.neg(b.to("tpu")).view(2, 16, 64)  # a [32, 64] result, viewed
    uploaded = a.to("tpu")
    before = compiled()
    outs = [t.exp() for t in (made_3d, made_2d, uploaded)]
    if flat_buffers():
        # One program; with size buckets (the default there) it is the size-generic exp of the
        # 4096-element bucket, which an earlier test may have built already.
        assert compiled() - before <= 1
    else:
        assert compiled() == before + 2
    for out, want in zip(outs, ((-a).exp(), (-b).view(2, 16, 64).exp(), a.exp())):
        assert_close(out.cpu(), want)


def test_generate_style_cats_share_one_program():
    # generate() appends a token to the ids (an unsqueezed [2]) and a column to the mask (a
    # [2, 1] made as such): one cat of one layout.
    ids = torch.randint(0, 9, (2, 5))
    tok, col = torch.randint(0, 9, (2,)), torch.randint(0, 9, (2, 1))
    t_ids = ids.to("tpu")
    t_tok = torch.neg(tok.to("tpu"))[:, None]
    t_col = torch.neg(col.to("tpu"))
    before = compiled()
    r1 = torch.cat([t_ids, t_tok], dim=-1)
    r2 = torch.cat([t_ids, t_col], dim=-1)
    assert compiled() == before + (1 if flat_buffers() else 2)
    assert_close(r1.cpu(), torch.cat([ids, -tok[:, None]], dim=-1), rtol=0, atol=0)
    assert_close(r2.cpu(), torch.cat([ids, -col], dim=-1), rtol=0, atol=0)


def test_writes_through_a_view_of_another_shape_land_in_the_storage():
    b = torch.randn(32, 64)
    s = torch.neg(b.to("tpu"))
    v = s.view(2, 16, 64)
    v.mul_(2)
    v[1].add_(1)
    s.t()[3].sub_(5)  # a strided row of the transposed storage
    want = -b
    want.view(2, 16, 64).mul_(2)
    want.view(2, 16, 64)[1].add_(1)
    want.t()[3].sub_(5)
    assert_close(s.cpu(), want)
    assert_close(v.cpu(), want.view(2, 16, 64))
    assert_close((s @ s.t()).cpu(), want @ want.t(), rtol=1e-4, atol=1e-4)


def transposed(t):
    return t.t()


def permuted(t):
    return t.reshape(2, 3, 4).permute(2, 0, 1)


def permuted_slice(t):
    return t.reshape(2, 3, 4).permute(2, 0, 1)[:, :, :2]


def size_one_dim(t):
    return t.reshape(4, 1, 6).permute(2, 1, 0)


LAYOUTS = [transposed, permuted, permuted_slice, size_one_dim]
OPS = {
    "clone": lambda x: x.clone(),
    "exp": torch.exp,
    "add_scalar": lambda x: x + 1.5,
    "mul_self": lambda x: x * x,
    "add_contiguous": lambda x: x + torch.ones(x.shape, device=x.device),
    "contiguous_plus": lambda x: torch.ones(x.shape, device=x.device) + x,
    "where": lambda x: torch.where(x > 0, x, -x),
    "to_double": lambda x: x.to(torch.float64),
}


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("op", list(OPS), ids=str)
def test_results_keep_the_cpus_strides(layout, op):
    base = torch.randn(4, 6)
    x_cpu = layout(base)
    x_tpu = layout(base.to("tpu"))
    assert x_tpu.stride() == x_cpu.stride()
    want = OPS[op](x_cpu)
    got = OPS[op](x_tpu)
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    assert_close(got.cpu(), want)
    # What the CPU allows on its layout, tpu allows too (and what it refuses, tpu refuses).
    try:
        want_view = want.view(-1)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            got.view(-1)
    else:
        assert_close(got.view(-1).cpu(), want_view)


def test_a_kept_layout_adds_no_program_for_the_next_equal_call():
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    ta, tb = a.to("tpu"), b.to("tpu")
    (ta.t().exp() + 1).sum(0)
    before = compiled()
    out = (tb.t().exp() + 1).sum(0)
    assert compiled() == before
    assert_close(out.cpu(), (b.t().exp() + 1).sum(0))
