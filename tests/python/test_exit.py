"""A process that ran a backward on tpu exits cleanly. PyTorch's autograd worker thread for the
device can drop the last graph task after the interpreter began finalizing, which used to abort
about one exit in seven ("terminate called without an active exception"); torchtpu lets the
workers finish at exit. The race is timing-dependent, so the test exits many processes."""

import subprocess
import sys

CHILD = """
import torch, torchtpu
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 1)).to("tpu")
model(torch.randn(4, 8, device="tpu")).sum().backward()
print(float(model[0].weight.grad.abs().sum()) > 0)
"""


def test_processes_that_ran_backward_exit_cleanly():
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        assert "terminate called" not in err
        assert out.strip().splitlines()[-1] == "True"


def test_a_process_without_backward_starts_no_autograd_workers():
    code = ("import torch, torchtpu\n"
            "x = (torch.ones(3, device='tpu') * 2).sum().item()\n"
            "print(x, torchtpu._C._other_threads_selected_a_device())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    assert out.strip().splitlines()[-1] == "6.0 False"


ERRORS_THEN_EXIT = """
import torch, torchtpu
import torch.nn.functional as F
x = torch.randn(8, 8, device="tpu")
for i in range(1, 5):
    # Error inputs, as a test file of them runs: an out-of-range gather (its device-side check
    # is read at the next sync), a bad multinomial, convolution errors.
    try:
        torch.gather(x, 1, torch.full((2, 2), 99, device="tpu")).cpu()
    except RuntimeError:
        pass
    try:
        torch.multinomial(torch.tensor([-1.0, 1.0], device="tpu"), 1)
    except RuntimeError:
        pass
    try:
        F.conv2d(torch.randn(1, 2, 4, 4, device="tpu"), torch.randn(3, 3, 2, 2, device="tpu"))
    except RuntimeError:
        pass
    # New programs whose compiles are still running when the process exits, and a failed check
    # never read.
    F.conv2d(torch.randn(1, 3, 8 + i, 8, device="tpu"), torch.randn(4, 3, 3, 3, device="tpu"))
    torch.gather(x, 1, torch.full((3, 3), 99, device="tpu"))
print("ok")
"""


def test_processes_exiting_with_compiles_in_flight_exit_cleanly():
    # Issue 32: such a process died at exit (SIGABRT "LLVM ERROR", or SIGSEGV) after it had
    # finished its work: exit() destroyed the PJRT plugin's static objects (LLVM's among them)
    # while compile-pool threads were still inside its compiler, because the drain registered
    # with std::atexit runs after the statics created since. torchtpu now drains compiles and
    # launches from its last Python atexit hook. Before the fix nearly every such process died.
    procs = [subprocess.Popen([sys.executable, "-c", ERRORS_THEN_EXIT], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(6)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, (proc.returncode, err[-2000:])
        assert "LLVM ERROR" not in err
        assert out.strip().splitlines()[-1] == "ok"
