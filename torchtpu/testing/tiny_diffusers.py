"""Tiny Diffusers pipelines built from configs (the sizes of Diffusers' own fast tests), with
random weights under a fixed seed and a tokenizer written locally: no hub, no network. Shared
by tests/python/test_hf_pipelines.py and benchmarks/diffusers_pipeline.py."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch


def tiny_stable_diffusion(tokenizer_dir: str | Path | None = None, seed: int = 0):
    """A StableDiffusionPipeline (UNet2DConditionModel, AutoencoderKL, CLIP text encoder, CLIP
    tokenizer, DDIM scheduler) on the CPU; the tokenizer files go to `tokenizer_dir` (a new
    temporary folder when None)."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    tokenizer_dir = Path(tokenizer_dir or tempfile.mkdtemp(prefix="tiny_clip_tokenizer_"))
    torch.manual_seed(seed)
    unet = tiny_unet(in_channels=4)
    vae = AutoencoderKL(block_out_channels=(4, 8), in_channels=3, out_channels=3,
                        down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4,
                        norm_num_groups=2)
    text_encoder = CLIPTextModel(CLIPTextConfig(bos_token_id=0, eos_token_id=2, pad_token_id=1,
                                                hidden_size=32, intermediate_size=37,
                                                num_attention_heads=4, num_hidden_layers=2,
                                                vocab_size=1000))
    # A character-level BPE vocabulary (no merges) is enough for CLIP's tokenizer.
    vocab = {"<|startoftext|>": 0, "!": 1, "<|endoftext|>": 2}
    for c in "abcdefghijklmnopqrstuvwxyz":
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    (tokenizer_dir / "vocab.json").write_text(json.dumps(vocab))
    (tokenizer_dir / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(tokenizer_dir / "vocab.json"), str(tokenizer_dir / "merges.txt"),
                              model_max_length=77)
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    pipe = StableDiffusionPipeline(unet=unet, vae=vae, text_encoder=text_encoder,
                                   tokenizer=tokenizer, scheduler=scheduler, safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def tiny_unet(in_channels: int = 4):
    """The tiny UNet2DConditionModel of tiny_stable_diffusion (random weights from torch's current
    seed); in_channels=9 is an inpainting UNet (latents, mask, masked-image latents)."""
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(block_out_channels=(4, 8), layers_per_block=1, sample_size=32,
                                in_channels=in_channels, out_channels=4,
                                down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
                                cross_attention_dim=32, norm_num_groups=2)


def tiny_stable_diffusion_inpaint(tokenizer_dir: str | Path | None = None, seed: int = 0):
    """A StableDiffusionInpaintPipeline on the CPU: tiny_stable_diffusion's VAE, text encoder,
    tokenizer and scheduler with a 9-channel UNet."""
    from diffusers import StableDiffusionInpaintPipeline

    components = tiny_stable_diffusion(tokenizer_dir, seed).components
    torch.manual_seed(seed + 1)
    components["unet"] = tiny_unet(in_channels=9)
    pipe = StableDiffusionInpaintPipeline(**components)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def tiny_dit(seed: int = 0):
    """A class-conditional DiTPipeline (a transformer-based denoiser, Transformer2DModel with
    adaLN-zero, an AutoencoderKL and a DDIM scheduler) on the CPU, in eval mode: in training
    mode DiT's label embedding drops class labels at random."""
    from diffusers import AutoencoderKL, DDIMScheduler, DiTPipeline, Transformer2DModel

    torch.manual_seed(seed)
    transformer = Transformer2DModel(sample_size=16, num_layers=2, patch_size=4,
                                     attention_head_dim=8, num_attention_heads=2, in_channels=4,
                                     out_channels=8, attention_bias=True,
                                     activation_fn="gelu-approximate", num_embeds_ada_norm=1000,
                                     norm_type="ada_norm_zero", norm_elementwise_affine=False)
    vae = AutoencoderKL(block_out_channels=(4, 8), in_channels=3, out_channels=3,
                        down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4,
                        norm_num_groups=2)
    pipe = DiTPipeline(transformer=transformer.eval(), vae=vae.eval(), scheduler=DDIMScheduler())
    pipe.set_progress_bar_config(disable=True)
    return pipe
