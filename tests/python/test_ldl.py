"""LDL^T (Bunch-Kaufman, LAPACK ?sytf2/?sytrs with uplo='L') on tpu against CPU PyTorch:
torch.linalg.ldl_factor_ex / ldl_factor and ldl_solve for float32/float64, sizes 1..8 and 20,
batched, with 1x1 pivots, interchanges and 2x2 pivots (zero-diagonal blocks, indefinite
matrices) and singular inputs. LD, pivots and info match CPU; every test checks that no op ran
through the CPU fallback.
"""

import pytest
import torch

import torchtpu  # noqa: F401
from torchtpu.testing.fallbacks import fallback_counts, new_fallbacks

DEV = "tpu"
DTYPES = [torch.float32, torch.float64]
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 20]


@pytest.fixture(autouse=True)
def no_cpu_fallback():
    before = fallback_counts()
    yield
    grown = new_fallbacks(before)
    assert not grown, f"ops ran through the CPU fallback: {grown}"


def _sym(shape, dtype, seed, kind):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(shape, generator=g, dtype=torch.float64)
    a = a + a.mT
    n = shape[-1]
    if kind == "zero_diag":  # forces 2x2 pivots: [[0, 1], [1, 0]]-like blocks
        a.diagonal(dim1=-2, dim2=-1).zero_()
    elif kind == "small_diag":  # forces interchanges
        a.diagonal(dim1=-2, dim2=-1).mul_(1e-3)
    elif kind == "block" and n >= 2:
        a[..., :2, :2] = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    elif kind == "dominant":  # no pivoting, positive and negative diagonal
        d = torch.arange(n, dtype=torch.float64) % 2 * 2 - 1
        a = a + torch.diag_embed(d * 4 * n)
    return a.to(dtype)


def _tol(dtype):
    return (1e-5, 1e-5) if dtype == torch.float32 else (1e-10, 1e-10)


def _check_factor(a):
    ld, piv, info = torch.linalg.ldl_factor_ex(a)
    ld_t, piv_t, info_t = torch.linalg.ldl_factor_ex(a.to(DEV))
    assert ld_t.device.type == DEV and piv_t.dtype == piv.dtype and info_t.dtype == info.dtype
    assert torch.equal(piv_t.cpu(), piv), (piv_t.cpu(), piv)
    assert torch.equal(info_t.cpu(), info)
    rtol, atol = _tol(a.dtype)
    scale = max(1.0, ld.abs().max().item()) if ld.numel() else 1.0
    torch.testing.assert_close(ld_t.cpu(), ld, rtol=rtol, atol=atol * scale, equal_nan=True)
    return ld, piv, info


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", ["random", "zero_diag", "small_diag", "block", "dominant"])
def test_ldl_factor_matches_cpu(n, dtype, kind):
    for seed in range(3):
        _check_factor(_sym((n, n), dtype, seed, kind))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", [(3,), (2, 3)])
@pytest.mark.parametrize("n", [1, 3, 6, 20])
def test_ldl_factor_batched(batch, n, dtype):
    a = torch.cat([_sym(batch[:-1] + (1, n, n), dtype, s, k)
                   for s, k in zip(range(batch[-1]), ["random", "zero_diag", "small_diag"])],
                  dim=-3)
    ld, piv, _ = _check_factor(a)
    if n > 1:
        assert (piv < 0).any() or (piv != torch.arange(1, n + 1, dtype=piv.dtype)).any()


def test_pivot_kinds_exercised():
    # [[0,1],[1,0]] needs a 2x2 pivot; [[eps, 1],[1, 2]] a 1x1 pivot with interchange.
    a = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, 0.0]], dtype=torch.float64)
    _, piv, _ = _check_factor(a)
    assert (piv < 0).any()
    b = torch.tensor([[1e-3, 1.0], [1.0, 2.0]], dtype=torch.float64)
    _, piv, _ = _check_factor(b)
    assert piv.tolist() == [2, 2]


@pytest.mark.parametrize("dtype", DTYPES)
def test_singular_info(dtype):
    z = torch.zeros(2, 4, 4, dtype=dtype)
    z[1] = _sym((4, 4), dtype, 0, "random")
    z[1, :, 2] = 0
    z[1, 2, :] = 0
    _, _, info = _check_factor(z)
    assert info[0].item() == 1 and info[1].item() != 0
    # the non-ex form on a regular matrix
    a = _sym((5, 5), dtype, 1, "zero_diag")
    ld, piv = torch.linalg.ldl_factor(a)
    ld_t, piv_t = torch.linalg.ldl_factor(a.to(DEV))
    assert torch.equal(piv_t.cpu(), piv)
    rtol, atol = _tol(dtype)
    torch.testing.assert_close(ld_t.cpu(), ld, rtol=rtol, atol=atol * ld.abs().max().item())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", ["random", "zero_diag", "block"])
def test_ldl_solve_matches_cpu(n, dtype, kind):
    a = _sym((2, n, n), dtype, n, kind)
    ld, piv, info = torch.linalg.ldl_factor_ex(a)
    if (info != 0).any():
        a = a + torch.eye(n, dtype=dtype)
        ld, piv, info = torch.linalg.ldl_factor_ex(a)
    g = torch.Generator().manual_seed(7)
    b = torch.randn(2, n, 3, generator=g, dtype=torch.float64).to(dtype)
    x = torch.linalg.ldl_solve(ld, piv, b)
    # the solve alone on CPU's factors, and the whole chain on tpu
    x_t = torch.linalg.ldl_solve(ld.to(DEV), piv.to(DEV), b.to(DEV)).cpu()
    ld_t, piv_t, _ = torch.linalg.ldl_factor_ex(a.to(DEV))
    x_t2 = torch.linalg.ldl_solve(ld_t, piv_t, b.to(DEV)).cpu()
    tol = 1e-4 if dtype == torch.float32 else 1e-9
    scale = max(1.0, x.abs().max().item())
    torch.testing.assert_close(x_t, x, rtol=tol, atol=tol * scale)
    torch.testing.assert_close(x_t2, x, rtol=tol, atol=tol * scale)


def test_ldl_solve_broadcasts():
    a = _sym((3, 4, 4), torch.float64, 3, "zero_diag")
    ld, piv = torch.linalg.ldl_factor(a)
    # one factorization, a batch of right-hand sides (CPU PyTorch crashes when both batches
    # broadcast against each other, so that case is not compared)
    ld, piv = ld[0], piv[0]
    b = torch.randn(5, 4, 2, dtype=torch.float64)
    x = torch.linalg.ldl_solve(ld, piv, b)
    x_t = torch.linalg.ldl_solve(ld.to(DEV), piv.to(DEV), b.to(DEV))
    assert x_t.shape == x.shape
    torch.testing.assert_close(x_t.cpu(), x, rtol=1e-9, atol=1e-9)
