"""Reads the per-step losses TorchTitan logged in a tpu run and a CPU/gloo run and checks them.

    python compare_titan_losses.py TPU_LOG CPU_LOG STEPS

Pass when both runs logged every step, the tpu losses fall (last < first), and each step's tpu
loss equals the CPU's within 1e-3 (both float32 from the same seed checkpoint and data; they
differ only by kernel rounding, XLA:CPU vs ATen, ~1e-6 relative per op, which AdamW carries
through a few steps; observed differences are below 1e-5, while a wrong gather or gradient
reduction moves the loss by 1e-2 or more).
"""

import re
import sys

STEP = re.compile(r"step:\s+(\d+)\s+loss:\s+([0-9.]+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TOLERANCE = 1e-3


def losses(path: str) -> dict[int, float]:
    found: dict[int, float] = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = STEP.search(ANSI.sub("", line))
            if m:  # each rank logs the same global loss; keep the first
                found.setdefault(int(m.group(1)), float(m.group(2)))
    return found


def main(tpu_log: str, cpu_log: str, steps: int) -> int:
    tpu, cpu = losses(tpu_log), losses(cpu_log)
    ok = True
    for step in range(1, steps + 1):
        t, c = tpu.get(step), cpu.get(step)
        if t is None or c is None:
            print(f"step {step}: missing (tpu {t}, cpu {c})")
            ok = False
            continue
        diff = abs(t - c)
        ok &= diff <= TOLERANCE
        print(f"step {step}: loss tpu (backend tpu) {t:.5f}  cpu (gloo) {c:.5f}  "
              f"diff {diff:.1e}")
    falls = len(tpu) == steps and tpu[steps] < tpu[1]
    if not falls:
        print("the tpu losses did not fall")
    ok &= falls
    print("torchtitan_demo: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
