"""torchtpu.jax_op (also torch.tpu.pallas.jax_op): JAX functions, Pallas kernels included
(interpret mode on XLA:CPU), as tpu ops. Results and gradients are compared with the same math in
torch on the CPU. JAX is optional; scripts/setup_env.sh installs it, so CI runs these."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import torchtpu
import torchtpu._dynamo
from conftest import new_graphs

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def compiles():
    return torchtpu.metrics()["programs_compiled"]


def leaf(t):
    return t.detach().to("tpu").requires_grad_()


@torchtpu.jax_op
def sin_mul(x, y):
    return jnp.sin(x) * y


@torchtpu.jax_op
def sum_squares(x, axis):
    return jnp.sum(x * x, axis=axis)


@torch.tpu.pallas.jax_op
def matmul(a, b):
    return jnp.dot(a, b)


@torchtpu.jax_op
def sum_and_product(x, y):
    return x + y, x * y


def check_forward_and_grad(op, torch_fn, inputs, **static):
    cpu = [t.clone().requires_grad_() for t in inputs]
    tpu = [leaf(t) for t in inputs]
    out_cpu = torch_fn(*cpu)
    out_tpu = op(*tpu, **static)
    outs_cpu = out_cpu if isinstance(out_cpu, tuple) else (out_cpu,)
    outs_tpu = out_tpu if isinstance(out_tpu, tuple) else (out_tpu,)
    for o_tpu, o_cpu in zip(outs_tpu, outs_cpu):
        assert o_tpu.device.type == "tpu"
        assert_close(o_tpu.detach().cpu(), o_cpu.detach())
    weights = [torch.randn(o.shape) for o in outs_cpu]
    sum(((o * w).sum() for o, w in zip(outs_cpu, weights))).backward()
    sum(((o * w.to("tpu")).sum() for o, w in zip(outs_tpu, weights))).backward()
    for t_tpu, t_cpu in zip(tpu, cpu):
        assert_close(t_tpu.grad.cpu(), t_cpu.grad, rtol=1e-5, atol=1e-5)


def test_jax_elementwise_forward_and_gradient():
    check_forward_and_grad(sin_mul, lambda x, y: torch.sin(x) * y,
                           [torch.randn(3, 5), torch.randn(3, 5)])


def test_jax_reduction_with_a_static_keyword():
    x = torch.randn(4, 6)
    check_forward_and_grad(sum_squares, lambda t: (t * t).sum(dim=1), [x], axis=1)
    check_forward_and_grad(sum_squares, lambda t: (t * t).sum(dim=0), [x], axis=0)


def test_jax_matmul_forward_and_gradient():
    check_forward_and_grad(matmul, lambda a, b: a @ b, [torch.randn(5, 7), torch.randn(7, 3)])


def test_jax_multi_output_forward_and_gradient():
    check_forward_and_grad(sum_and_product, lambda x, y: (x + y, x * y),
                           [torch.randn(6), torch.randn(6)])


def test_jax_op_in_a_compiled_graph_does_not_recompile():
    a, b = torch.randn(8, 8), torch.randn(8, 8)

    def f(x, y):
        return torch.relu(matmul(x, y)) + sin_mul(x, y)

    compiled = torch.compile(f, backend="tpu", fullgraph=True)
    expect = torch.relu(a @ b) + torch.sin(a) * b
    graphs_before = set(torchtpu._dynamo.graph_metrics())
    assert_close(compiled(a.to("tpu"), b.to("tpu")).cpu(), expect)
    before = compiles()
    assert_close(compiled(a.to("tpu"), b.to("tpu")).cpu(), expect)
    assert compiles() == before
    # Only this test's graphs: earlier tests in the process may have graphs that run eagerly.
    graphs = new_graphs(graphs_before)
    assert graphs and not [g for g in graphs.values() if "eager_reason" in g], graphs


def test_jax_op_gradient_through_a_compiled_graph():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    x, y = leaf(a), leaf(b)
    ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
    compiled = torch.compile(lambda p, q: sin_mul(p, q).sum(), backend="tpu")
    compiled(x, y).backward()
    (torch.sin(ac) * bc).sum().backward()
    assert_close(x.grad.cpu(), ac.grad)
    assert_close(y.grad.cpu(), bc.grad)


def test_pallas_kernel_in_interpret_mode():
    from jax.experimental import pallas as pl

    def add_scaled_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + y_ref[...]

    @torch.tpu.pallas.jax_op
    def add_scaled(x, y):
        return pl.pallas_call(add_scaled_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              interpret=True)(x, y)

    a, b = torch.randn(16), torch.randn(16)
    assert_close(add_scaled(a.to("tpu"), b.to("tpu")).cpu(), a * 2 + b)


def test_jax_op_bad_input_raises_a_clear_error():
    with pytest.raises(ValueError, match=r"matmul: JAX cannot trace the function for inputs "
                                         r"\(float32\[5, 7\], float32\[6, 3\]\)"):
        matmul(torch.randn(5, 7, device="tpu"), torch.randn(6, 3, device="tpu"))
    with pytest.raises(ValueError, match="expects tpu tensors"):
        sin_mul(torch.randn(3), torch.randn(3))
    with pytest.raises(TypeError, match="pass non-tensor values as keywords"):
        sum_squares(torch.randn(3, device="tpu"), 0)
    x = torch.randn(3, device="tpu")
    assert_close(sin_mul(x, x).cpu(), torch.sin(x.cpu()) * x.cpu())


def test_jax_op_float64_keeps_its_dtype():
    a = torch.randn(5, dtype=torch.float64)
    out = sin_mul(a.to("tpu"), a.to("tpu"))
    assert out.dtype == torch.float64
    assert_close(out.cpu(), torch.sin(a) * a)
