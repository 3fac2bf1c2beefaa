"""Elementwise ops on tpu against CPU PyTorch: arithmetic, unary math, comparisons, logical and
bitwise ops, where/masked_fill/clamp and activations (forward and backward).

Every natively lowered op must run without the CPU fallback: `native()` checks the fallback
counter of torchtpu.metrics() did not move. Shapes are tiny and the dtype matrix is chosen
per op, since every new (op, dtypes, shapes) signature compiles one XLA program.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import torchtpu

DEV = "tpu"
FLOATS = [torch.float32, torch.bfloat16, torch.float16]
INTS = [torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.bool]
SPECIALS = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0]


def fallbacks():
    return torchtpu.metrics().get("cpu_fallbacks", 0)


class native:
    """Asserts the block ran no CPU fallback."""

    def __enter__(self):
        self.before = fallbacks()

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            by_op = torchtpu.metrics().get("cpu_fallbacks_by_op", {})
            assert fallbacks() == self.before, f"CPU fallback ran: {by_op}"


def make(shape, dtype, seed=0, specials=True, low=-4.0, high=4.0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        return torch.randint(int(low) * 2, int(high) * 2 + 1, shape, generator=g).to(dtype)
    x = torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low
    x = x.to(dtype)
    if specials and x.numel() >= 2 * len(SPECIALS):
        flat = x.view(-1)
        for i, v in enumerate(SPECIALS):
            flat[i * 2 + 1] = v
    return x


def to_dev(v):
    return v.to(DEV) if isinstance(v, torch.Tensor) else v


def compare(actual, expected, rtol=None, atol=None):
    actual = actual.cpu()
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if not expected.dtype.is_floating_point:
        assert torch.equal(actual, expected), f"\n{actual}\n!=\n{expected}"
        return
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


def check(fn, *args, rtol=None, atol=None, **kwargs):
    """fn(*args) on tpu matches CPU and runs natively; where the CPU rejects the dtype, the tpu
    must reject it too (an error, never a silently computed value)."""
    try:
        expected = fn(*args, **kwargs)
    except (RuntimeError, NotImplementedError, TypeError):
        with pytest.raises((RuntimeError, NotImplementedError, TypeError, ValueError)):
            out = fn(*[to_dev(a) for a in args], **{k: to_dev(v) for k, v in kwargs.items()})
            # A module XLA refuses to compile fails where the host reads the result (compiles
            # run in the background).
            torch.utils._pytree.tree_map(lambda t: t.cpu() if torch.is_tensor(t) else t, out)
        return
    with native():
        actual = fn(*[to_dev(a) for a in args], **{k: to_dev(v) for k, v in kwargs.items()})
    compare(actual, expected, rtol, atol)


def f64_oracle(fn, x):
    """fn(x) computed by CPU PyTorch in float64 and rounded to x's dtype: the reference wherever
    the inputs hold special values. The float32/bfloat16 CPU kernels are no oracle there, since
    they depend on the instruction set: oneDNN's float32 gelu returns NaN for +inf on AVX-512
    machines and +inf (the right value) on AVX2 ones. Float64 takes ATen's own kernels, whose
    vector math (Sleef) gives the IEEE results at NaN, +-inf and +-0 on every instruction set."""
    return fn(x.double()).to(fn(x[:0]).dtype)


def tol(dtype, f32=(None, None)):
    """(rtol, atol) for transcendental results: default for halves, `f32` for float32."""
    return f32 if dtype == torch.float32 else (None, None)


# ---------------------------------------------------------------- unary

UNARY = {
    "abs": torch.abs, "neg": torch.neg, "sign": torch.sign, "sgn": torch.sgn,
    "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1,
    "log": torch.log, "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "asin": torch.asin, "acos": torch.acos, "atan": torch.atan,
    "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh,
    "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh,
    "erf": torch.erf, "erfc": torch.erfc, "erfinv": torch.erfinv,
    "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc,
    "frac": torch.frac, "sigmoid": torch.sigmoid, "logit": torch.logit,
    "nan_to_num": torch.nan_to_num, "isnan": torch.isnan, "isinf": torch.isinf,
    "isposinf": torch.isposinf, "isneginf": torch.isneginf, "isfinite": torch.isfinite,
    "signbit": torch.signbit, "bitwise_not": torch.bitwise_not,
    "logical_not": torch.logical_not, "square": torch.square,
}
# Inputs inside the domain where the op is defined, so the comparison covers real values.
DOMAIN = {
    "log": (0.01, 8), "log2": (0.01, 8), "log10": (0.01, 8), "log1p": (-0.9, 8),
    "sqrt": (0, 8), "rsqrt": (0.01, 8), "asin": (-1, 1), "acos": (-1, 1),
    "acosh": (1, 8), "atanh": (-0.99, 0.99), "erfinv": (-0.99, 0.99), "logit": (0.01, 0.99),
    "exp": (-10, 10), "exp2": (-10, 10), "expm1": (-10, 10), "sinh": (-10, 10),
    "cosh": (-10, 10), "tan": (-1.5, 1.5),
}
# XLA's f32 approximations of these are within a few ulp of glibc's, not always 1.3e-6.
LOOSE_F32 = {"tan", "erfinv", "acosh", "atanh", "asinh", "sinh", "cosh", "exp2", "log2",
             "log10", "logit", "rsqrt", "tanh", "expm1", "log1p", "erfc", "asin", "acos", "atan"}


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, dtype):
    low, high = DOMAIN.get(name, (-4, 4))
    x = make((4, 5), dtype, low=low, high=high)
    rtol, atol = tol(dtype, (1e-5, 1e-5) if name in LOOSE_F32 else (None, None))
    if name == "logit" and dtype in (torch.float16, torch.bfloat16):
        # CPU rounds x / (1 - x) to the half dtype before the log; tpu keeps f32 like CUDA.
        with native():
            actual = torch.logit(x.to(DEV))
        compare(actual, torch.logit(x.float()).to(dtype))
        return
    check(UNARY[name], x, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", sorted(set(UNARY) - {"bitwise_not"}))
def test_unary_specials(name):
    # nan, +-inf, +-0 and values around integers and .5 boundaries in float32.
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.5, -0.5, 1.5,
                      2.5, -2.5, 1.0, -1.0, 1e-30, 3.0, -7.25, 1e30])
    check(UNARY[name], x, rtol=1e-5, atol=1e-5)


def test_unary_zero_dim_and_float64():
    check(torch.exp, torch.tensor(1.5))
    check(torch.sin, torch.tensor(0.25, dtype=torch.float64))
    check(torch.erf, make((6,), torch.float64, specials=False))
    check(torch.abs, torch.tensor(-3, dtype=torch.int64))


def test_round_decimals():
    x = make((4, 5), torch.float32, specials=False, low=-100, high=100)
    for d in (0, 1, 2, -1):
        check(lambda t: torch.round(t, decimals=d), x)


def test_logit_eps_and_nan_to_num_args():
    x = make((4, 5), torch.float32, low=-0.5, high=1.5)
    check(lambda t: torch.logit(t, eps=1e-3), x, rtol=1e-5, atol=1e-5)
    for dtype in FLOATS:
        y = make((4, 5), dtype)
        check(lambda t: torch.nan_to_num(t, nan=1.5, posinf=100.0, neginf=-7.0), y)
        check(lambda t: torch.nan_to_num(t, neginf=-1.0), y)


# ---------------------------------------------------------------- binary arithmetic

BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "floor_divide": torch.floor_divide, "remainder": torch.remainder, "fmod": torch.fmod,
    "pow": torch.pow, "atan2": torch.atan2, "maximum": torch.maximum,
    "minimum": torch.minimum, "fmax": torch.fmax, "fmin": torch.fmin, "hypot": torch.hypot,
    "copysign": torch.copysign, "xlogy": torch.xlogy,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2), "sub_alpha": lambda a, b: torch.sub(a, b, alpha=3),
    "rsub": lambda a, b: torch.rsub(a, b, alpha=2),
}
# Integer division by zero raises on CPU; divisors avoid 0 for those.
NONZERO_DIVISOR = {"div_trunc", "div_floor", "floor_divide", "remainder", "fmod"}


def binary_inputs(name, dtype, a_shape=(3, 4), b_shape=(3, 4)):
    a = make(a_shape, dtype, seed=1)
    b = make(b_shape, dtype, seed=2)
    if name in NONZERO_DIVISOR and not dtype.is_floating_point and dtype != torch.bool:
        b = torch.where(b == 0, torch.ones_like(b), b)
    if name == "pow" and dtype in INTS:
        b = b.abs() % 5  # PyTorch rejects negative integer exponents in some paths
    return a, b


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, dtype):
    a, b = binary_inputs(name, dtype)
    loose = name in ("pow", "atan2", "hypot", "xlogy")
    rtol, atol = tol(dtype, (1e-5, 1e-5) if loose else (None, None))
    check(BINARY[name], a, b, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", ["add", "mul", "div", "div_floor", "remainder", "pow", "maximum",
                                  "atan2", "fmax"])
def test_binary_broadcast_and_mixed_dtypes(name):
    fn = BINARY[name]
    a, _ = binary_inputs(name, torch.float32, a_shape=(2, 1, 4))
    _, b = binary_inputs(name, torch.float32, b_shape=(3, 1))
    check(fn, a, b, rtol=1e-5, atol=1e-5)
    i = make((3, 4), torch.int32, seed=3)
    i = torch.where(i == 0, torch.ones_like(i), i)
    check(fn, a[0, :, :].expand(3, 4).contiguous(), i, rtol=1e-5, atol=1e-5)  # float x int
    check(fn, make((3, 4), torch.bfloat16), make((4,), torch.float16, seed=5), rtol=1e-5, atol=1e-5)
    check(fn, make((3, 4), torch.float16), torch.tensor(1.75), rtol=1e-5, atol=1e-5)  # 0-d


def test_int_division_semantics():
    a = torch.tensor([7, -7, 7, -7, 0, 5, -5, 1], dtype=torch.int64)
    b = torch.tensor([2, 2, -2, -2, 3, 5, 3, -7], dtype=torch.int64)
    for fn in (BINARY["div_trunc"], BINARY["div_floor"], torch.floor_divide, torch.remainder,
               torch.fmod, torch.div):
        check(fn, a, b)
        check(fn, a.int(), b.int())
    f = torch.tensor([7.5, -7.5, 7.5, -7.5, 0.3, 1.0, -0.0, 5.0, float("nan"), float("inf")])
    g = torch.tensor([2.0, 2.0, -2.0, -2.0, 0.1, 0.0, 3.0, -0.0, 1.0, 2.0])
    for fn in (BINARY["div_trunc"], BINARY["div_floor"], torch.floor_divide, torch.remainder,
               torch.fmod):
        check(fn, f, g)


def test_pow_semantics():
    check(torch.pow, torch.tensor([2, -1, 1, 3, 0, -2], dtype=torch.int64),
          torch.tensor([-1, -3, -2, 0, 0, 3], dtype=torch.int64))
    check(torch.pow, torch.tensor([0.0, 1.0, float("nan"), -8.0, 2.0, -2.0]),
          torch.tensor([0.0, float("nan"), 0.0, 1 / 3, -1.0, 3.0]))
    x = make((3, 4), torch.float32, specials=False, low=0.1, high=3)
    for e in (2, 3, 0.5, -1, -0.5, -2, 1.7, 0):
        check(torch.pow, x, e, rtol=1e-5, atol=1e-5)
    check(torch.pow, 2.0, x, rtol=1e-5, atol=1e-5)  # pow.Scalar
    check(torch.pow, 3, torch.tensor([0, 1, 5], dtype=torch.int32))
    check(torch.pow, make((3, 4), torch.int32), 3)
    check(torch.pow, make((3, 4), torch.int32), 0.5, rtol=1e-5, atol=1e-5)


def test_maximum_minimum_nan_and_bool():
    a = torch.tensor([float("nan"), 1.0, 2.0, -1.0, float("nan")])
    b = torch.tensor([3.0, float("nan"), -2.0, -3.0, float("nan")])
    for fn in (torch.maximum, torch.minimum, torch.fmax, torch.fmin):
        check(fn, a, b)
        check(fn, b, a)
    check(torch.maximum, make((5,), torch.bool), make((5,), torch.bool, seed=3))


# int32 and float16 share the int64 and bfloat16 paths; each case compiles a program.
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("scalar", [-3, 2.5, True], ids=repr)
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "remainder", "fmod", "div_floor",
                                  "floor_divide", "rsub", "add_alpha"])
def test_binary_python_scalar(name, scalar, dtype):
    x = make((3, 4), dtype)
    check(lambda t: BINARY[name](t, scalar), x, rtol=1e-5, atol=1e-5)


def test_scalar_tensor_overloads():
    x = make((3, 4), torch.float32, specials=False, low=0.5, high=3)
    i = make((3, 4), torch.int64)
    i = torch.where(i == 0, torch.ones_like(i), i)
    check(lambda t: torch.remainder(5, t), i)
    check(lambda t: torch.remainder(5.5, t), x)
    check(lambda t: 2 ** t, x, rtol=1e-5, atol=1e-5)
    check(lambda t: 1.5 - t, x)
    check(lambda t: 1.5 / t, x)
    check(lambda t: torch.xlogy(2.0, t), x, rtol=1e-5, atol=1e-5)
    check(lambda t: torch.xlogy(t, 3.0), x, rtol=1e-5, atol=1e-5)
    check(lambda t: torch.copysign(t, -1.0), x)


def test_lerp_addcmul_addcdiv():
    for dtype in FLOATS:
        a, b = make((3, 4), dtype, seed=1), make((3, 4), dtype, seed=2)
        w = make((4,), dtype, seed=3, specials=False, low=-1, high=2)
        check(torch.lerp, a, b, 0.3)
        check(torch.lerp, a, b, 0.7)
        check(torch.lerp, a, b, w)
        c = make((3, 1), dtype, seed=4, specials=False, low=0.5, high=2)
        check(lambda x, y, z: torch.addcmul(x, y, z, value=0.5), a, b, c)
        check(torch.addcmul, a, b, c)
        check(lambda x, y, z: torch.addcdiv(x, y, z, value=-2), a, b, c)
    i = make((3, 4), torch.int64)
    check(lambda x: torch.addcmul(x, x, x, value=3), i)


# ---------------------------------------------------------------- comparisons, logical, bitwise

COMPARE = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
           "ge": torch.ge}
LOGICAL = {"logical_and": torch.logical_and, "logical_or": torch.logical_or,
           "logical_xor": torch.logical_xor}
BITWISE = {"bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or,
           "bitwise_xor": torch.bitwise_xor}


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("name", sorted(COMPARE) + sorted(LOGICAL) + sorted(BITWISE))
def test_compare_logical_bitwise(name, dtype):
    fn = {**COMPARE, **LOGICAL, **BITWISE}[name]
    a = make((3, 4), dtype, seed=1)
    b = make((3, 4), dtype, seed=2)
    b.view(-1)[::3] = a.view(-1)[::3]  # some equal pairs
    check(fn, a, b)
    if dtype in (torch.float32, torch.int64):
        check(fn, a, b[0])  # broadcast


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_compare_scalars_and_mixed(name):
    fn = COMPARE[name]
    check(fn, make((3, 4), torch.float16), 0.5)
    check(lambda t: fn(t, 0.1), torch.full((3,), 0.1, dtype=torch.float16))
    check(fn, make((3, 4), torch.int32), 2.5)
    check(fn, make((3, 4), torch.int64), 2)
    check(fn, make((3, 4), torch.bool), True)
    check(fn, make((3, 4), torch.int32), make((3, 4), torch.float32, seed=3))
    check(fn, make((3, 4), torch.float32), torch.tensor(0.5))


def test_logical_mixed_dtypes():
    check(torch.logical_and, make((3, 4), torch.float32), make((3, 4), torch.int32, seed=3))
    check(torch.logical_xor, make((3, 4), torch.bool), make((4,), torch.float16, seed=3))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.int8], ids=str)
def test_shifts(dtype):
    a = make((3, 4), torch.int64, seed=1).to(dtype)
    s = (make((3, 4), torch.int64, seed=2).abs() % 7).to(dtype)
    check(torch.bitwise_left_shift, a, s)
    check(torch.bitwise_right_shift, a, s)
    check(lambda t: t << 2, a)
    check(lambda t: t >> 1, a)
    check(lambda t, u: t << u, a, s)
    check(lambda t, u: t >> u, a, s)
    check(lambda t: torch.bitwise_left_shift(3, t), s)


def test_shift_edge_amounts():
    a = torch.tensor([1, -8, 5, -1], dtype=torch.int32)
    s = torch.tensor([-1, 40, 31, 32], dtype=torch.int32)
    check(torch.bitwise_left_shift, a, s)
    check(torch.bitwise_right_shift, a, s)


def test_bitwise_scalars():
    i = make((3, 4), torch.int64)
    check(lambda t: torch.bitwise_and(t, 3), i)
    check(lambda t: t | 8, i)
    check(lambda t: t ^ -1, i)
    check(lambda t: torch.bitwise_xor(5, t), i)
    check(lambda t: t & True, make((3, 4), torch.bool))


# ---------------------------------------------------------------- where, masked_fill, clamp


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_where_masked_fill(dtype):
    cond = make((3, 4), torch.bool, seed=7)
    a, b = make((3, 4), dtype, seed=1), make((4,), dtype, seed=2)
    check(torch.where, cond, a, b)
    check(torch.where, cond[0], a, b)
    check(lambda c, x: torch.where(c, x, 0), cond, a)
    check(lambda m, x: x.masked_fill(m, 1), cond, a)
    check(lambda m, x, v: x.masked_fill(m, v), cond, a, torch.tensor(2, dtype=dtype))
    check(lambda m, x: x.masked_fill(m, True), cond[1], a)


def test_where_mixed_dtypes():
    cond = make((3, 4), torch.bool, seed=7)
    check(torch.where, cond, make((3, 4), torch.int32), make((3, 4), torch.float16))
    check(lambda c, x: torch.where(c, x, 2.5), cond, make((3, 4), torch.int64))
    check(lambda c: torch.where(c, 1.0, 0.0), cond)
    check(lambda m, x: x.masked_fill(m, 2.7), cond, make((3, 4), torch.int64))


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_clamp(dtype):
    x = make((3, 4), dtype)
    check(lambda t: torch.clamp(t, -1, 2), x)
    check(lambda t: torch.clamp(t, min=0.5), x)
    check(lambda t: torch.clamp(t, max=1), x)
    check(lambda t: torch.clamp(t, 2, -1), x)  # min > max gives max
    check(lambda t: torch.clamp_min(t, 1), x)
    check(lambda t: torch.clamp_max(t, 1), x)
    lo, hi = make((4,), dtype, seed=3), make((3, 1), dtype, seed=4)
    check(torch.clamp, x, lo, hi)
    check(lambda t, u: torch.clamp(t, min=u), x, lo)
    check(lambda t, u: torch.clamp(t, max=u), x, hi)
    check(torch.clamp_min, x, lo)
    check(torch.clamp_max, x, hi)


def test_clamp_nan_propagation():
    x = torch.tensor([float("nan"), 1.0, 3.0, -3.0])
    check(lambda t: torch.clamp(t, -1, 2), x)
    check(lambda t: torch.clamp(t, min=float("nan")), x)
    check(torch.clamp, x, torch.tensor([0.0, float("nan"), 0.0, 0.0]), torch.tensor(1.0))


# ---------------------------------------------------------------- activations

ACTIVATIONS = {
    "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "silu": F.silu, "softplus": F.softplus, "softplus_beta": lambda t: F.softplus(t, 2.0, 3.0),
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "hardtanh": F.hardtanh,
    "hardtanh_args": lambda t: F.hardtanh(t, -0.5, 2.0), "leaky_relu": F.leaky_relu,
    "leaky_relu_slope": lambda t: F.leaky_relu(t, 0.2), "elu": F.elu,
    "elu_alpha": lambda t: F.elu(t, alpha=0.5), "selu": F.selu, "celu": lambda t: F.celu(t, 0.7),
    "relu6": F.relu6, "mish": F.mish, "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish,
    "threshold": lambda t: F.threshold(t, 0.5, -2.0), "logsigmoid": F.logsigmoid,
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_forward(name, dtype):
    x = make((4, 5), dtype)  # holds NaN, +-inf and +-0 beside random values
    rtol, atol = tol(dtype, (1e-5, 1e-5))
    with native():
        actual = ACTIVATIONS[name](x.to(DEV))
    compare(actual, f64_oracle(ACTIVATIONS[name], x), rtol, atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_backward(name, dtype):
    x = make((4, 5), dtype, specials=False)
    x.view(-1)[3] = 0.5  # on the threshold of F.threshold / hardtanh edges
    g = make((4, 5), dtype, seed=9, specials=False)

    def grad(inp, gout):
        inp = inp.detach().clone().requires_grad_(True)
        ACTIVATIONS[name](inp).backward(gout)
        return inp.grad

    expected = grad(x, g)
    with native():
        actual = grad(x.to(DEV), g.to(DEV))
    rtol, atol = tol(dtype, (1e-5, 1e-5))
    compare(actual, expected, rtol, atol)


def test_activation_int_inputs():
    i = make((3, 4), torch.int64)
    check(F.relu, i)
    check(F.hardtanh, i.float())
    check(torch.sigmoid, i)
    check(torch.tanh, i)


# ---------------------------------------------------------------- in-place and out= variants


def test_inplace_variants():
    def run(fn, *args):
        cpu = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        dev = [to_dev(a) for a in args]
        fn(*cpu)
        with native():
            fn(*dev)
        compare(dev[0], cpu[0], 1e-5, 1e-5)

    x, y = make((3, 4), torch.float32, seed=1), make((4,), torch.float32, seed=2)
    run(lambda a, b: a.add_(b), x, y)
    run(lambda a, b: a.add_(b, alpha=0.5), x, y)
    run(lambda a: a.mul_(3), x)
    run(lambda a, b: a.div_(b, rounding_mode="floor"), x, y)
    run(lambda a: a.exp_(), x)
    run(lambda a: a.clamp_(-1, 1), x)
    run(lambda a: a.relu_(), x)
    run(lambda a: a.sigmoid_(), x)
    run(lambda a: F.gelu(a), x)
    run(lambda a, m: a.masked_fill_(m, -1.0), x, make((3, 4), torch.bool, seed=5))
    run(lambda a: a.pow_(2), x)
    run(lambda a, b: a.copysign_(b), x, y)
    run(lambda a, b: a.lerp_(b, 0.25), x, y)
    run(lambda a: a.nan_to_num_(), x)
    i, j = make((3, 4), torch.int32, seed=1), make((3, 4), torch.int32, seed=2)
    run(lambda a, b: a.bitwise_xor_(b), i, j)
    run(lambda a: a.__ilshift__(2), i)
    run(lambda a: a.abs_(), i)
    run(lambda a: a.floor_divide_(3), i)
    h = make((3, 4), torch.float16, seed=3)
    run(lambda a: a.add_(1.5), h)
    run(lambda a: a.mul_(torch.tensor(2.0)), h)  # CPU 0-d tensor joins as a runtime scalar
    run(lambda a: a.pow_(3), i)  # pow_.Scalar, whose functional twin is pow.Tensor_Scalar
    run(lambda a, b: a.pow_(b.abs() % 3), i, j)
    run(lambda a, b: a.floor_divide_(torch.where(b == 0, 1, b)), i, j)
    run(lambda a, b: a.__irshift__(b.abs() % 4), i, j)
    # In-place on a view writes through to the base.
    base = make((4, 4), torch.float32, seed=4)
    run(lambda a: a[1:3].mul_(2), base)
    run(lambda a: a.t().add_(1), base)


def test_out_variants():
    def run(fn, out_dtype, shape, *args):
        cpu_out = torch.empty(shape, dtype=out_dtype)
        dev_out = torch.empty(shape, dtype=out_dtype, device=DEV)
        fn(*args, out=cpu_out)
        with native():
            fn(*[to_dev(a) for a in args], out=dev_out)
        compare(dev_out, cpu_out, 1e-5, 1e-5)

    x, y = make((3, 4), torch.float32, seed=1), make((3, 4), torch.float32, seed=2)
    run(torch.add, torch.float32, (3, 4), x, y)
    run(torch.exp, torch.float32, (3, 4), x)
    run(torch.eq, torch.bool, (3, 4), x, y)
    run(torch.clamp, torch.float32, (3, 4), x, -1, 1)
    run(torch.where, torch.float32, (3, 4), x > 0, x, y)
    run(torch.sigmoid, torch.float32, (0,), x)  # out= is resized
    run(torch.atan2, torch.float32, (3, 4), x, y)
    run(torch.logical_not, torch.bool, (3, 4), x)
    run(torch.maximum, torch.float32, (3, 4), x, y)
    run(torch.mul, torch.float64, (3, 4), x, y)  # result cast into a wider out=


def test_operators_and_methods():
    x, y = make((3, 4), torch.float32, seed=1), make((3, 4), torch.float32, seed=2)
    i = make((3, 4), torch.int64)
    check(lambda a, b: (a + b) * 2 - b / 3, x, y)
    check(lambda a, b: -a ** 2 + abs(b), x, y, rtol=1e-5, atol=1e-5)
    check(lambda a, b: a // b, x, y)
    check(lambda a, b: a % b, x, y)
    check(lambda a: ~a, i)
    check(lambda a: ~(a > 0), i)
    check(lambda a: 1 - a, i)
    check(lambda a: a / 2, i)
    check(lambda a: a.square(), i)
    check(lambda a: a.sign(), i)
    check(lambda a: a.reciprocal(), i)
    check(lambda a: torch.true_divide(a, 3), i)


def test_scalar_values_do_not_recompile():
    # Python scalars are runtime arguments: a new value reuses the compiled program.
    x = make((3, 4), torch.float32).to(DEV)

    def run(v):
        for y in ((x + v), x.clamp(-v, v), F.leaky_relu(x, v), x.masked_fill(x > 0, v),
                  torch.where(x > 0, x, v), x.pow(v), x < v):
            y.cpu()

    run(0.75)
    before = torchtpu.metrics()["cache_misses"]
    with native():
        for v in (2.5, -3.0, 0.25):
            run(v)
    assert torchtpu.metrics()["cache_misses"] == before


@pytest.mark.parametrize("name", ["frac", "hypot"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_integral_frac_and_hypot_raise_at_the_call_like_cpu(name, dtype):
    # XLA refuses these modules only when it compiles them, which happens in the background; the
    # lowering refuses them first, so the CPU's own error comes from the call itself.
    fn = (lambda a: torch.frac(a)) if name == "frac" else (lambda a: torch.hypot(a, a))
    a = torch.arange(6, dtype=dtype)
    with pytest.raises(NotImplementedError) as cpu_error:
        fn(a)
    with pytest.raises(NotImplementedError) as tpu_error:
        fn(a.to("tpu"))
    assert str(tpu_error.value) == str(cpu_error.value)
    # The process stays usable, and the float forms run natively with the CPU's values.
    x = torch.tensor([1.5, -2.25, 3.0])
    torch.testing.assert_close(fn(x.to("tpu")).cpu(), fn(x))
