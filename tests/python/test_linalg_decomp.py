"""Decompositions and solves on tpu against CPU PyTorch: triangular solves, Cholesky (and its
solve/inverse), LU with partial pivoting (factor, unpack, solve), inv, det, slogdet, solve,
including batched, rectangular, singular and non-contiguous inputs, and their gradients.

Every test checks that no op ran through the CPU fallback.
"""

import pytest
import torch

from torchtpu.testing.fallbacks import (assert_close_to_cpu, check_against_cpu, fallback_counts,
                                         make, new_fallbacks)
from conftest import assert_same_error

DEV = "tpu"
TOL = dict(rtol=1e-4, atol=1e-4)


pytestmark = pytest.mark.usefixtures("no_cpu_fallback")


def _close(a, e):
    assert_close_to_cpu(a, e, **TOL)


def _check(fn, *inputs, grad=True):
    check_against_cpu(fn, *inputs, grad=grad, **TOL, grad_rtol=1e-3, grad_atol=1e-3)


@pytest.fixture
def mats():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(3, 4, 4, generator=g)
    B = torch.randn(3, 4, 2, generator=g)
    U = torch.triu(A) + 4 * torch.eye(4)
    S = A @ A.mT + 4 * torch.eye(4)
    return A, B, U, S


@pytest.mark.parametrize("upper,left,unit", [(True, True, False), (False, False, False),
                                              (False, True, True)])
def test_solve_triangular(mats, upper, left, unit):
    A, B, U, _ = mats
    T = U if upper else U.mT
    rhs = B if left else B.mT
    _check(lambda a, b: torch.linalg.solve_triangular(a, b, upper=upper, left=left,
                                                      unitriangular=unit), T, rhs)


def test_triangular_solve(mats):
    _, B, U, _ = mats
    for transpose in (False, True):
        _check(lambda b, a: torch.triangular_solve(b, a, upper=True, transpose=transpose), B, U)


def test_cholesky_family(mats):
    _, B, _, S = mats
    _check(torch.linalg.cholesky, S)
    _check(lambda a: torch.linalg.cholesky(a, upper=True), S)
    _check(torch.linalg.cholesky_ex, S)
    L = torch.linalg.cholesky(S)
    _check(torch.cholesky_solve, B, L)
    _check(lambda b, u: torch.cholesky_solve(b, u, upper=True), B, L.mT)
    _check(torch.cholesky_inverse, L[0])
    _check(lambda u: torch.cholesky_inverse(u, upper=True), L[0].mT)
    # not positive definite: info names the first failing minor, like LAPACK
    info = torch.linalg.cholesky_ex((-S).to(DEV)).info.cpu()
    torch.testing.assert_close(info, torch.linalg.cholesky_ex(-S).info)


@pytest.mark.parametrize("order", [2, 3, 4])
def test_cholesky_names_the_first_failing_minor(order):
    # Issue 15: info was 1 where the CPU gives 2, and the error named the wrong minor. Leading
    # minors below `order` are positive-definite, the one of order `order` is not; a batch mixes
    # a failing and a good matrix.
    n = 4
    A = torch.eye(n, dtype=torch.float64) * 4
    A[order - 1, order - 1] = -1.0
    A[0, order - 1] = A[order - 1, 0] = 0.5
    batch = torch.stack([A, torch.eye(n, dtype=torch.float64)])
    for a in (A, batch, A.float()):
        got = torch.linalg.cholesky_ex(a.to(DEV))
        want = torch.linalg.cholesky_ex(a)
        assert torch.equal(got.info.cpu(), want.info), (got.info, want.info)
    assert_same_error(torch.linalg.cholesky, A)
    assert_same_error(torch.linalg.cholesky, batch)


