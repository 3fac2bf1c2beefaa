"""Diffusers pipelines end to end on tpu against the same pipeline on the CPU.

A StableDiffusionPipeline is assembled from tiny configs (the sizes of Diffusers' own fast
tests): UNet2DConditionModel, AutoencoderKL, a CLIP text encoder and a CLIP tokenizer whose
vocabulary is written locally, with a DDIM scheduler (eta 0: no noise after the initial latents).
No hub, no network. The initial latents come from a CPU generator on both devices, so the two
runs start from the same noise and must produce the same image; so do image-to-image and
inpainting (StableDiffusionInpaintPipeline with a 9-channel UNet). A DiTPipeline
(class-conditional, transformer-based denoiser) is checked the same way.

Tolerance: images (floats in [0, 1]) within 1e-4 absolute; the runs measured differ by ~1e-6:
the float32 UNet, VAE and text encoder accumulate in XLA's order instead of CPU ATen's, and the
few denoising steps do not amplify it.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import torchtpu

transformers = pytest.importorskip("transformers")
diffusers = pytest.importorskip("diffusers")

from torchtpu.testing.tiny_diffusers import tiny_stable_diffusion  # noqa: E402

PROMPT = "a cat on a mat"


@pytest.fixture(scope="module")
def pipes(tmp_path_factory):
    pipe = tiny_stable_diffusion(tmp_path_factory.mktemp("tokenizer"))
    return pipe, copy.deepcopy(pipe).to("tpu")


def text_to_image(pipe, size=32, **kwargs):
    generator = torch.Generator("cpu").manual_seed(0)
    return pipe(PROMPT, num_inference_steps=2, guidance_scale=6.0, generator=generator,
                output_type="np", height=size, width=size, **kwargs).images


def programs_compiled():
    torch.tpu.synchronize()
    return torchtpu.metrics()["programs_compiled"]


def fallbacks():
    torch.tpu.synchronize()
    return torchtpu.metrics()["cpu_fallbacks"]


def assert_eager_run_matches_cpu(run, pipe_tpu, pipe_cpu):
    """run(pipe) on tpu takes no CPU fallback and gives the CPU's 32x32 image within 1e-4."""
    before = fallbacks()
    image_tpu = run(pipe_tpu)
    assert fallbacks() == before
    image_cpu = run(pipe_cpu)
    assert image_tpu.shape == (1, 32, 32, 3)
    np.testing.assert_allclose(image_tpu, image_cpu, rtol=0, atol=1e-4)


def test_stable_diffusion_eager_matches_cpu(pipes):
    pipe_cpu, pipe_tpu = pipes
    assert pipe_tpu.device.type == "tpu"
    assert_eager_run_matches_cpu(text_to_image, pipe_tpu, pipe_cpu)


def test_stable_diffusion_image_to_image_matches_cpu(pipes):
    from diffusers import StableDiffusionImg2ImgPipeline

    pipe_cpu, pipe_tpu = pipes
    init = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    images = []
    for pipe in (pipe_tpu, pipe_cpu):
        img2img = StableDiffusionImg2ImgPipeline(**pipe.components)
        img2img.set_progress_bar_config(disable=True)
        generator = torch.Generator("cpu").manual_seed(0)
        images.append(img2img(PROMPT, image=init, strength=0.75, num_inference_steps=4,
                              guidance_scale=6.0, generator=generator, output_type="np").images)
    assert images[0].shape == (1, 32, 32, 3)
    np.testing.assert_allclose(images[0], images[1], rtol=0, atol=1e-4)


def test_stable_diffusion_inpainting_eager_matches_cpu(tmp_path):
    # A 9-channel UNet sees the noisy latents, the downsampled mask and the masked image's
    # latents; the pipeline binarizes the mask, encodes the masked image with the VAE (a sample
    # drawn with the CPU generator) and starts from noise at strength 1.
    from torchtpu.testing.tiny_diffusers import tiny_stable_diffusion_inpaint

    pipe_cpu = tiny_stable_diffusion_inpaint(tmp_path)
    pipe_tpu = copy.deepcopy(pipe_cpu).to("tpu")
    init = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    mask = torch.zeros(1, 1, 32, 32)
    mask[..., 8:24, 4:20] = 1  # repaint this rectangle, keep the rest

    def inpaint(pipe):
        generator = torch.Generator("cpu").manual_seed(0)
        return pipe(PROMPT, image=init, mask_image=mask, num_inference_steps=2, guidance_scale=6.0,
                    generator=generator, output_type="np", height=32, width=32).images

    assert_eager_run_matches_cpu(inpaint, pipe_tpu, pipe_cpu)


def test_stable_diffusion_compiled_unet_never_recompiles_the_same_size(pipes):
    # (That a new image size compiles once is shown by benchmarks/diffusers_pipeline.py, which
    # counts the programs compiled per size and phase: a second size here doubles the compiles.)
    pipe_cpu, pipe_tpu = pipes
    compiled = copy.copy(pipe_tpu)  # shares the modules; only this copy's unet is compiled
    compiled.unet = torch.compile(pipe_tpu.unet, backend="tpu")
    try:
        image_first = text_to_image(compiled)
        before = programs_compiled()
        image_again = text_to_image(compiled)
        assert programs_compiled() == before, "the same image size compiled again"
        np.testing.assert_allclose(image_first, image_again, rtol=0, atol=0)
        np.testing.assert_allclose(image_first, text_to_image(pipe_cpu), rtol=0, atol=1e-4)
    finally:
        torch._dynamo.reset()


def test_dit_transformer_pipeline_eager_and_compiled_match_cpu():
    # A transformer-based denoiser (DiT: patchify, adaLN-zero blocks, class-label embedding).
    from torchtpu.testing.tiny_diffusers import tiny_dit

    pipe_cpu = tiny_dit()
    pipe_tpu = copy.deepcopy(pipe_cpu).to("tpu")

    def run(pipe):
        generator = torch.Generator("cpu").manual_seed(0)
        return pipe(class_labels=[1, 7], num_inference_steps=2, guidance_scale=4.0,
                    generator=generator, output_type="np").images

    image_cpu = run(pipe_cpu)
    before = fallbacks()
    image_tpu = run(pipe_tpu)
    assert fallbacks() == before
    assert image_tpu.shape == (2, 32, 32, 3)
    np.testing.assert_allclose(image_tpu, image_cpu, rtol=0, atol=1e-4)

    pipe_tpu.transformer = torch.compile(pipe_tpu.transformer, backend="tpu")
    try:
        image_compiled = run(pipe_tpu)
        before = programs_compiled()
        np.testing.assert_allclose(run(pipe_tpu), image_compiled, rtol=0, atol=0)
        assert programs_compiled() == before, "the same image size compiled again"
        np.testing.assert_allclose(image_compiled, image_cpu, rtol=0, atol=1e-4)
    finally:
        torch._dynamo.reset()
