"""A Diffusers text-to-image pipeline on tpu, its UNet compiled with torch.compile(backend="tpu"):
each denoising step's UNet call is one XLA program, compiled on the first step and reused by the
rest (a later run finds it in the disk cache).

    python examples/diffusers_compiled_unet.py [--steps 4]

A tiny Stable Diffusion is built from configs with random weights (torchtpu.testing.tiny_diffusers,
the sizes of Diffusers' own fast tests); the image is compared with the same pipeline on the CPU.
"""

import argparse
import time

import torch

import torchtpu
from torchtpu.testing.tiny_diffusers import tiny_stable_diffusion


def run(pipe, device, steps):
    generator = torch.Generator("cpu").manual_seed(0)
    start = time.perf_counter()
    image = pipe("a red square", num_inference_steps=steps, height=32, width=32,
                 guidance_scale=7.5, generator=generator, output_type="pt").images
    return image.cpu(), time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    args = p.parse_args()

    cpu_pipe = tiny_stable_diffusion()
    reference, cpu_s = run(cpu_pipe, "cpu", args.steps)

    pipe = tiny_stable_diffusion().to("tpu")
    pipe.unet = torch.compile(pipe.unet, backend="tpu")
    before = torchtpu.metrics()["programs_compiled"]
    image, first_s = run(pipe, "tpu", args.steps)
    compiled = torchtpu.metrics()["programs_compiled"] - before
    image_again, again_s = run(pipe, "tpu", args.steps)
    err = (image - reference).abs().max().item()
    print(f"image {tuple(image.shape)}: max |tpu - cpu| = {err:.2e}; first run {first_s:.1f} s "
          f"({compiled} programs compiled), second run {again_s:.2f} s, CPU {cpu_s:.2f} s")
    assert err < 1e-3, err
    assert torch.equal(image, image_again)


if __name__ == "__main__":
    main()
