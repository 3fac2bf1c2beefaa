"""Compiles off the critical path (csrc/runtime/compile_pool.h, launch_queue.h).

An eager op that misses the program cache returns without waiting for its XLA compile: its
results are pending until the compile and the launch have run, and the host waits only where it
needs their values. These tests hold the compile pool (torchtpu._C._hold_compiles) so that results
are certainly still pending while the host goes on, and compare every value with CPU PyTorch.

Shapes are fresh for every run (`fresh`), so no disk cache entry from an earlier run turns a
compile into a synchronous load.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time

import pytest
import torch
import torchtpu
from torch.testing import assert_close

_C = torchtpu._C
pytestmark = pytest.mark.skipif(not _C._async_compile(), reason="needs TORCHTPU_ASYNC_COMPILE=1")

_rng = random.Random(time.time_ns())


def fresh(*dims: int) -> tuple[int, ...]:
    """A shape no earlier run compiled: `dims` with a random leading size."""
    return (_rng.randrange(1000, 100000),) + dims


@contextlib.contextmanager
def compiles_held():
    _C._hold_compiles(True)
    try:
        yield
    finally:
        _C._hold_compiles(False)


def release_later(seconds: float = 0.2) -> threading.Timer:
    """Releases held compiles from another thread while this one waits on a pending result."""
    t = threading.Timer(seconds, _C._hold_compiles, args=(False,))
    t.start()
    return t


def test_a_chain_over_new_signatures_returns_before_compiling():
    cpu = [torch.randn(fresh(k)) for k in (3, 5, 7)]
    before = torchtpu.metrics()["launches_queued"]
    with compiles_held():
        outs = []
        for x in cpu:
            t = x.to("tpu")
            y = (t * 2.5 + 1).sin()
            z = torch.nn.functional.softmax(y, dim=-1).sum(dim=0)
            assert _C._is_pending(z)
            outs.append(z)
    for x, z in zip(cpu, outs):
        assert_close(z.cpu(), torch.nn.functional.softmax((x * 2.5 + 1).sin(), dim=-1).sum(dim=0))
    assert torchtpu.metrics()["launches_queued"] - before >= 9


def test_in_place_on_a_tensor_whose_producer_is_compiling():
    x = torch.randn(fresh(4))
    with compiles_held():
        y = x.to("tpu").exp()
        y.mul_(3)
        y[1:5].add_(1)  # a view write: the storage's pending buffer is replaced
        y.clamp_(max=4.0)
        assert _C._is_pending(y)
    want = (x.exp() * 3).clone()
    want[1:5] += 1
    assert_close(y.cpu(), want.clamp(max=4.0))


@pytest.mark.parametrize("read", ["cpu", "item", "repr"])
def test_a_host_read_waits_for_a_pending_result(read):
    x = torch.randn(fresh(2))
    _C._hold_compiles(True)
    try:
        y = x.to("tpu").cos().sum()
        assert _C._is_pending(y)
        timer = release_later()
        if read == "cpu":
            got = y.cpu()
        elif read == "item":
            got = torch.tensor(y.item())
        else:
            text = repr(y)
            got = torch.tensor(float(text.split("(")[1].split(",")[0]))
        timer.join()
    finally:
        _C._hold_compiles(False)
    assert_close(got, x.cos().sum(), rtol=1e-4, atol=1e-3)


def test_write_after_read_keeps_program_order():
    x = torch.randn(fresh(3))
    a = x.to("tpu")
    with compiles_held():
        b = a * 2  # reads a; its program is still compiling
        a.add_(100)  # writes a afterwards
        c = a - 1  # reads the new a
    assert_close(b.cpu(), x * 2)
    assert_close(a.cpu(), x + 100)
    assert_close(c.cpu(), x + 99)


def test_a_donating_graph_waits_for_earlier_queued_readers():
    def step(p, g):
        p.mul_(0.5).add_(g)
        return p.sum()

    compiled = torch.compile(step, backend="tpu")
    shape = fresh(6)
    warm = torch.randn(shape).to("tpu")
    compiled(warm, torch.ones(shape, device="tpu"))  # compiles the graph outside the hold
    x, g = torch.randn(shape), torch.randn(shape)
    p, gt = x.to("tpu"), g.to("tpu")
    with compiles_held():
        read = (p + 0.25).tanh()  # a new eager signature: queued, reads p before the graph
        s = compiled(p, gt)  # donates p's buffer: must not run before `read`
    assert_close(read.cpu(), (x + 0.25).tanh())
    assert_close(p.cpu(), x * 0.5 + g)
    assert_close(s.cpu(), (x * 0.5 + g).sum(), rtol=1e-4, atol=1e-3)


def test_random_ops_draw_as_when_compiled():
    shape = fresh(5)
    torch.manual_seed(1234)
    with compiles_held():
        a = torch.rand(shape, device="tpu")
        b = torch.randn(shape, device="tpu")
        d = torch.nn.functional.dropout(torch.ones(shape, device="tpu"), p=0.3)
    # The same draws again, now with every program compiled: launched straight to PJRT.
    torch.manual_seed(1234)
    a2 = torch.rand(shape, device="tpu")
    b2 = torch.randn(shape, device="tpu")
    d2 = torch.nn.functional.dropout(torch.ones(shape, device="tpu"), p=0.3)
    assert torch.equal(a.cpu(), a2.cpu())
    assert torch.equal(b.cpu(), b2.cpu())
    assert torch.equal(d.cpu(), d2.cpu())
    assert not torch.equal(a.cpu(), torch.rand(shape, device="tpu").cpu())


def test_a_bad_index_of_a_pending_op_raises_at_the_read():
    n = fresh()[0]
    x = torch.randn(n, 2)
    with compiles_held():
        y = x.to("tpu")[torch.tensor([0, n + 3], device="tpu")]
        assert _C._is_pending(y)
    with pytest.raises(IndexError, match="out of bounds"):
        y.cpu()
    assert_close(x.to("tpu")[torch.tensor([1, 2], device="tpu")].cpu(), x[[1, 2]])


def test_a_failed_compile_raises_naming_the_op_and_the_process_goes_on():
    x = torch.randn(fresh(3))
    t = x.to("tpu")
    _C._fail_next_compiles(1)
    with compiles_held():
        y = t.atan()
        z = y * 2  # depends on the failed result
    with pytest.raises(RuntimeError, match=r"XLA failed to compile aten::atan\(self=Float\["):
        z.cpu()
    with pytest.raises(RuntimeError, match=r"aten::atan\(self=Float\["):
        y.cpu()
    # Only the reads of affected results raise it: a later synchronize does not report it again.
    torch.tpu.synchronize()
    assert_close(t.atan().cpu(), x.atan())  # compiles again
    assert_close((t.atan() * 2).cpu(), x.atan() * 2)


def test_threads_launching_one_new_signature_compile_it_once():
    shape = fresh(3)
    xs = [torch.randn(shape) for _ in range(4)]
    ts = [x.to("tpu") for x in xs]
    outs = [None] * len(ts)
    before = torchtpu.metrics()
    start = threading.Barrier(len(ts))

    def work(i):
        start.wait()
        outs[i] = torch.special.expm1(ts[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(ts))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for x, o in zip(xs, outs):
        assert_close(o.cpu(), torch.special.expm1(x))
    after = torchtpu.metrics()
    built = (after["programs_compiled"] - before["programs_compiled"]) + (
        after["disk_cache_hits"] - before["disk_cache_hits"]
    )
    assert built == 1


def test_identical_modules_of_two_signatures_compile_once_while_pending():
    # add and add_ on whole tensors lower to the same module (test_program_cache.py): queued
    # together, the second waits for the first's compile instead of compiling it again.
    shape = fresh(9)
    a, b = torch.randn(shape), torch.randn(shape)
    x, y = a.to("tpu"), b.to("tpu")
    z = x.clone()
    before = torchtpu.metrics()
    with compiles_held():
        out = x + y
        z.add_(y)
    assert_close(out.cpu(), a + b)
    assert_close(z.cpu(), a + b)
    after = torchtpu.metrics()
    compiled = after["programs_compiled"] - before["programs_compiled"]
    loaded = after["disk_cache_hits"] - before["disk_cache_hits"]
    assert compiled + loaded == 1
    assert after["programs_shared"] - before["programs_shared"] == 1


def test_copies_between_devices_wait_for_pending_results():
    x = torch.randn(fresh(4))
    _C._hold_compiles(True)
    try:
        y = x.to("tpu:0").sigmoid()
        assert _C._is_pending(y)
        timer = release_later()
        moved = y.to("tpu:1")  # waits for y, then copies
        timer.join()
    finally:
        _C._hold_compiles(False)
    assert moved.device == torch.device("tpu:1")
    with compiles_held():
        w = moved.sqrt() + y.to("tpu:1")  # pending on tpu:1
        assert _C._is_pending(w)
    assert_close(w.to("tpu:0").cpu(), x.sigmoid().sqrt() + x.sigmoid())


def test_events_and_synchronize_wait_for_queued_launches():
    x = torch.rand(fresh(2))
    t = x.to("tpu")
    _C._hold_compiles(True)
    try:
        y = t.log1p()
        event = torch.tpu.Event()
        event.record()
        assert not event.query()
        release_later()
        torch.tpu.synchronize()
        assert event.query()
        assert not _C._is_pending(y)
    finally:
        _C._hold_compiles(False)
    assert_close(y.cpu(), x.log1p())


SYNCHRONOUS = """
import torch, torchtpu
x = torch.randn(7, 31)
y = (x.to("tpu") * 3).erf()
print("ASYNC", torchtpu._C._async_compile())
print("PENDING", torchtpu._C._is_pending(y))
torch.testing.assert_close(y.cpu(), (x * 3).erf())
print("QUEUED", torchtpu.metrics()["launches_queued"])
"""


@pytest.mark.parametrize(
    "env", [{"TORCHTPU_ASYNC_COMPILE": "0"}, {"TPU_LAUNCH_BLOCKING": "1"}], ids=["off", "blocking"]
)
def test_the_switch_restores_synchronous_compiles(start_python, env):
    proc = start_python(SYNCHRONOUS, TORCHTPU_CACHE="0", **env).wait()
    out = dict(line.split() for line in proc.stdout.splitlines() if line.count(" ") == 1)
    assert out == {"ASYNC": "False", "PENDING": "False", "QUEUED": "0"}, proc.stdout
