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
