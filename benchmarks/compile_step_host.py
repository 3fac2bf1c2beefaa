"""Where a steady-state torchtpu.compile_step call's host time goes (tiny Llama train step from
benchmarks/compile_step.py, AdamW, one program per call): the whole call, the same call on a
trivial program with the same 108 state inputs (what guards, argument marshalling and the
execute call cost without the model's compute), a trivial program with 1 input, and the guard
that decides a call can reuse the previous call's input list against rebuilding that list.

One JSON object per line: {"what", "ms", "ratio_to_train_step"}; the whole train step call is
the baseline. Best of 7 repeats of 30 calls each, each call followed by a synchronize.
"""

import json
import os
import sys
import timeit

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from compile_step import build, train_step  # noqa: E402


def best_ms(fn, number=30, repeat=7):
    return min(timeit.repeat(lambda: (fn(), torch.tpu.synchronize()), number=number,
                             repeat=repeat)) / number * 1e3


def main():
    import torchtpu
    from torchtpu import _compile_step

    torch.set_num_threads(1)
    model, opt, ids = build("tpu")
    step = torchtpu.compile_step(lambda m, ids: train_step(m, opt, ids), model, opt)
    trivial = torchtpu.compile_step(lambda ids: ids.sum(), model, opt)
    one_input = torchtpu.compile_step(lambda ids: ids.sum())
    for _ in range(3):
        step(model, ids)
        trivial(ids)
        one_input(ids)
    guard = step._last
    figures = {
        "train_step_call": best_ms(lambda: step(model, ids)),
        "trivial_program_same_inputs_call": best_ms(lambda: trivial(ids)),
        "trivial_program_one_input_call": best_ms(lambda: one_input(ids)),
        "guard_check": best_ms(lambda: guard.holds(step.owners)),
        "input_list_rebuild": best_ms(lambda: _compile_step._Slots(step.owners)),
    }
    print(json.dumps({"host": {"cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0],
                               "state_inputs": len(guard.slots.tensors)}}), flush=True)
    base = figures["train_step_call"]
    for what, ms in figures.items():
        print(json.dumps({"what": what, "ms": round(ms, 4), "ratio_to_train_step":
                          round(ms / base, 4)}), flush=True)


if __name__ == "__main__":
    main()
