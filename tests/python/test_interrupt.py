"""Ctrl-C (SIGINT) during a blocking wait raises KeyboardInterrupt while queued work is still
running, as it does for CPU PyTorch code, instead of after everything queued has drained; the
process stays usable. Each case runs in its own interpreter, which the test interrupts."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

# Launches a chain of matmuls, each sized to take about two seconds here (from a timed small
# one), so the work takes `chain` times that; records an event after it, then blocks in WAIT.
# Big launches queue asynchronously (a chain of small dependent ones would block at launch).
# The event's query() afterwards tells whether the interrupt came while the work was still
# running. Then the same process computes again. x = a @ x keeps x's scale (a's entries have
# variance 1/n), so the values stay finite however long the chain.
CHILD = """
import signal, sys, time, torch, torchtpu
# Python's own Ctrl-C handler, as an interactive interpreter has it: a process started from a
# background job of a shell without job control (a CI runner's `cmd &`) inherits SIGINT ignored,
# and Python then leaves it ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)
m = torch.randn(1024, 1024, device="tpu")
(m @ m).cpu()  # compiled and warm
def timed():
    t0 = time.perf_counter()
    (m @ m).cpu()
    return time.perf_counter() - t0
# The fastest of several: a timing taken during a load spike sizes the work too small.
per_flop = min(timed() for _ in range(5)) / 1024**3
n = min(8192, int(({seconds} / per_flop) ** (1 / 3)))
a = torch.randn(n, n, device="tpu") / n**0.5
a.cpu()
x = a
for _ in range({chain}):
    x = a @ x
a = x
done = torch.tpu.Event()
done.record()
print("waiting", flush=True)
try:
    {wait}
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("interrupted, work finished:", done.query(), flush=True)
b = torch.arange(3.0, device="tpu") * 2
print("after:", b.cpu().tolist(), flush=True)
"""


def child_code(wait: str, chain: int = 4, seconds: float = 2.0) -> str:
    return textwrap.dedent(CHILD).format(wait=wait, chain=chain, seconds=seconds)


def run_interrupted(code: str) -> list[str]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.strip() == "waiting", first + proc.stderr.read()
        # Inside the wait by now (a signal before it would raise before it, which would prove
        # nothing); the work takes several times longer.
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out + err
    return out.splitlines()


def interrupt_child(wait: str) -> list[str]:
    lines = run_interrupted(child_code(wait))
    if lines and lines[0] in ("not interrupted", "interrupted, work finished: True"):
        # The work ended before the signal came, so this run showed nothing either way (its size
        # came from a timing, which a load spike can slow down). Again with four times the work.
        lines = run_interrupted(child_code(wait, chain=16))
    return lines


@pytest.mark.parametrize("wait", ["a.cpu()", "a.sum().item()", "torch.tpu.synchronize()",
                                  "done.synchronize()"])
def test_ctrl_c_interrupts_a_blocking_wait(wait):
    lines = interrupt_child(wait)
    assert lines[0] == "interrupted, work finished: False", lines
    assert lines[1] == "after: [0.0, 2.0, 4.0]", lines


def test_without_a_signal_the_wait_completes():
    code = child_code("a.cpu()", chain=1, seconds=0.01)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == ["not interrupted", "after: [0.0, 2.0, 4.0]"]


def test_a_signal_handler_that_does_not_raise_lets_the_wait_finish():
    # Python runs the handler during the wait (as it would between bytecodes) and goes on.
    code = child_code("v = a.cpu(); print('finite:', bool(v.isfinite().all()))")
    code = code.replace("signal.signal(signal.SIGINT, signal.default_int_handler)",
                        "hits = []\nsignal.signal(signal.SIGINT, lambda *a: hits.append(1))")
    code += "print('handled:', len(hits), flush=True)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "waiting"
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out.splitlines() == ["finite: True", "not interrupted", "after: [0.0, 2.0, 4.0]",
                                "handled: 1"], out
