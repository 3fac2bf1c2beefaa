"""First call vs steady state of a tiny Transformers LlamaForCausalLM (random weights, built from a
config): inference forward and the full train step (forward, backward, AdamW step), in:

  tpu-eager, tpu-compiled (cold cache), tpu-compiled-warm-cache (a fresh process reusing the disk
  cache), tpu-default-compile (torch.compile(fn) with no backend argument, which torchtpu routes
  to backend="tpu"; a fresh cache of its own), tpu-compile-step (torchtpu.compile_step: the whole
  step as one program; cold cache) and tpu-compile-step-warm-cache, cpu-eager, cpu-inductor, and
  torchax-jit (the same torch model through torchax + jax.jit on JAX's XLA:CPU, AdamW written
  out in torch ops; optional: reported as skipped when torchax/JAX are absent). For the train
  step also two variants of the plain torch.compile step, for their program counts:
  tpu-compiled-grads-none (zero_grad() with its default set_to_none=True, so autograd installs
  fresh gradients instead of accumulating into kept ones eagerly) and tpu-compiled-autograd
  (torch._dynamo.config.compiled_autograd=True: the backward, accumulation included, compiled).
  For the train step also the everyday script's form: torch.compile(model) with zero_grad,
  backward's seed and the AdamW step left eager, in strict eager (tpu-compiled-model) and in fused
  eager (tpu-compiled-model-fused, TORCH_TPU_DEFER_AND_FUSE=1: the eager parts between the
  compiled graphs run as fused programs; issue 27).

One JSON object per line: {"workload", "mode", "phase", "median_ms" | "ms", "cpu_median_ms",
"programs_compiled", "programs_per_step", "ratio_to_cpu_eager", "ratio_to_torchax_jit",
"ratio_to_cpu_inductor", "cpu_time_ratio_to_*"}, after a first line naming the host and its load (cpu_median_ms: the
process's CPU time per steady step, all threads). programs_per_step counts torchtpu program executions per steady-state step.
The cold and warm runs use a private cache folder (torchtpu's and PyTorch's), so the numbers do
not depend on earlier runs. --modes picks a subset (cpu-eager, the baseline of every ratio, always
runs). torchax installs beside torch 2.13 and the JAX of scripts/setup_env.sh without changing
either: `.venv/bin/pip install --no-deps torchax==0.0.13`.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch


def build(device):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                      max_position_embeddings=128)
    model = LlamaForCausalLM(cfg).to(device)
    lr = torch.tensor(1e-3, device=device) if device != "cpu" else 1e-3
    opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True,
                            capturable=device != "cpu")
    ids = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(1)).to(device)
    return model, opt, ids


def forward(model, ids):
    with torch.no_grad():
        return model(ids).logits


def train_step(model, opt, ids, set_to_none=False):
    opt.zero_grad(set_to_none=set_to_none)
    loss = model(ids, labels=ids).loss
    loss.backward()
    opt.step()
    return loss


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


# CPU time (all threads of the process) of every measured call, beside the wall time: on a shared
# host it is far less sensitive to other processes than wall time, and every contender here runs
# on the CPU.
CPU_TIMES: list = []


def measure(fn, device, steps):
    times = []
    for _ in range(steps):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        sync(device)
        times.append((time.perf_counter() - start) * 1e3)
        CPU_TIMES.append((time.process_time() - cpu) * 1e3)
    return times


def _steady_executions(fn, steps):
    import torchtpu

    before = torchtpu.metrics()["executions"]
    times = measure(fn, "tpu", steps)
    return times, (torchtpu.metrics()["executions"] - before) / steps


def run_mode(mode, workload, steps):
    if mode == "torchax-jit":
        return run_torchax(workload, steps)
    device = "cpu" if mode.startswith("cpu") else "tpu"
    if device == "tpu":
        import torchtpu

        torchtpu.reset_metrics()
    model, opt, ids = build(device)
    # ids is an argument, not a captured tensor: compile_step's programs take every tensor they
    # read as an input (a captured one is refused), and the other modes do not mind.
    if workload == "forward":
        fn = lambda m, ids: forward(m, ids)  # noqa: E731
    else:
        # zero_grad(set_to_none=False) keeps .grad tensors, so eager autograd accumulates into
        # them; the -grads-none mode uses zero_grad()'s default instead.
        none = mode == "tpu-compiled-grads-none"
        fn = lambda m, ids: train_step(m, opt, ids, none)  # noqa: E731
    target = model
    if mode == "tpu-compiled-autograd":
        torch._dynamo.config.compiled_autograd = True
    if mode.startswith("tpu-compiled-model"):
        # Only the model is compiled; the step around it stays eager (fused or strict).
        target = torch.compile(model, backend="tpu")
        target_fn = fn
    elif mode == "cpu-inductor":
        target_fn = torch.compile(fn, backend="inductor")
    elif mode.startswith("tpu-compiled"):
        target_fn = torch.compile(fn, backend="tpu")
    elif mode == "tpu-default-compile":
        target_fn = torch.compile(fn)
    elif mode.startswith("tpu-compile-step"):
        import torchtpu

        owners = (model,) if workload == "forward" else (model, opt)
        target_fn = torchtpu.compile_step(fn, *owners)
    else:
        target_fn = fn
    # Two warm-up calls: a train step's first call has no .grad and no optimizer state yet, so
    # its second call is a new signature too.
    times = measure(lambda: target_fn(target, ids), device, 2)
    per_step = compiled = None
    if device == "tpu":
        import torchtpu

        steady, per_step = _steady_executions(lambda: target_fn(target, ids), steps - 2)
        times += steady
        compiled = torchtpu.metrics()["programs_compiled"]
    else:
        times += measure(lambda: target_fn(target, ids), device, steps - 2)
    return times, compiled, per_step


@contextlib.contextmanager
def _tolerate_removed_overloads():
    """torchax 0.0.13 names ATen overloads that torch 2.13 removed (the named-tensor `Dimname`
    variants) in its AMP and lowering tables; a missing overload becomes an inert key instead of
    failing the import. Only in this benchmark's torchax child process."""
    cls = torch._ops.OpOverloadPacket
    orig = cls.__getattr__

    def getattr_(self, key):
        try:
            return orig(self, key)
        except AttributeError:
            if key.startswith("__"):
                raise
            return ("removed-overload", self._qualified_op_name, key)

    cls.__getattr__ = getattr_
    try:
        yield
    finally:
        cls.__getattr__ = orig


