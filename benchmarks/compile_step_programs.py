"""Is the compiled tiny-Llama step slower than torchax + jax.jit because of our program, or because
of what runs it? Compares the two PROGRAMS apart from both front ends: the StableHLO module
torchtpu.compile_step builds (forward, and the AdamW train step with its donated state) and the
module jax.jit lowers for the same model through torchax (benchmarks/compile_step.py's contender),
each compiled and executed, interleaved in one process, by two XLA:CPU builds through the same
jaxlib client API:

  jaxlib:  the XLA inside the installed jaxlib (what torchax + jax.jit runs on)
  plugin:  the xla-cpu-pjrt plugin torchtpu runs on (loaded as a PJRT C API plugin)

Inputs are random tensors of the modules' argument types; donated arguments (tf.aliasing_output)
take the aliased output of the previous call, as a training loop does. One JSON line per
(workload, module, xla): median_ms and the ratio to jax's module on the same XLA build
(program_ratio: how our program compares) and to the same module on jaxlib (xla_ratio: what the
XLA build costs). Needs JAX and torchax (`pip install --no-deps torchax==0.0.13`); skipped with a
message otherwise.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def ours_module(workload: str, out: str) -> None:
    """Runs compile_step under TORCHTPU_DUMP_MLIR=1 in a child process and keeps the step's module
    (for the train step: the steady signature, the one that donates its state)."""
    code = f"""
import sys, torch
sys.path.insert(0, {HERE!r})
import compile_step as cs
import torchtpu
model, opt, ids = cs.build("tpu")
if {workload!r} == "forward":
    step = torchtpu.compile_step(lambda m, ids: cs.forward(m, ids), model)
else:
    step = torchtpu.compile_step(lambda m, ids: cs.train_step(m, opt, ids, False), model, opt)
for _ in range(3):
    step(model, ids)
torch.tpu.synchronize()
"""
    env = dict(os.environ, TORCHTPU_DUMP_MLIR="1", TORCHTPU_CACHE="0",
               TORCHINDUCTOR_CACHE_DIR=os.path.join(tempfile.mkdtemp(), "torch"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    modules = re.findall(r"^module @torchtpu \{\n.*?^\}\n", r.stderr, re.M | re.S)
    if workload == "train_step":
        modules = [m for m in modules if "tf.aliasing_output" in m]
    with open(out, "w") as f:
        f.write(max(modules, key=len))


def jax_module(workload: str, out: str) -> None:
    code = f"""
import sys, torch
sys.path.insert(0, {HERE!r})
import compile_step as cs
with cs._tolerate_removed_overloads():
    import jax, torchax, torchax.interop as interop
    model, _, ids = cs.build("cpu")
    with torchax.default_env():
        model.to("jax"); ids = ids.to("jax")
        params = {{k: v.detach() for k, v in model.named_parameters()}}
        buffers = dict(model.named_buffers())
        if {workload!r} == "forward":
            def fwd(params, buffers, ids):
                return torch.func.functional_call(model, {{**params, **buffers}}, (ids,)).logits
            args = (params, buffers, ids)
            jf = jax.jit(interop.jax_view(fwd))
        else:
            # benchmarks/compile_step.py's torchax train step, lowered instead of run.
            state = [params, {{k: torch.zeros_like(p) for k, p in params.items()}},
                     {{k: torch.zeros_like(p) for k, p in params.items()}},
                     torch.zeros((), device="jax")]
            train = cs.torchax_train_fn(model)
            args = (*state, buffers, ids)
            jf = jax.jit(interop.jax_view(train), donate_argnums=(0, 1, 2))
        open({out!r}, "w").write(jf.lower(*interop.jax_view(args)).as_text())