@pytest.mark.parametrize("shape", [(3, 4, 4), (2, 5, 3), (2, 3, 5), (6, 6)])
def test_lu(shape):
    A = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    _check(torch.linalg.lu_factor_ex, A, grad=False)
    _check(torch.linalg.lu, A)
    LU, piv = torch.linalg.lu_factor(A)
    _check(lambda lu: torch.lu_unpack(lu, piv.to(lu.device)), LU)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [True, False])
def test_lu_solve(mats, left, adjoint):
    A, B, _, _ = mats
    LU, piv = torch.linalg.lu_factor(A)
    rhs = B if left else B.mT
    _check(lambda lu, b: torch.linalg.lu_solve(lu, piv.to(lu.device), b, left=left,
                                               adjoint=adjoint), LU, rhs)


@pytest.mark.parametrize("transposed", [False, True])
def test_inv_det_slogdet_solve(mats, transposed):
    A, B, _, S = mats
    if transposed:  # non-contiguous input: CPU factors A itself instead of A^T
        A = A.mT
    _check(torch.linalg.inv, A)
    _check(torch.linalg.det, A)
    _check(lambda a: torch.linalg.slogdet(a)[1], A)
    _check(torch.logdet, S)
    _check(torch.linalg.solve, A, B)
    _check(lambda a, b: torch.linalg.solve(a, b[..., 0]), A, B)
    _check(lambda a, b: torch.linalg.solve(a, b, left=False), A, B.mT)


def test_singular():
    sing = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    _check(torch.linalg.det, sing, grad=False)
    _check(torch.linalg.slogdet, sing, grad=False)
    info = torch.linalg.inv_ex(sing.to(DEV)).info.cpu()
    torch.testing.assert_close(info, torch.linalg.inv_ex(sing).info)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 3)])
def test_qr_family(shape):
    A = torch.randn(*shape, generator=torch.Generator().manual_seed(2))
    _check(torch.geqrf, A, grad=False)
    for mode in ("reduced", "complete", "r"):
        _check(lambda a: torch.linalg.qr(a, mode=mode), A, grad=mode == "reduced")
    a, tau = torch.geqrf(A)
    k = min(shape[-2:])
    _check(lambda v: torch.linalg.householder_product(v, tau.to(v.device)), a[..., :k])
    m = shape[-2]
    for left in (True, False):
        for transpose in (True, False):
            C = torch.randn(*shape[:-2], m, 2) if left else torch.randn(*shape[:-2], 2, m)
            _check(lambda v, c: torch.ormqr(v, tau.to(v.device), c, left=left,
                                            transpose=transpose), a, C, grad=False)


def test_matrix_exp():
    g = torch.Generator().manual_seed(4)
    for A in (torch.randn(4, 4, generator=g) * 3, torch.randn(2, 5, 5, generator=g),
              torch.zeros(3, 3), torch.randn(3, 3, generator=g) * 1e-3):
        exact = torch.matrix_exp(A.double())
        out = torch.matrix_exp(A.to(DEV)).cpu().double()
        # at least as accurate as CPU's float32 result, against the float64 one
        cpu_err = (torch.matrix_exp(A).double() - exact).abs()
        assert bool(((out - exact).abs() <= cpu_err + 1e-5 + 1e-5 * exact.abs()).all())
    A = torch.randn(4, 4, generator=g)
    _check(torch.matrix_exp, A)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 3)])