def torchax_train_fn(model):
    """The torchax train step: value_and_grad + AdamW written in torch ops (build()'s settings)."""
    import torchax.interop as interop

    def loss_fn(params, buffers, ids):
        return torch.func.functional_call(model, {**params, **buffers}, (ids,),
                                          {"labels": ids}).loss

    value_and_grad = interop.jax_value_and_grad(loss_fn)
    lr, b1, b2, eps, wd = 1e-3, 0.9, 0.999, 1e-8, 1e-2  # build()'s AdamW

    def train(params, m, v, step, buffers, ids):
        loss, grads = value_and_grad(params, buffers, ids)
        step = step + 1
        bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
        new_p, new_m, new_v = {}, {}, {}
        for k, p in params.items():
            g = grads[k]
            new_m[k] = m[k] * b1 + g * (1 - b1)
            new_v[k] = v[k] * b2 + g * g * (1 - b2)
            denom = (new_v[k] / bc2).sqrt() + eps
            new_p[k] = p * (1 - lr * wd) - lr * (new_m[k] / bc1) / denom
        return loss, new_p, new_m, new_v, step

    return train


def run_torchax(workload, steps):
    """The same model and step through torchax + jax.jit (one program per step by construction):
    the forward, or value_and_grad + AdamW (the update written in torch ops, state donated)."""
    with _tolerate_removed_overloads():
        import jax
        import torchax
        import torchax.interop as interop

        model, _, ids = build("cpu")
        with torchax.default_env():
            model.to("jax")
            ids = ids.to("jax")
            params = {k: v.detach() for k, v in model.named_parameters()}
            buffers = dict(model.named_buffers())

            def fwd(params, buffers, ids):
                return torch.func.functional_call(model, {**params, **buffers}, (ids,)).logits

            train = torchax_train_fn(model)

            if workload == "forward":
                jitted = interop.jax_jit(fwd)
                fn = lambda: jitted(params, buffers, ids)  # noqa: E731
            else:
                jitted = interop.jax_jit(train, kwargs_for_jax_jit={"donate_argnums": (0, 1, 2)})
                state = [params, {k: torch.zeros_like(p) for k, p in params.items()},
                         {k: torch.zeros_like(p) for k, p in params.items()},
                         torch.zeros((), device="jax")]

                def fn():
                    loss, *state[:] = jitted(*state, buffers, ids)
                    return loss

            times = []
            for _ in range(steps):
                start, cpu = time.perf_counter(), time.process_time()
                jax.block_until_ready(interop.jax_view(fn()))
                times.append((time.perf_counter() - start) * 1e3)
                CPU_TIMES.append((time.process_time() - cpu) * 1e3)
    return times, None, 1.0


