"""The torch.tpu device module, the tensor/module conveniences PyTorch generates for a
PrivateUse1 backend, `.item()` and printing, and the factory functions (values compared with
CPU PyTorch, dtypes and devices as PyTorch defines them)."""

import gc

import pytest
import torch
from torch.testing import assert_close


@pytest.fixture(autouse=True)
def on_device_zero():
    """Each test starts on tpu:0 and leaves the current device as it found it."""
    prev = torch.tpu.current_device()
    torch.tpu.set_device(0)
    yield
    torch.tpu.set_device(prev)


# ------------------------------------------------------------------------------------------
# Device module


def test_is_available_and_count():
    assert torch.tpu.is_available()
    assert torch.tpu.is_initialized()
    assert torch.tpu.device_count() >= 2
    assert torch.tpu.device_count() == torch.accelerator.device_count()


def test_accelerator():
    acc = torch.accelerator.current_accelerator()
    assert acc is not None and acc.type == "tpu"
    assert torch.accelerator.is_available()


def test_device_name():
    assert isinstance(torch.tpu.get_device_name(), str) and torch.tpu.get_device_name()


def test_set_device_and_current_device():
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(1)
    assert torch.tpu.current_device() == 1
    x = torch.ones(2, device="tpu")
    assert x.device == torch.device("tpu", 1)
    assert torch.accelerator.current_device_index() == 1
    torch.tpu.set_device("tpu:0")
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(torch.device("tpu", 1))
    assert torch.tpu.current_device() == 1


def test_set_device_rejects_bad_index():
    with pytest.raises(RuntimeError, match="Invalid device index"):
        torch.tpu.set_device(torch.tpu.device_count())
    assert torch.tpu.current_device() == 0
    with pytest.raises(ValueError):
        torch.tpu.set_device("cpu")


def test_device_context_manager():
    assert torch.tpu.current_device() == 0
    with torch.tpu.device(1):
        assert torch.tpu.current_device() == 1
        a = torch.zeros(3, device="tpu")
        b = torch.randn(3, device="tpu")
        with torch.tpu.device("tpu:0"):
            assert torch.tpu.current_device() == 0
            assert torch.ones(1, device="tpu").device.index == 0
        assert torch.tpu.current_device() == 1
    assert torch.tpu.current_device() == 0
    assert a.device == torch.device("tpu:1") and b.device == torch.device("tpu:1")
    assert_close(a.cpu(), torch.zeros(3))
    # Restored even when the block raises.
    with pytest.raises(KeyError):
        with torch.tpu.device(1):
            raise KeyError
    assert torch.tpu.current_device() == 0
    with torch.tpu.device(None):
        assert torch.tpu.current_device() == 0


def test_device_of():
    x = torch.ones(2, device="tpu:1")
    with torch.tpu.device_of(x):
        assert torch.tpu.current_device() == 1
    assert torch.tpu.current_device() == 0


def test_explicit_index_beats_current_device():
    with torch.tpu.device(1):
        x = torch.ones(2, device="tpu:0")
        y = torch.ones(2).to("tpu:2")
    assert x.device.index == 0 and y.device.index == 2
    assert_close((x + x).cpu(), torch.full((2,), 2.0))


def test_synchronize():
    x = torch.randn(16, 16, device="tpu")
    y = (x @ x).relu()
    torch.tpu.synchronize()
    torch.tpu.synchronize(0)
    torch.tpu.synchronize("tpu:1")
    assert_close(y.cpu(), (x.cpu() @ x.cpu()).relu(), rtol=1e-4, atol=1e-4)


def test_manual_seed_reproduces():
    torch.tpu.manual_seed(1234)
    a = torch.rand(8, device="tpu").cpu()
    b = torch.randn(8, device="tpu").cpu()
    torch.tpu.manual_seed(1234)
    assert torch.equal(torch.rand(8, device="tpu").cpu(), a)
    assert torch.equal(torch.randn(8, device="tpu").cpu(), b)
    assert torch.tpu.initial_seed() == 1234
    # torch.manual_seed seeds every device of the backend too.
    torch.manual_seed(1234)
    assert torch.equal(torch.rand(8, device="tpu").cpu(), a)


