"""Weights that live on the CPU or on disk and are brought to tpu for each forward.

Diffusers' group offloading (`enable_group_offload`) keeps a model's groups of layers on the CPU
-- or in safetensors files on disk -- and onloads each group to the execution device just before
it runs, optionally on a side stream with `record_stream`. Outputs must equal the whole model
run on the CPU. Also `safetensors` loading straight onto tpu (`load_file(..., device="tpu")`,
`safe_open(..., device="tpu:1")`), which that disk path and Accelerate's disk offload use.
"""

from __future__ import annotations

import pytest
import torch

import torchtpu

safetensors_torch = pytest.importorskip("safetensors.torch")
diffusers = pytest.importorskip("diffusers")


def test_safetensors_loads_onto_tpu(tmp_path):
    tensors = {"w": torch.randn(5, 7), "i": torch.arange(6, dtype=torch.int64).reshape(2, 3)}
    path = str(tmp_path / "t.safetensors")
    safetensors_torch.save_file(tensors, path, metadata={"k": "v"})

    for device in ("tpu", "tpu:1", torch.device("tpu", 0)):
        loaded = safetensors_torch.load_file(path, device=device)
        want = torch.device(device) if not isinstance(device, str) or ":" in device else None
        for name, t in tensors.items():
            assert loaded[name].device.type == "tpu"
            if want is not None:
                assert loaded[name].device == want
            torch.testing.assert_close(loaded[name].cpu(), t, rtol=0, atol=0)

    from safetensors import safe_open

    with safe_open(path, framework="pt", device="tpu:1") as f:
        assert sorted(f.keys()) == ["i", "w"]
        assert f.metadata() == {"k": "v"}
        part = f.get_slice("w")[1:4, 2:]
        assert part.device == torch.device("tpu", 1)
        torch.testing.assert_close(part.cpu(), tensors["w"][1:4, 2:], rtol=0, atol=0)
        whole = f.get_tensor("i")
        assert whole.device == torch.device("tpu", 1)
        torch.testing.assert_close(whole.cpu(), tensors["i"], rtol=0, atol=0)

    # Other devices go to safetensors unchanged, errors included.
    assert safetensors_torch.load_file(path, device="cpu")["w"].device.type == "cpu"
    with pytest.raises(Exception, match="invalid"):
        safetensors_torch.load_file(path, device="nonsense")


def test_record_stream_on_tpu():
    s = torch.Stream("tpu")
    x = torch.randn(4).to("tpu", non_blocking=True)
    x.record_stream(s)  # accepted like CUDA's; the value is untouched
    torch.testing.assert_close((x * 2).cpu(), x.cpu() * 2)
    assert torchtpu.metrics()["cpu_fallbacks_by_op"].get("aten::record_stream", 0) == 0


def _tiny_vae():
    torch.manual_seed(0)
    return diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 16),
        layers_per_block=1, norm_num_groups=8,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D")).eval()


@pytest.mark.parametrize("offload_type", ["block_level", "leaf_level"])
@pytest.mark.parametrize("where", ["memory", "memory+stream", "disk", "disk+stream"])
def test_group_offloading_matches_cpu(tmp_path, offload_type, where):
    model = _tiny_vae()
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(x).sample

    kwargs = {"onload_device": torch.device("tpu"), "offload_type": offload_type,
              "use_stream": "stream" in where}
    if offload_type == "block_level":
        kwargs["num_blocks_per_group"] = 1
    if "stream" in where:
        kwargs["record_stream"] = True
    if where.startswith("disk"):
        kwargs["offload_to_disk_path"] = str(tmp_path)
    model.enable_group_offload(**kwargs)
    with torch.no_grad():
        got = model(x.to("tpu")).sample
        again = model(x.to("tpu")).sample  # onloads a second time from the offloaded copy
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(again.cpu(), want, rtol=1e-4, atol=1e-5)
