"""vLLM with tensor_parallel_size=2 on two tpu devices: vLLM's multiprocess executor starts one
worker per device (tpu:0, tpu:1), the workers' process groups run on torchtpu's c10d backend
("tpu", the platform's dist_backend), and the sharded model's greedy tokens must be the CPU
model's argmax given the same prefix (teacher forcing), as for one device. Only the workers may
open the device: the front-end and EngineCore processes that merely ask about it must not (on a
TPU host the first process to open the chips holds them).

The engine runs in a child process: the two XLA:CPU devices (TORCHTPU_CPU_DEVICE_COUNT=2) must
be chosen before the runtime starts, and this session's other tests hold a one-device engine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

from vllm_checks import check_teacher_forced, prompts_of

CHILD = textwrap.dedent(
    """
    import json, sys
    from vllm import LLM
    from vllm_checks import generate

    def main():
        model_dir, prompts = sys.argv[1], json.loads(sys.argv[2])
        llm = LLM(model=model_dir, dtype="float32", tensor_parallel_size=2, max_model_len=128,
                  max_num_seqs=4, enforce_eager=True, seed=0)
        outs = generate(llm, prompts, max_tokens=12)
        print("TOKENS " + json.dumps([list(o.outputs[0].token_ids) for o in outs]), flush=True)

    if __name__ == "__main__":  # vLLM's workers are spawned: they re-import this module
        main()
    """
)

# Loaded by every Python process of the run (PYTHONPATH): says when the process opens tpu (a
# watcher thread, since vLLM may kill its EngineCore at shutdown before atexit handlers run), and
# at exit whether it had.
EXIT_REPORT = textwrap.dedent(
    """
    import atexit, multiprocessing, sys, threading, time

    def _opened():
        torch = sys.modules.get("torch")
        return torch is not None and hasattr(torch, "tpu") and torch.tpu.is_initialized()

    def _say(state):
        print(f"OPENED {multiprocessing.current_process().name} {state}", flush=True)

    def _watch():
        while not _opened():
            time.sleep(0.1)
        _say(True)

    threading.Thread(target=_watch, daemon=True).start()
    atexit.register(lambda: _say(_opened()))
    """
)


def test_two_device_tensor_parallel_matches_cpu_teacher_forced(model_dir, cpu_model, tmp_path):
    prompts = prompts_of([4, 11, 23], seed=5)
    script = tmp_path / "tp2.py"
    script.write_text(CHILD)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(EXIT_REPORT)
    here = os.path.dirname(os.path.abspath(__file__))
    path = [str(site), here, os.environ.get("PYTHONPATH")]
    env = dict(os.environ, TORCHTPU_CPU_DEVICE_COUNT="2",
               PYTHONPATH=os.pathsep.join(filter(None, path)))
    proc = subprocess.run([sys.executable, str(script), model_dir, json.dumps(prompts)], env=env,
                          capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "world_size=2 rank=1 local_rank=1" in log and "backend=tpu" in log, log[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("TOKENS "))
    outs = json.loads(line[len("TOKENS "):])
    exact = total = 0
    for prompt, generated in zip(prompts, outs):
        assert len(generated) == 12
        exact += check_teacher_forced(cpu_model, prompt, generated)
        total += len(generated)
    assert exact >= total - 1, f"only {exact}/{total} tokens were the exact CPU argmax"
    # A report may share its line with another process's output.
    reports = re.findall(r"OPENED (\S+) (True|False)", log)
    opened = {name for name, state in reports if state == "True"}
    assert {"VllmWorker-0", "VllmWorker-1"} <= opened, reports
    assert ("MainProcess", "False") in reports, reports
    assert not opened & {"MainProcess", "EngineCore"}, reports
