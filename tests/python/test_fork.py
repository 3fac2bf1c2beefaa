"""Fork safety. fork() copies the runtime's memory but not the PJRT plugin's threads, so a child
that used the parent's runtime would wait forever. A child forked after the parent initialized
tpu raises PyTorch's bad-fork error at its first use instead (as torch.cuda does), within
seconds, and torch.tpu._is_in_bad_fork() says so; children that never touch tpu (DataLoader
workers) work as before, and a child forked before any initialization may use tpu itself."""

import pytest

FORK_ERROR = "Cannot re-initialize tpu in forked subprocess"

_CHILD_USES_TPU = """
import multiprocessing as mp, torch, torchtpu

def child(q):
    try:
        q.put(("bad_fork", torch.tpu._is_in_bad_fork()))
        q.put(("available", torch.tpu.is_available(), torch.tpu.device_count()))
        torch.ones(2, device="tpu") + 1
        q.put(("no error",))
    except RuntimeError as e:
        q.put(("error", str(e)))

{parent_setup}
ctx = mp.get_context("fork")
q = ctx.Queue()
p = ctx.Process(target=child, args=(q,))
p.start()
p.join(60)
assert p.exitcode == 0, p.exitcode
results = [q.get(timeout=5) for _ in range(3)]
print("RESULTS", results)
# The parent is unaffected.
print("PARENT", (torch.ones(2, device="tpu") + 1).cpu().tolist(), torch.tpu._is_in_bad_fork())
"""


def test_child_of_an_initialized_parent_raises(run_python):
    r = run_python(
        _CHILD_USES_TPU.format(parent_setup="torch.tpu.init()"), timeout=120)
    results = r.stdout.split("RESULTS ")[1].splitlines()[0]
    assert "('bad_fork', True)" in results
    assert "('available', True, 4)" in results
    assert FORK_ERROR in results and "'spawn' start method" in results
    assert "PARENT [2.0, 2.0] False" in r.stdout


def test_child_after_real_work_raises_and_reading_a_parent_tensor_raises(run_python):
    r = run_python(
        """
        import os, sys, torch, torchtpu
        x = torch.arange(4.0, device="tpu") * 2
        x.cpu()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                x.cpu()
                code = 3
            except RuntimeError as e:
                code = 0 if "Cannot re-initialize tpu in forked subprocess" in str(e) else 4
            try:
                torch.tpu.synchronize()
                torch.zeros(1, device="tpu")
                code = 5
            except RuntimeError as e:
                code = code or (0 if "Cannot re-initialize tpu" in str(e) else 6)
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        print("CHILD", os.waitstatus_to_exitcode(status))
        print("PARENT", x.cpu().tolist())
        """,
        timeout=120,
    )
    assert "CHILD 0" in r.stdout, r.stdout + r.stderr
    assert "PARENT [0.0, 2.0, 4.0, 6.0]" in r.stdout


def test_child_of_an_uninitialized_parent_may_use_tpu(run_python):
    r = run_python(
        _CHILD_USES_TPU.format(parent_setup="assert not torch.tpu.is_initialized()"),
        timeout=120)
    results = r.stdout.split("RESULTS ")[1].splitlines()[0]
    assert "('bad_fork', False)" in results and "('no error',)" in results


def test_dataloader_fork_workers_keep_working(run_python):
    r = run_python(
        """
        import multiprocessing as mp, torch, torchtpu
        from torch.utils.data import DataLoader, TensorDataset
        model = torch.nn.Linear(3, 1).to("tpu")
        data = TensorDataset(torch.arange(24.0).view(8, 3), torch.arange(8.0))
        loader = DataLoader(data, batch_size=2, num_workers=2,
                            multiprocessing_context=mp.get_context("fork"))
        total = 0.0
        for x, y in loader:
            total += model(x.to("tpu")).sum().item() * 0 + y.sum().item()
        print("TOTAL", total)
        """,
        timeout=120,
    )
    assert "TOTAL 28.0" in r.stdout


def test_is_in_bad_fork_is_false_in_the_parent():
    import torch

    assert torch.tpu._is_in_bad_fork() is False