def test_rng_state_round_trip():
    torch.tpu.manual_seed(7)
    torch.rand(5, device="tpu")
    state = torch.tpu.get_rng_state()
    assert state.device.type == "cpu" and state.dtype == torch.uint8
    first = torch.rand(5, device="tpu").cpu()
    second = torch.randn(3, device="tpu").cpu()
    assert not torch.equal(torch.rand(5, device="tpu").cpu(), first)
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.rand(5, device="tpu").cpu(), first)
    assert torch.equal(torch.randn(3, device="tpu").cpu(), second)
    # get/set_rng_state_all and per-device states.
    states = torch.tpu.get_rng_state_all()
    assert len(states) == torch.tpu.device_count()
    a1 = torch.rand(4, device="tpu:1").cpu()
    torch.tpu.set_rng_state_all(states)
    assert torch.equal(torch.rand(4, device="tpu:1").cpu(), a1)
    torch.tpu.set_rng_state(states[1], "tpu:1")
    assert torch.equal(torch.rand(4, device="tpu:1").cpu(), a1)


def test_generator_object():
    g = torch.Generator(device="tpu")
    assert g.device.type == "tpu"
    g.manual_seed(3)
    a = torch.rand(6, device="tpu", generator=g).cpu()
    g.manual_seed(3)
    assert torch.equal(torch.rand(6, device="tpu", generator=g).cpu(), a)


@pytest.fixture
def no_gc():
    """Exact memory accounting: no collection of unrelated garbage in the middle of a test."""
    torch.tpu.synchronize()
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def test_memory_allocated_grows_and_shrinks(no_gc):
    before = torch.tpu.memory_allocated()
    x = torch.ones(256, 16, device="tpu")  # 16 KiB
    x.sum().item()
    grown = torch.tpu.memory_allocated()
    assert grown >= before + 256 * 16 * 4
    assert torch.tpu.max_memory_allocated() >= grown
    assert torch.tpu.memory_stats()["allocated_bytes.all.current"] == grown
    del x
    assert torch.tpu.memory_allocated() <= grown - 256 * 16 * 4
    # Per device: an allocation on tpu:1 does not count on tpu:0.
    before0, before1 = torch.tpu.memory_allocated(0), torch.tpu.memory_allocated(1)
    y = torch.ones(1024, device="tpu:1")
    assert torch.tpu.memory_allocated(1) >= before1 + 4096
    assert torch.tpu.memory_allocated(0) == before0
    del y
    assert torch.tpu.memory_allocated(1) == before1


def test_accelerator_memory_api(no_gc):
    """torch.accelerator's device-generic memory API reads the same accounting."""
    before = torch.accelerator.memory_allocated(0)
    assert before == torch.tpu.memory_allocated(0)
    x = torch.ones(1024, device="tpu")
    assert torch.accelerator.memory_allocated(0) == before + 4096 == torch.tpu.memory_allocated(0)
    stats = torch.accelerator.memory_stats(0)
    assert stats["allocated_bytes.all.current"] == before + 4096
    assert torch.accelerator.max_memory_allocated(0) >= before + 4096
    del x
    torch.accelerator.reset_peak_memory_stats(0)
    assert torch.accelerator.max_memory_allocated(0) == torch.accelerator.memory_allocated(0) == before
    torch.accelerator.empty_cache()


def test_accelerator_sync_streams_events():
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(1)
    s = torch.accelerator.current_stream(1)
    assert s.device == torch.device("tpu:1")
    x = torch.ones(8, device="tpu:1") * 3
    s.synchronize()
    assert s.query()
    new = torch.Stream(device="tpu")
    assert new.device.type == "tpu"
    e = torch.Event(device="tpu")
    y = torch.arange(4.0, device="tpu") + 1
    e.record()
    e.wait()
    e.synchronize()
    assert e.query()
    assert_close(x.cpu(), torch.full((8,), 3.0))
    assert_close(y.cpu(), torch.arange(4.0) + 1)


# ------------------------------------------------------------------------------------------
# Tensor and module conveniences


def test_tensor_tpu_method_and_is_tpu():
    c = torch.arange(6.0).reshape(2, 3)
    t = c.tpu()
    assert t.is_tpu and not c.is_tpu
    assert t.device == torch.device("tpu:0")
    assert t.tpu() is t or t.tpu().device == t.device
    t1 = c.tpu(1)
    assert t1.device == torch.device("tpu:1")
    assert_close(t1.cpu(), c)
    assert torch.device("tpu").type == "tpu"


def test_module_tpu_method():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    ref = [p.detach().clone() for p in m.parameters()]
    m.tpu()
    for p, r in zip(m.parameters(), ref):
        assert p.is_tpu
        assert_close(p.detach().cpu(), r)
    m.to("tpu:1")
    assert all(p.device == torch.device("tpu:1") for p in m.parameters())


