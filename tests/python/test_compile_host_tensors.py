"""Compiled graphs with CPU tensors in them (Diffusers' QwenImage test_torch_compile_*): a model's
plain tensor attribute on the CPU that forward moves with `.to(x.device)`, factories with
device="cpu", arithmetic on CPU inputs. Values and output devices must be those of eager mode."""

import torch

import torchtpu  # noqa: F401


class _RopeLike(torch.nn.Module):
    """QwenEmbedRope's pattern: a complex table kept as a plain attribute (not a buffer), so
    `.to("tpu")` leaves it on the CPU and forward moves it."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.freqs = torch.polar(torch.ones(8, 4), torch.arange(32.0).reshape(8, 4) / 7)

    def forward(self, x):
        f = self.freqs.to(x.device)
        return self.lin(x) * f[: x.shape[0]].real + f[: x.shape[0]].imag


def test_cpu_attribute_moved_in_forward_matches_cpu():
    torch.manual_seed(0)
    m = _RopeLike()
    x = torch.randn(3, 4)
    ref = m(x)
    ref.sum().backward()
    ref_grad = m.lin.weight.grad.clone()
    m.lin.weight.grad = None
    m.to("tpu")
    assert m.freqs.device.type == "cpu"
    compiled = torch.compile(m, backend="tpu", fullgraph=True)
    for _ in range(2):  # the second call reuses the program
        out = compiled(x.to("tpu"))
        assert out.device.type == "tpu"
        torch.testing.assert_close(out.cpu(), ref.detach())
    out.sum().backward()
    torch.testing.assert_close(m.lin.weight.grad.cpu(), ref_grad)
    assert m.freqs.device.type == "cpu"


def test_cpu_attribute_default_compile_inference():
    m = _RopeLike().eval()
    x = torch.randn(5, 4)
    with torch.no_grad():
        ref = m(x)
        m.to("tpu")
        out = torch.compile(m, fullgraph=True)(x.to("tpu"))
    torch.testing.assert_close(out.cpu(), ref)


def test_cpu_outputs_stay_on_cpu():
    def f(x, c):
        return x + 1, torch.arange(3) * 2, c * 2, torch.ones((), dtype=torch.int64) + c.sum().long()

    x, c = torch.randn(3), torch.randn(5)
    ref = f(x, c)
    out = torch.compile(f, backend="tpu", fullgraph=True)(x.to("tpu"), c)
    assert [t.device.type for t in out] == ["tpu", "cpu", "cpu", "cpu"]
    for o, r in zip(out, ref):
        torch.testing.assert_close(o.cpu(), r)


def test_write_into_cpu_input_reaches_it():
    def f(x, c):
        c.add_(1)
        return x * 2

    x, c = torch.randn(3), torch.randn(4)
    c_ref = c + 1
    out = torch.compile(f, backend="tpu", fullgraph=True)(x.to("tpu"), c)
    torch.testing.assert_close(out.cpu(), x * 2)
    torch.testing.assert_close(c, c_ref)
