"""A whole StableDiffusionPipeline (tiny configs, random weights, local tokenizer: see
torchtpu/testing/tiny_diffusers.py), first call vs steady state, in three modes run in one
process with the same pipeline and inputs:

  cpu-eager           the CPU baseline (PyTorch eager)
  tpu-eager           the pipeline moved to tpu, every op eager
  tpu-compiled-unet   the same, with pipe.unet = torch.compile(pipe.unet, backend="tpu")

For each mode and image size: the first call (compiles on a cold cache) and the median of the
next calls, the programs compiled by each phase, and the ratio of the tpu steady state to the
CPU's. One JSON object per line. torchtpu's program cache goes to a private temporary folder, so
the first call is cold whatever ran before (PyTorch's own caches are left alone).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time

# Before torch imports torchtpu (autoload): a private, empty program cache.
os.environ.setdefault("TORCHTPU_CACHE_DIR", tempfile.mkdtemp(prefix="torchtpu_bench_cache_"))

import torch  # noqa: E402

import torchtpu  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from torchtpu.testing.tiny_diffusers import tiny_stable_diffusion  # noqa: E402


def run(pipe, size, steps):
    generator = torch.Generator("cpu").manual_seed(0)
    return pipe("a cat on a mat", num_inference_steps=steps, guidance_scale=6.0,
                generator=generator, output_type="np", height=size, width=size).images


def compiled_programs(device):
    if device != "tpu":
        return 0
    torch.tpu.synchronize()
    return torchtpu.metrics()["programs_compiled"]


def measure(pipe, device, size, steps, repeats):
    """output_type="np" copies the image to the host, so each call ends synchronized."""
    c0 = compiled_programs(device)
    t0 = time.perf_counter()
    image = run(pipe, size, steps)
    first_ms = (time.perf_counter() - t0) * 1e3
    c1 = compiled_programs(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run(pipe, size, steps)
        times.append((time.perf_counter() - t0) * 1e3)
    c2 = compiled_programs(device)
    return image, first_ms, statistics.median(times), c1 - c0, c2 - c1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--steps", type=int, default=4, help="denoising steps per call")
    parser.add_argument("--repeats", type=int, default=5, help="steady-state calls per size")
    args = parser.parse_args()

    pipe_cpu = tiny_stable_diffusion()
    pipe_tpu = copy.deepcopy(pipe_cpu).to("tpu")
    pipe_compiled = copy.copy(pipe_tpu)
    pipe_compiled.unet = torch.compile(pipe_tpu.unet, backend="tpu")
    modes = [("cpu-eager", pipe_cpu, "cpu"), ("tpu-eager", pipe_tpu, "tpu"),
             ("tpu-compiled-unet", pipe_compiled, "tpu")]
    for size in args.sizes:
        baseline_ms, reference = None, None
        for mode, pipe, device in modes:
            image, first_ms, steady_ms, first_compiles, steady_compiles = measure(
                pipe, device, size, args.steps, args.repeats)
            if reference is None:
                baseline_ms, reference = steady_ms, image
            print(json.dumps({
                "workload": f"stable_diffusion_tiny_{size}x{size}_{args.steps}steps",
                "mode": mode,
                "first_call_ms": round(first_ms, 1),
                "steady_median_ms": round(steady_ms, 2),
                "programs_compiled_first_call": first_compiles,
                "programs_compiled_steady": steady_compiles,
                "steady_vs_cpu_eager": round(steady_ms / baseline_ms, 3),
                "max_abs_diff_vs_cpu": float(abs(image - reference).max()),
            }), flush=True)


if __name__ == "__main__":
    main()