@pytest.mark.parametrize("full", [False, True])
def test_svd(shape, full):
    # Singular vectors are only defined up to sign (LAPACK's choice is not canonical), so the
    # check is on S, on the reconstruction and orthonormality, and on sign-free functions.
    A = torch.randn(*shape, generator=torch.Generator().manual_seed(5))
    A[..., 0] = A[..., 1]  # rank deficient: a zero singular value
    U, S, Vh = [t.cpu() for t in torch.linalg.svd(A.to(DEV), full_matrices=full)]
    Uc, Sc, Vhc = torch.linalg.svd(A, full_matrices=full)
    assert U.shape == Uc.shape and Vh.shape == Vhc.shape
    torch.testing.assert_close(S, Sc, **TOL)
    k = S.shape[-1]
    torch.testing.assert_close(U[..., :k] @ torch.diag_embed(S) @ Vh[..., :k, :], A, **TOL)
    eye_u, eye_v = torch.eye(U.shape[-1]), torch.eye(Vh.shape[-2])
    torch.testing.assert_close(U.mT @ U, eye_u.expand_as(U.mT @ U), **TOL)
    torch.testing.assert_close(Vh @ Vh.mT, eye_v.expand_as(Vh @ Vh.mT), **TOL)
    if not full:
        B = torch.randn(*shape, generator=torch.Generator().manual_seed(6))
        _check(torch.linalg.pinv, B)
        _check(torch.linalg.svdvals, B)
        _check(lambda t: torch.linalg.matrix_norm(t, "nuc"), B)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(uplo):
    g = torch.Generator().manual_seed(7)
    for shape in [(4, 4), (2, 5, 5), (1, 1)]:
        A = torch.randn(*shape, generator=g)
        A = A + A.mT
        A[..., 0, -1] += 1.0  # only the `uplo` triangle is read
        w, V = [t.cpu() for t in torch.linalg.eigh(A.to(DEV), UPLO=uplo)]
        wc, _ = torch.linalg.eigh(A, UPLO=uplo)
        torch.testing.assert_close(w, wc, **TOL)  # ascending, like LAPACK
        tri = torch.tril(A) if uplo == "L" else torch.triu(A)
        sym = tri + (torch.tril(A, -1) if uplo == "L" else torch.triu(A, 1)).mT
        torch.testing.assert_close(V @ torch.diag_embed(w) @ V.mT, sym, **TOL)
        n = shape[-1]
        torch.testing.assert_close(V.mT @ V, torch.eye(n).expand_as(V.mT @ V), **TOL)
    S = torch.randn(4, 4, generator=g)
    S = S + S.mT
    _check(lambda t: torch.linalg.eigvalsh(t), S)
    _check(lambda t: torch.linalg.pinv(t, hermitian=True), S, grad=False)


@pytest.mark.parametrize("shapes", [((4, 3), (4, 2)), ((3, 3), (3, 2)), ((2, 3), (2, 3)),
                                    ((2, 5, 3), (2, 5, 2))])
@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss"])
def test_lstsq(shapes, driver):
    g = torch.Generator().manual_seed(8)
    A, B = torch.randn(*shapes[0], generator=g), torch.randn(*shapes[1], generator=g)
    out = torch.linalg.lstsq(A.to(DEV), B.to(DEV), driver=driver)
    ref = torch.linalg.lstsq(A, B, driver=driver)
    for a, e in zip(out, ref):
        assert a.shape == e.shape
        torch.testing.assert_close(a.cpu(), e, **TOL)
    _check(lambda a, b: torch.linalg.lstsq(a, b, driver=driver).solution, A, B)


# ---- linalg.solve_ex(check_errors=True) ----

@pytest.mark.parametrize("left", [True, False])
def test_linalg_solve_ex_check_errors(left):
    A = make((2, 3, 3), torch.float32, seed=5) + 3 * torch.eye(3)
    B = make((2, 3, 2) if left else (2, 2, 3), torch.float32, seed=6)
    before = fallback_counts()
    got = torch.linalg.solve_ex(A.to("tpu"), B.to("tpu"), left=left, check_errors=True)
    want = torch.linalg.solve_ex(A, B, left=left, check_errors=True)
    for a, e in zip(got, want):
        assert a.dtype == e.dtype and a.shape == e.shape
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-5)
    assert not new_fallbacks(before)


def test_linalg_solve_ex_check_errors_singular():
    S = make((2, 3, 3), torch.float32, seed=7)
    S[1] = 0
    for A in (S, S[1]):
        b = make(A.shape[:-1], torch.float32, seed=8)
        assert_same_error(lambda a, v: torch.linalg.solve_ex(a, v, check_errors=True), A, b)