def test_print_tensor():
    c = torch.tensor([[1.5, -2.0, 3.25], [0.0, 4.0, -5.5]])
    t = c.to("tpu")
    s = str(t)
    assert "device='tpu:0'" in s
    assert s == str(c)[:-1] + ", device='tpu:0')"
    assert repr(torch.tensor([1, 2, 3], device="tpu:1")) == "tensor([1, 2, 3], device='tpu:1')"
    assert repr(torch.tensor(2.5, device="tpu")) == "tensor(2.5000, device='tpu:0')"
    b = repr(torch.zeros(2, dtype=torch.bfloat16, device="tpu"))
    assert b == "tensor([0., 0.], device='tpu:0', dtype=torch.bfloat16)"
    assert "True" in str(torch.tensor([True, False], device="tpu"))


@pytest.mark.parametrize(
    "value,dtype",
    [(3.5, torch.float32), (-2.0, torch.float64), (1.5, torch.bfloat16), (0.25, torch.float16),
     (7, torch.int64), (-3, torch.int8), (200, torch.uint8), (True, torch.bool)],
)
def test_item(value, dtype):
    c = torch.tensor(value, dtype=dtype)
    t = c.to("tpu")
    assert t.item() == c.item()
    assert type(t.item()) is type(c.item())
    # A one-element non-0-d tensor and an element of a bigger one.
    assert torch.tensor([value], dtype=dtype, device="tpu").item() == c.item()


def test_item_of_view_and_computed():
    x = torch.arange(12.0).reshape(3, 4)
    t = x.to("tpu")
    assert t[2, 1].item() == 9.0
    assert t.t()[3, 2].item() == x.t()[3, 2].item()
    assert (t * 2).sum().item() == (x * 2).sum().item()
    assert float(t[1, 1]) == 5.0 and int(t[1, 2]) == 6 and bool(t[0, 0]) is False


# ------------------------------------------------------------------------------------------
# Factories


def test_empty_and_empty_strided():
    e = torch.empty(2, 3, device="tpu")
    assert e.shape == (2, 3) and e.dtype == torch.float32 and e.is_tpu and e.is_contiguous()
    e = torch.empty((4,), dtype=torch.int16, device="tpu:1")
    assert e.dtype == torch.int16 and e.device == torch.device("tpu:1")
    s = torch.empty_strided((2, 3), (1, 2), device="tpu")
    assert s.stride() == (1, 2) and s.shape == (2, 3)
    # Writing it and reading it back works like a CPU tensor with those strides.
    s.copy_(torch.arange(6.0).reshape(2, 3))
    assert_close(s.cpu(), torch.arange(6.0).reshape(2, 3))
    cl = torch.empty(2, 3, 4, 5, device="tpu", memory_format=torch.channels_last)
    assert cl.stride() == torch.empty(2, 3, 4, 5, memory_format=torch.channels_last).stride()
    z = torch.empty(0, 3, device="tpu")
    assert z.shape == (0, 3) and z.cpu().shape == (0, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64,
                                   torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool])
def test_zeros_ones_full(dtype):
    assert_close(torch.zeros(2, 3, dtype=dtype, device="tpu").cpu(), torch.zeros(2, 3, dtype=dtype))
    assert_close(torch.ones(3, dtype=dtype, device="tpu").cpu(), torch.ones(3, dtype=dtype))
    fill = True if dtype == torch.bool else 5
    assert_close(torch.full((2, 2), fill, dtype=dtype, device="tpu").cpu(),
                 torch.full((2, 2), fill, dtype=dtype))


def test_full_infers_dtype_and_device_index():
    for fill in (2, 2.5, True):
        t = torch.full((3,), fill, device="tpu:1")
        c = torch.full((3,), fill)
        assert t.dtype == c.dtype and t.device == torch.device("tpu:1")
        assert_close(t.cpu(), c)
    assert_close(torch.full((2,), -1.5, dtype=torch.float16, device="tpu").cpu(),
                 torch.full((2,), -1.5, dtype=torch.float16))
    z = torch.zeros(2, 2, device="tpu", requires_grad=True)
    assert z.requires_grad and z.is_leaf


@pytest.mark.parametrize(
    "args,kwargs",
    [((10,), {}), ((2, 11, 3), {}), ((-3.0, 2.0, 0.5), {}), ((0, 1, 0.1), {}),
     ((5,), {"dtype": torch.float32}), ((1, 10, 2), {"dtype": torch.int32}),
     ((0, 1, 0.125), {"dtype": torch.float64}), ((10, 0, -3), {})],
)
def test_arange(args, kwargs):
    c = torch.arange(*args, **kwargs)
    t = torch.arange(*args, device="tpu", **kwargs)
    assert t.dtype == c.dtype and t.shape == c.shape
    assert_close(t.cpu(), c)