"""
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])


def time_modules(paths: dict, rounds: int, calls: int) -> dict:
    """paths: name -> module file. Returns (name, xla) -> median ms, interleaved."""
    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)  # torchtpu's modules take s64 token ids
    from jax._src import xla_bridge
    from jax._src.lib import xla_client as xc
    import xla_plugins.xla_cpu_pjrt as plugin

    xc.load_pjrt_plugin_dynamically(
        "torchtpu_cpu", os.path.join(os.path.dirname(plugin.__file__), "xla_cpu_pjrt.so"))
    clients = {"jaxlib": xla_bridge.get_backend("cpu"),
               "plugin": xc.make_c_api_client("torchtpu_cpu", {"cpu_device_count": 1})}
    types = {"f32": np.float32, "i64": np.int64, "i32": np.int32, "i1": np.bool_}
    runs = {}
    for name, path in paths.items():
        text = open(path).read()
        sig = re.search(r"@main\((.*?)\) ->", text, re.S).group(1)
        params = re.split(r",\s*%", sig)
        for xla, client in clients.items():
            dev = client.devices()[0]
            exe = client.compile_and_load(text, xc.DeviceList((dev,)), xc.CompileOptions())
            rng = np.random.default_rng(0)
            args, alias = [], {}
            for i, p in enumerate(params):
                parts = re.search(r"tensor<([^>]*)>", p).group(1).split("x")
                shape, dt = tuple(int(d) for d in parts[:-1]), types[parts[-1]]
                # Small weights; integer inputs (token ids) 1.
                a = (rng.standard_normal(shape) * 0.02).astype(dt) if dt == np.float32 else \
                    np.ones(shape, dt)
                args.append(jax.device_put(a, dev))
                m = re.search(r"tf\.aliasing_output = (\d+)", p)
                if m:
                    alias[i] = int(m.group(1))
            runs[(name, xla)] = (exe, args, alias)

    def call(key):
        exe, args, alias = runs[key]
        out = exe.execute(args)
        jax.block_until_ready(out)
        for i, o in alias.items():  # donated: the next call takes the new state
            args[i] = out[o]

    times = {k: [] for k in runs}
    for _ in range(rounds):
        for key in runs:
            for _ in range(3):
                call(key)
            for _ in range(calls):
                start = time.perf_counter()
                call(key)
                times[key].append((time.perf_counter() - start) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workloads", default="forward,train_step")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--keep", help="folder to keep the modules in (default: a temporary one)")
    p.add_argument("--child", nargs="+")
    args = p.parse_args()
    if args.child:
        paths = dict(zip(args.child[::2], args.child[1::2]))
        result = time_modules(paths, args.rounds, args.calls)
        print(json.dumps({f"{n}|{x}": ms for (n, x), ms in result.items()}))
        return
    import importlib.util

    if importlib.util.find_spec("jax") is None or importlib.util.find_spec("torchax") is None:
        print(json.dumps({"skipped": "JAX or torchax is not installed "
                                     "(pip install --no-deps torchax==0.0.13)"}))
        return
    import torch

    print(json.dumps({"host": {"cpus": os.cpu_count(), "loadavg_1m": os.getloadavg()[0],
                               "torch": torch.__version__}}), flush=True)
    folder = args.keep or tempfile.mkdtemp(prefix="compile-step-programs-")
    os.makedirs(folder, exist_ok=True)
    for workload in args.workloads.split(","):
        paths = {"torchtpu": os.path.join(folder, f"torchtpu_{workload}.mlir"),
                 "jax": os.path.join(folder, f"jax_{workload}.mlir")}
        ours_module(workload, paths["torchtpu"])
        jax_module(workload, paths["jax"])
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        cmd = [sys.executable, __file__, "--rounds", str(args.rounds), "--calls", str(args.calls),
               "--child"] + [x for kv in paths.items() for x in kv]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            print(json.dumps({"workload": workload, "error": r.stderr[-500:]}), flush=True)
            continue
        ms = {tuple(k.split("|")): v for k, v in
              json.loads(r.stdout.strip().splitlines()[-1]).items()}
        for (name, xla), value in sorted(ms.items()):
            print(json.dumps({"workload": workload, "module": name, "xla": xla,
                              "median_ms": round(value, 3),
                              "program_ratio": round(value / ms[("jax", xla)], 3),
                              "xla_ratio": round(value / ms[(name, "jaxlib")], 3)}), flush=True)


if __name__ == "__main__":
    main()