def emit(workload, mode, times, cpu_times, compiled, per_step, baseline, jax_baseline,
         rnd=None, inductor_baseline=None):
    # first_two_ms: to the steady state (a compiled step used to compile again on call 2).
    first = {"workload": workload, "mode": mode, "phase": "first", "ms": round(times[0], 2),
             "first_two_ms": round(times[0] + times[1], 2)}
    median = statistics.median(times[2:])
    cpu = statistics.median(cpu_times[2:])
    steady = {"workload": workload, "mode": mode, "phase": "steady",
              "median_ms": round(median, 3), "cpu_median_ms": round(cpu, 3)}
    if compiled is not None:
        first["programs_compiled"] = compiled
    if per_step is not None:
        steady["programs_per_step"] = round(per_step, 2)
    if baseline is not None:
        first["ratio_to_cpu_eager"] = round(times[0] / baseline[0], 3)
        steady["ratio_to_cpu_eager"] = round(median / baseline[1], 3)
        steady["cpu_time_ratio_to_cpu_eager"] = round(cpu / baseline[2], 3)
    if jax_baseline is not None and mode != "torchax-jit":
        first["ratio_to_torchax_jit"] = round(times[0] / jax_baseline[0], 3)
        steady["ratio_to_torchax_jit"] = round(median / jax_baseline[1], 3)
        steady["cpu_time_ratio_to_torchax_jit"] = round(cpu / jax_baseline[2], 3)
    # Issue 9's target for the compiled train step is Inductor on the same CPU, same run.
    if inductor_baseline is not None and mode != "cpu-inductor":
        first["ratio_to_cpu_inductor"] = round(times[0] / inductor_baseline[0], 3)
        steady["ratio_to_cpu_inductor"] = round(median / inductor_baseline[1], 3)
        steady["cpu_time_ratio_to_cpu_inductor"] = round(cpu / inductor_baseline[2], 3)
    if rnd is not None:
        first["round"] = steady["round"] = rnd
    print(json.dumps(first), flush=True)
    print(json.dumps(steady), flush=True)
    return times[0], median, cpu


# The two baselines run first, so every later line carries its ratios to both.
ALL_MODES = ("cpu-eager", "torchax-jit", "cpu-inductor", "tpu-eager", "tpu-compiled",
             "tpu-compiled-warm-cache", "tpu-default-compile", "tpu-compile-step",
             "tpu-compile-step-warm-cache", "tpu-compiled-grads-none", "tpu-compiled-autograd",
             "tpu-compiled-model", "tpu-compiled-model-fused")