@pytest.mark.parametrize(
    "args,dtype",
    [((0.0, 1.0, 7), None), ((-2.0, 3.0, 11), torch.float64), ((0, 10, 7), torch.int64),
     ((5.0, -5.0, 4), None), ((1.0, 1.0, 1), None), ((0.0, 1.0, 0), None)],
)
def test_linspace(args, dtype):
    c = torch.linspace(*args, dtype=dtype)
    t = torch.linspace(*args, dtype=dtype, device="tpu")
    assert t.dtype == c.dtype and t.shape == c.shape
    assert_close(t.cpu(), c)


@pytest.mark.parametrize("args", [(3,), (2, 4), (4, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
def test_eye(args, dtype):
    assert_close(torch.eye(*args, dtype=dtype, device="tpu").cpu(), torch.eye(*args, dtype=dtype))


def test_like_factories():
    base = torch.randn(2, 3).to("tpu:1")
    for fn, kwargs in [(torch.zeros_like, {}), (torch.ones_like, {}),
                       (torch.ones_like, {"dtype": torch.int64}), (torch.empty_like, {}),
                       (torch.rand_like, {}), (torch.randn_like, {})]:
        t = fn(base, **kwargs)
        assert t.device == base.device and t.shape == base.shape
        assert t.dtype == kwargs.get("dtype", base.dtype)
    assert_close(torch.zeros_like(base).cpu(), torch.zeros(2, 3))
    assert_close(torch.ones_like(base, dtype=torch.int64).cpu(), torch.ones(2, 3, dtype=torch.int64))
    assert_close(torch.full_like(base, 2.5).cpu(), torch.full((2, 3), 2.5))
    r = torch.randint_like(base, 3, 9)
    assert r.dtype == base.dtype and r.device == base.device
    assert ((r.cpu() >= 3) & (r.cpu() < 9)).all() and (r.cpu() == r.cpu().round()).all()
    # *_like of a non-contiguous tensor keeps its layout like CPU does.
    nc = torch.randn(3, 4).t()
    assert torch.empty_like(nc.to("tpu")).stride() == torch.empty_like(nc).stride()
    assert torch.zeros_like(torch.ones(2, device="tpu"), device="cpu").device.type == "cpu"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_rand_randn(dtype):
    r = torch.rand(64, 3, dtype=dtype, device="tpu")
    n = torch.randn(2, 5, 4, dtype=dtype, device="tpu")
    assert r.shape == (64, 3) and r.dtype == dtype and r.is_tpu
    assert n.shape == (2, 5, 4) and n.dtype == dtype and n.is_tpu
    rc = r.cpu()
    assert ((rc >= 0) & (rc < 1)).all()
    assert rc.float().std() > 0.1  # not constant
    assert torch.isfinite(n.cpu()).all() and n.cpu().float().std() > 0.1


@pytest.mark.parametrize(
    "low,high,dtype",
    [(0, 10, torch.int64), (-5, 5, torch.int32), (-128, 128, torch.int8), (0, 256, torch.uint8),
     (3, 7, torch.float32), (0, 2, torch.bool)],
)
def test_randint(low, high, dtype):
    r = torch.randint(low, high, (200,), dtype=dtype, device="tpu")
    assert r.shape == (200,) and r.dtype == dtype and r.is_tpu
    v = r.cpu().to(torch.int64)
    assert v.min() >= low and v.max() < high
    assert len(v.unique()) > 1
    d = torch.randint(5, (2, 3), device="tpu")
    assert d.dtype == torch.int64 and d.shape == (2, 3) and (d.cpu() < 5).all()


def test_factories_on_other_device():
    for t in [torch.zeros(2, device="tpu:2"), torch.arange(3, device="tpu:2"),
              torch.eye(2, device="tpu:2"), torch.rand(2, device="tpu:2"),
              torch.linspace(0, 1, 3, device="tpu:2"), torch.full((2,), 3.0, device="tpu:2")]:
        assert t.device == torch.device("tpu:2")
    assert_close(torch.arange(3, device="tpu:2").cpu(), torch.arange(3))


def test_tensor_constructors():
    assert_close(torch.tensor([[1, 2], [3, 4]], device="tpu").cpu(), torch.tensor([[1, 2], [3, 4]]))
    assert_close(torch.as_tensor([1.0, 2.0], device="tpu").cpu(), torch.tensor([1.0, 2.0]))
    t = torch.tensor([1.0, 2.0], dtype=torch.float16, device="tpu:1")
    assert t.dtype == torch.float16 and t.device.index == 1
