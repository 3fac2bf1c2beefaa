"""Copies: cpu <-> tpu, tpu:0 <-> tpu:1, dtype conversions through .to() among the supported
dtypes (device-side and host-side), non-contiguous and broadcast sources, copy_ into every kind
of destination. Everything is compared with CPU PyTorch."""

import pytest
import torch
from torch.testing import assert_close

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool]

# Values every dtype can hold, plus fractions (float -> int truncates toward zero), negative
# values (-> uint8 wraps through int64, as PyTorch defines it) and zero (-> bool False).
VALUES = [-3.75, -1.5, -0.5, 0.0, 0.25, 1.0, 1.5, 2.75, 100.5, 127.0]


def sample(dtype):
    base = torch.tensor(VALUES, dtype=torch.float64)
    if dtype == torch.uint8:
        base = base.abs()
    return base.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip(dtype):
    c = sample(dtype)
    t = c.to("tpu")
    assert t.dtype == dtype and t.device == torch.device("tpu:0")
    back = t.cpu()
    assert back.device.type == "cpu" and back.dtype == dtype
    assert torch.equal(back, c)
    assert torch.equal(t.to("cpu"), c) and torch.equal(t.to(torch.device("cpu")), c)


@pytest.mark.parametrize("src", DTYPES, ids=str)
def test_device_dtype_conversions(src):
    """tpu -> tpu conversions run as programs: every target dtype matches CPU's conversion."""
    c = sample(src)
    t = c.to("tpu")
    for dst in DTYPES:
        got = t.to(dst)
        assert got.dtype == dst and got.is_tpu
        assert torch.equal(got.cpu(), c.to(dst)), (src, dst, got.cpu(), c.to(dst))


def test_negative_float_to_uint8_wraps_like_cpu():
    c = torch.tensor([-3.7, -1.0, -0.2, 3.9, 255.0])
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        assert torch.equal(c.to(dt).to("tpu").to(torch.uint8).cpu(), c.to(dt).to(torch.uint8))


@pytest.mark.parametrize("src,dst", [(torch.float32, torch.bfloat16), (torch.int64, torch.float16),
                                     (torch.bool, torch.float32), (torch.float64, torch.int32),
                                     (torch.uint8, torch.int8)], ids=str)
def test_conversion_while_moving(src, dst):
    c = sample(src)
    assert torch.equal(c.to("tpu", dst).cpu(), c.to(dst))  # host -> device with a conversion
    assert torch.equal(c.to("tpu").to("cpu", dst), c.to(dst))  # device -> host with a conversion
    assert torch.equal(c.to("tpu:0").to("tpu:1", dst).cpu(), c.to(dst))  # across devices


def test_float_conversion_precision_and_specials():
    c = torch.tensor([1.0 / 3, 1e-8, 65504.0, 1e5, float("inf"), -float("inf"), float("nan"), -0.0])
    t = c.to("tpu")
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        assert_close(t.to(dt).cpu(), c.to(dt), equal_nan=True, rtol=0, atol=0)
    assert torch.equal(t.to(torch.float16).to(torch.float32).cpu().signbit(), c.half().float().signbit())
    big = torch.tensor([2**40 + 1, -2**53 - 7, 2**62], dtype=torch.int64)
    assert torch.equal(big.to("tpu").cpu(), big)
    assert_close(big.to("tpu").to(torch.float64).cpu(), big.double(), rtol=0, atol=0)


def test_noncontiguous_sources_to_tpu():
    x = torch.randn(4, 5, 6)
    for v in [x.permute(2, 0, 1), x[:, ::2, 1:], x[1], x.transpose(0, 2)[1:3],
              x[:, 2:3].expand(4, 5, 6), x.as_strided((3, 3), (7, 2), 5), torch.randn(6, 4).t(),
              x[..., -1], x.unfold(2, 3, 2)]:
        t = v.to("tpu")
        assert t.shape == v.shape
        assert_close(t.cpu(), v)
        assert_close(v.to("tpu", torch.float16).cpu(), v.half())


def test_noncontiguous_tpu_sources_to_cpu():
    x = torch.randn(4, 5, 6)
    t = x.to("tpu")
    for f in [lambda z: z.permute(2, 0, 1), lambda z: z[:, ::2, 1:], lambda z: z.transpose(0, 2)[1:3],
              lambda z: z[1:3, 2:3].expand(2, 4, 6), lambda z: z.diagonal(0, 0, 1),
              lambda z: z.unfold(1, 2, 2), lambda z: z[2, 3, 4]]:
        assert_close(f(t).cpu(), f(x))
        assert_close(f(t).to(torch.float64).cpu(), f(x).double())


def test_copy_into_cpu_destinations():
    x = torch.randn(3, 4)
    t = x.to("tpu")
    c = torch.zeros(4, 3)
    c.copy_(t.t())
    assert_close(c, x.t())
    c2 = torch.zeros(4, 3, dtype=torch.float64).t()  # non-contiguous CPU destination
    c2.copy_(t)
    assert_close(c2, x.double())
    c3 = torch.zeros(3, 4)
    c3[:, 1:3].copy_(t[:, :2])
    ref = torch.zeros(3, 4)
    ref[:, 1:3] = x[:, :2]
    assert_close(c3, ref)
    c4 = torch.zeros(2, 3, 4)
    c4.copy_(t)  # broadcast
    assert_close(c4, x.expand(2, 3, 4))