# Variants of the plain torch.compile train step, for its program count (train_step only).
TRAIN_ONLY = ("tpu-compiled-grads-none", "tpu-compiled-autograd", "tpu-compiled-model",
              "tpu-compiled-model-fused")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--workloads", default="forward,train_step")
    p.add_argument("--modes", default=",".join(ALL_MODES))
    p.add_argument("--child", nargs=2, metavar=("MODE", "WORKLOAD"))
    # Rounds repeat every mode (fresh caches each round); on a busy host compare the ratios
    # within a round, and their spread over rounds.
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args()
    if args.child:
        # One intra-op thread for PyTorch's CPU kernels in every mode (as in issue 17's table):
        # the XLA:CPU contenders then differ only in what runs around the same XLA kernels.
        torch.set_num_threads(1)
        times, compiled, per_step = run_mode(args.child[0], args.child[1], args.steps)
        print(json.dumps({"times": times, "compiled": compiled, "per_step": per_step,
                          "cpu_times": CPU_TIMES}))
        return
    modes = [m for m in ALL_MODES if m == "cpu-eager" or m in args.modes.split(",")]
    # The machine's state beside the figures: on a shared host the ratios within one run are what
    # compare, not the absolute times.
    # NPROC sizes the XLA:CPU thread pools of both torchtpu's plugin and jaxlib (every contender
    # inherits this environment); benchmarks/compile_step_programs.py says why it matters here.
    print(json.dumps({"host": {"cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0],
                               "torch": torch.__version__,
                               "env": {k: os.environ[k] for k in ("NPROC", "XLA_FLAGS")
                                       if k in os.environ}}}), flush=True)
    for rnd in range(args.rounds):
        cache = tempfile.mkdtemp(prefix="torchtpu-bench-cache-")
        step_cache = tempfile.mkdtemp(prefix="torchtpu-bench-step-cache-")
        for workload in args.workloads.split(","):
            baseline = jax_baseline = inductor_baseline = None
            # Every mode in its own process, so first calls are really first.
            for mode in modes:
                if workload != "train_step" and mode in TRAIN_ONLY:
                    continue
                # tpu-eager gets its own cache, so "tpu-compiled" is a genuinely cold process and
                # "tpu-compiled-warm-cache" is a restart that reuses what that process compiled
                # (tpu-compile-step and its warm restart share another folder).
                own_cache = mode in ("tpu-eager", "tpu-default-compile") + TRAIN_ONLY
                shared = step_cache if mode.startswith("tpu-compile-step") else cache
                env = dict(os.environ,
                           TORCHTPU_CACHE_DIR=tempfile.mkdtemp() if own_cache else shared)
                # PyTorch's own caches (AOTAutograd's, Inductor's) are private too: cold means cold.
                torch_cache = cache if mode in ("tpu-compiled", "tpu-compiled-warm-cache") else None
                env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(torch_cache or tempfile.mkdtemp(),
                                                              "torch")
                if mode == "tpu-compiled-model-fused":
                    env["TORCH_TPU_DEFER_AND_FUSE"] = "1"
                if mode == "torchax-jit":
                    # torchax claims the PrivateUse1 device for itself: torchtpu must not load.
                    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
                r = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--child",
                                    mode, workload], env=env, capture_output=True, text=True)
                if r.returncode != 0:
                    if mode == "torchax-jit" and "ModuleNotFoundError" in r.stderr:
                        skipped = "torchax or JAX is not installed (pip install --no-deps torchax)"
                        print(json.dumps({"workload": workload, "mode": mode, "skipped": skipped}),
                              flush=True)
                        continue
                    print(json.dumps({"workload": workload, "mode": mode,
                                      "error": r.stderr[-500:]}), flush=True)
                    continue
                data = json.loads(r.stdout.strip().splitlines()[-1])
                result = emit(workload, mode, data["times"], data["cpu_times"], data["compiled"],
                              data["per_step"], baseline, jax_baseline,
                              rnd if args.rounds > 1 else None, inductor_baseline)
                if mode == "cpu-eager":
                    baseline = result
                elif mode == "cpu-inductor":
                    inductor_baseline = result
                elif mode == "torchax-jit":
                    jax_baseline = result


if __name__ == "__main__":
    main()
