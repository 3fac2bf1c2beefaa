"""torch.tpu events and streams: an event captures the work launched on its device, query and
synchronize follow that work, elapsed_time measures its completion; streams are the device's one
ordered queue. Timings are never asserted: elapsed_time is checked for consistency only."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

N = 2048


@pytest.fixture(scope="module")
def heavy():
    """A workload of a few large matmuls that runs for well over 100 ms on the XLA CPU plugin
    while its launch takes milliseconds. Compiled once here, so later calls only launch."""
    x = torch.randn(N, N, device="tpu") / N**0.5

    def run(steps: int = 6) -> torch.Tensor:
        y = x
        for _ in range(steps):
            y = y @ x
        return y

    run(1)
    torch.tpu.synchronize()
    return run


def test_never_recorded_event_queries_true_and_synchronizes():
    e = torch.tpu.Event()
    assert e.query()
    e.synchronize()
    assert torch.tpu.Event(enable_timing=True).query()


def test_event_tracks_work_launched_before_it(heavy):
    y = heavy()
    e = torch.tpu.Event()
    e.record()
    assert not e.query(), "the matmul chain should still run right after record()"
    e.synchronize()
    assert e.query()
    assert torch.isfinite(y.cpu()).all()


def test_device_synchronize_completes_earlier_events(heavy):
    heavy()
    e = torch.tpu.Event()
    e.record()
    torch.tpu.synchronize()
    assert e.query()
    assert torch.tpu.current_stream().query()


def test_event_recorded_when_idle_is_done_at_once():
    torch.tpu.synchronize()
    e = torch.tpu.Event()
    e.record()
    assert e.query()


def test_event_ignores_other_devices_work(heavy):
    heavy()  # on tpu:0
    e = torch.tpu.Event()
    e.record(torch.tpu.current_stream(1))
    assert e.device == torch.device("tpu:1")
    assert e.query()
    torch.tpu.synchronize()


def test_rerecording_moves_the_event(heavy):
    e = torch.tpu.Event()
    e.record()
    assert e.query()
    heavy()
    e.record()
    assert not e.query()
    e.synchronize()
    assert e.query()


def test_elapsed_time_reads_one_clock(heavy):
    """elapsed_time is a difference of completion times on one clock: finite and non-negative
    forward, antisymmetric, and additive over an event recorded in between. How long the work
    takes is a benchmark's question, never a test's (a loaded machine reorders timings)."""
    a, b, c = (torch.tpu.Event(enable_timing=True) for _ in range(3))
    torch.tpu.synchronize()
    a.record()
    heavy()
    b.record()
    heavy()
    c.record()
    c.synchronize()
    ab, bc, ac = a.elapsed_time(b), b.elapsed_time(c), a.elapsed_time(c)
    assert all(math.isfinite(t) and t >= 0 for t in (ab, bc, ac)), (ab, bc, ac)
    assert c.elapsed_time(a) == pytest.approx(-ac)
    assert ab + bc == pytest.approx(ac, rel=1e-6, abs=1e-3)
    assert a.elapsed_time(a) == 0


def test_torch_event_and_tpu_event_are_one_type():
    a = torch.tpu.Event(enable_timing=True)
    b = torch.Event("tpu", enable_timing=True)
    assert isinstance(a, torch.Event)
    assert isinstance(a, torch.tpu.Event) and isinstance(b, torch.tpu.Event)
    assert not isinstance(torch.Event("cpu"), torch.tpu.Event)
    a.record()
    b.record()
    b.synchronize()
    assert a.elapsed_time(b) >= 0


def test_elapsed_time_needs_timing():
    a, b = torch.tpu.Event(), torch.tpu.Event()
    a.record()
    b.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        a.elapsed_time(b)
    c = torch.tpu.Event(enable_timing=True)
    c.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        c.elapsed_time(b)


def test_elapsed_time_needs_recorded_events():
    a, b = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    with pytest.raises(ValueError, match="recorded"):
        a.elapsed_time(b)
    a.record()
    with pytest.raises(ValueError, match="recorded"):
        a.elapsed_time(b)


def test_elapsed_time_needs_completed_events(heavy):
    a, b = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    a.record()
    heavy()
    b.record()
    with pytest.raises(RuntimeError, match="completed"):
        a.elapsed_time(b)
    b.synchronize()
    assert a.elapsed_time(b) > 0


def test_interprocess_event_is_refused():
    with pytest.raises(ValueError, match="interprocess"):
        torch.tpu.Event(interprocess=True)


def test_current_and_default_stream():
    s = torch.tpu.current_stream()
    assert isinstance(s, torch.tpu.Stream) and isinstance(s, torch.Stream)
    assert s == torch.tpu.default_stream() and s.stream_id == 0
    assert s.device == torch.device("tpu:0")
    assert torch.tpu.default_stream(1).device == torch.device("tpu:1")
    assert torch.tpu.current_stream("tpu:2").device == torch.device("tpu:2")


def test_streams_are_distinct_and_round_trip():
    a, b = torch.tpu.Stream(), torch.tpu.Stream(priority=-1)
    assert a != b and a != torch.tpu.default_stream()
    assert a.device == torch.device("tpu:0")
    with torch.tpu.stream(a):
        assert torch.tpu.current_stream() == a
        with torch.tpu.stream(b):
            assert torch.tpu.current_stream() == b
        assert torch.tpu.current_stream() == a
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
    with torch.tpu.stream(None):
        assert torch.tpu.current_stream() == torch.tpu.default_stream()
    torch.tpu.set_stream(a)
    try:
        assert torch.tpu.current_stream() == a
    finally:
        torch.tpu.set_stream(torch.tpu.default_stream())
    assert torch.tpu.current_stream() == torch.tpu.default_stream()


def test_stream_context_switches_device_and_restores_it():
    s = torch.tpu.Stream("tpu:1")
    assert s.device == torch.device("tpu:1")
    with torch.tpu.stream(s):
        assert torch.tpu.current_device() == 1
        assert torch.tpu.current_stream() == s
        x = torch.ones(4, device="tpu") * 2
    assert torch.tpu.current_device() == 0
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
    assert torch.tpu.current_stream(1) == torch.tpu.default_stream(1)
    assert x.device == torch.device("tpu:1")
    assert_close(x.cpu(), torch.full((4,), 2.0))


def test_stream_query_synchronize_and_events(heavy):
    s = torch.tpu.Stream()
    with torch.tpu.stream(s):
        y = heavy()
        e = s.record_event()
    assert isinstance(e, torch.tpu.Event)
    # Every stream of a device is its one queue: the default stream sees the same work.
    assert not torch.tpu.default_stream().query()
    assert not s.query()
    s.synchronize()
    assert s.query() and e.query() and torch.tpu.default_stream().query()
    assert torch.isfinite(y.cpu()).all()


def test_wait_event_and_wait_stream_order_work():
    s0, s1 = torch.tpu.Stream(), torch.tpu.Stream("tpu:1")
    with torch.tpu.stream(s0):
        x = torch.arange(6.0, device="tpu") * 2
        e = torch.tpu.Event()
        e.record()
    s1.wait_event(e)  # another device: the host waits for the event
    assert e.query()
    s0.wait_stream(s1)
    with torch.tpu.stream(s1):
        y = x.to("tpu:1") + 1
    s1.synchronize()
    assert s1.query()
    assert_close(y.cpu(), torch.arange(6.0) * 2 + 1)
    e2 = s0.record_event(torch.tpu.Event())
    e2.wait()
    e2.synchronize()
    assert e2.query()


def test_stream_api_rejects_other_devices():
    cpu_stream = torch.Stream("cpu")
    with pytest.raises(ValueError, match="tpu stream"):
        torch.tpu.set_stream(cpu_stream)
    with pytest.raises(ValueError, match="tpu stream"):
        torch.tpu.stream(cpu_stream)
    with pytest.raises(ValueError, match="expected a tpu device"):
        torch.tpu.Stream("cpu")
    with pytest.raises(RuntimeError, match="Invalid device index tpu:99"):
        torch.tpu.current_stream(99)
    with pytest.raises(RuntimeError, match="Invalid device index tpu:99"):
        torch.tpu.default_stream(99)
    with pytest.raises(RuntimeError, match="Invalid device index tpu:99"):
        torch.tpu.Stream("tpu:99")


def test_current_stream_is_per_thread():
    import threading

    s = torch.tpu.Stream()
    seen = []
    with torch.tpu.stream(s):
        t = threading.Thread(target=lambda: seen.append(torch.tpu.current_stream()))
        t.start()
        t.join()
        assert torch.tpu.current_stream() == s
    assert seen == [torch.tpu.default_stream()]


def test_events_under_launch_blocking(run_python):
    # Every op waits for its execution there, so an event recorded after work is done at once.
    out = run_python(
        """
        import torch, torchtpu
        x = torch.randn(1024, 1024, device="tpu")
        y = x @ x @ x
        e = torch.tpu.Event(enable_timing=True)
        e.record()
        print(e.query(), torch.tpu.current_stream().query())
        """,
        TPU_LAUNCH_BLOCKING="1",
    ).stdout
    assert out.split() == ["True", "True"]


def test_exit_with_work_in_flight_and_waiting_events(run_python):
    # Completion callbacks may run while the interpreter finalizes.
    out = run_python(
        """
        import torch, torchtpu
        x = torch.randn(2048, 2048, device="tpu")
        y = x @ x @ x @ x
        e = torch.tpu.Event()
        e.record()
        print(e.query())
        """
    )
    assert out.stdout.split() == ["False"]
    assert "terminate called" not in out.stderr