def test_copy_into_tpu_destinations():
    x = torch.randn(6, 4)
    d = torch.zeros(4, 6, device="tpu")
    d.copy_(x.t())  # from a non-contiguous CPU tensor
    assert_close(d.cpu(), x.t())
    e = torch.zeros(6, 4, device="tpu")
    e.t().copy_(x.t().contiguous())  # into a non-contiguous tpu view
    assert_close(e.cpu(), x)
    f = torch.zeros(3, 4, device="tpu", dtype=torch.int32)
    f.copy_(torch.tensor([1.7, 2.2, -3.9, 4.0]))  # broadcast + float -> int
    assert torch.equal(f.cpu(), torch.tensor([[1, 2, -3, 4]] * 3, dtype=torch.int32))
    g = torch.empty(2, 2, device="tpu")  # never written before
    g.copy_(torch.tensor(5.0))
    assert_close(g.cpu(), torch.full((2, 2), 5.0))


def test_non_blocking_copies():
    x = torch.randn(64)
    t = x.to("tpu", non_blocking=True)
    y = (t * 2).to("cpu", non_blocking=True)
    torch.tpu.synchronize()
    assert_close(y, x * 2)


def test_cross_device():
    x = torch.randn(3, 4)
    a = x.to("tpu:0")
    b = a.to("tpu:1")
    assert b.device == torch.device("tpu:1") and a.device == torch.device("tpu:0")
    assert_close(b.cpu(), x)
    assert_close((b * 2).cpu(), x * 2)  # b is usable on tpu:1
    assert_close(a.t().to("tpu:1").cpu(), x.t())  # non-contiguous source
    assert_close(a[:, 1].to("tpu:2").cpu(), x[:, 1])
    assert_close(a.to("tpu:1", torch.float64).cpu(), x.double())
    assert_close(b.to("tpu:0").cpu(), x)
    # copy_ between devices, into a view and with a conversion.
    e = torch.empty(4, 3, device="tpu:1")
    e.copy_(a.t())
    assert_close(e.cpu(), x.t())
    f = torch.zeros(3, 4, device="tpu:1", dtype=torch.float16)
    f[:, :2].copy_(a[:, 2:])
    ref = torch.zeros(3, 4, dtype=torch.float16)
    ref[:, :2] = x[:, 2:]
    assert_close(f.cpu(), ref)
    # Never-written source: zeros arrive.
    z = torch.zeros(2, device="tpu:1")
    z.copy_(torch.empty(2, device="tpu:0").zero_())
    assert_close(z.cpu(), torch.zeros(2))


def test_tensor_to_variants():
    x = torch.arange(6.0).reshape(2, 3)
    t = x.to("tpu")
    assert t.to("tpu") is t  # no-op .to() returns self, as on CPU
    assert t.to(torch.float32) is t
    assert t.to("tpu", copy=True) is not t
    other = torch.zeros(1, dtype=torch.float64, device="tpu:1")
    u = x.to(other)  # device and dtype of another tensor
    assert u.device == other.device and u.dtype == torch.float64
    assert_close(u.cpu(), x.double())
    assert_close(t.double().cpu(), x.double())
    assert_close(t.half().cpu(), x.half())
    assert_close(t.bfloat16().cpu(), x.bfloat16())
    assert torch.equal(t.long().cpu(), x.long())
    assert torch.equal(t.bool().cpu(), x.bool())
    assert_close(t.type(torch.int32).cpu(), x.int())
    assert t.clone().is_tpu and t.new_tensor([1.0]).is_tpu


def test_empty_and_scalar_copies():
    z = torch.empty(0, 3)
    assert z.to("tpu").cpu().shape == (0, 3)
    assert torch.zeros(0, device="tpu").to(torch.int64).cpu().shape == (0,)
    s = torch.tensor(2.5).to("tpu")
    assert s.dim() == 0 and s.cpu().dim() == 0
    assert s.item() == 2.5 and s.to(torch.int32).item() == 2


def test_numpy_round_trip():
    import numpy as np

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = torch.from_numpy(a).to("tpu")
    assert np.array_equal(t.cpu().numpy(), a)
    with pytest.raises(TypeError):
        t.numpy()  # like CUDA: numpy() needs a CPU tensor


def test_save_load_and_deepcopy():
    import copy
    import io

    x = torch.arange(6.0).reshape(2, 3)
    t = x.to("tpu")
    buf = io.BytesIO()
    torch.save({"t": t, "row": t[1]}, buf)
    for loc, dev in ((None, "tpu:0"), ("cpu", "cpu"), ("tpu:1", "tpu:1")):
        buf.seek(0)
        d = torch.load(buf, map_location=loc)
        assert d["t"].device == torch.device(dev)
        assert_close(d["t"].cpu(), x)
        assert_close(d["row"].cpu(), x[1])
        # Views stay views of one storage, as they were saved.
        d["t"][1, 0] = 100.0
        assert d["row"][0].item() == 100.0
    c = copy.deepcopy(t)
    c.add_(1)
    assert c.is_tpu and c.device == t.device
    assert_close(t.cpu(), x)
    assert_close(c.cpu(), x + 1)
    m = copy.deepcopy(torch.nn.Linear(3, 2).to("tpu:1"))
    assert m.weight.device == torch.device("tpu:1")
