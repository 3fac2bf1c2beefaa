"""Custom kernels on tpu: a hand-written StableHLO module (torchtpu.stablehlo_op) and a JAX
function (torchtpu.jax_op, Pallas kernels included), each called like a torch op, differentiable
(jax_op), and inlined into a torch.compile(backend="tpu") graph without a graph break.

    python examples/custom_kernel.py

jax_op needs JAX (scripts/setup_env.sh installs it when it can); without it that part is skipped
with a message.
"""

import torch

import torchtpu

SCALED_ADD = """
func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %two = stablehlo.constant dense<2.0> : tensor<4xf32>
  %t = stablehlo.multiply %b, %two : tensor<4xf32>
  %r = stablehlo.add %a, %t : tensor<4xf32>
  return %r : tensor<4xf32>
}
"""


def main() -> None:
    a = torch.arange(4.0, device="tpu")
    b = torch.ones(4, device="tpu")
    out = torchtpu.stablehlo_op(SCALED_ADD, a, b)
    print("stablehlo_op:", out.cpu().tolist())
    assert out.cpu().tolist() == [2.0, 3.0, 4.0, 5.0]

    try:
        import jax
    except ImportError:
        print("jax_op: skipped (JAX is not installed: pip install jax)")
        return

    @torchtpu.jax_op
    def gelu_mul(x, w, approximate=True):
        return jax.nn.gelu(x, approximate=approximate) * w

    x = torch.randn(8, 16, requires_grad=True)
    w = torch.randn(8, 16)
    xt = x.detach().to("tpu").requires_grad_()
    y = gelu_mul(xt, w.to("tpu"))
    y.sum().backward()
    expected = torch.nn.functional.gelu(x, approximate="tanh") * w
    expected.sum().backward()
    torch.testing.assert_close(y.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    print("jax_op: forward and gradient match torch on the CPU")

    compiled = torch.compile(lambda x, w: gelu_mul(x, w) + 1, backend="tpu", fullgraph=True)
    torch.testing.assert_close(compiled(xt.detach(), w.to("tpu")).cpu(),
                               expected.detach() + 1, rtol=1e-5, atol=1e-5)
    print("jax_op inside torch.compile(backend='tpu', fullgraph=True): one program, same values")


if __name__ == "__main__":
    main()
