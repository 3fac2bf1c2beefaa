"""uint8 bilinear / bicubic interpolation (with and without antialias) equals the CPU exactly.

The CPU runs its own integer kernel for uint8 images (separable width then height passes, an
intermediate uint8 image, int16 weights at a per-pass precision, clamp((acc + half) >> prec));
image pipelines (torchvision's resize on uint8 tensors) depend on exactly these values."""
import pytest
import torch
import torch.nn.functional as F

from torchtpu.testing.fallbacks import fallback_counts


def _image(c=3, h=17, w=23, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (2, c, h, w), dtype=torch.uint8, generator=g)


def _same(fn, x):
    before = fallback_counts()
    want = fn(x)
    got = fn(x.to("tpu")).cpu()
    assert got.dtype == torch.uint8 and got.shape == want.shape
    assert torch.equal(got, want), f"max |diff| {(got.int() - want.int()).abs().max().item()}"
    assert fallback_counts() == before


@pytest.mark.parametrize("size", [(9, 11), (30, 40), (17, 12), (40, 23), (5, 64), (2, 3)])
@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_uint8_resize(mode, align, antialias, size):
    _same(lambda t: F.interpolate(t, size=size, mode=mode, align_corners=align,
                                  antialias=antialias), _image())


@pytest.mark.parametrize("scale", [0.37, 1.5, 2.0, 3.3])
@pytest.mark.parametrize("antialias", [False, True])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_uint8_scale_factor(mode, antialias, scale):
    _same(lambda t: F.interpolate(t, scale_factor=scale, mode=mode, antialias=antialias,
                                  recompute_scale_factor=False), _image())


@pytest.mark.parametrize("channels", [1, 4, 5])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_uint8_channels_and_layout(mode, channels):
    # C <= 4 takes the CPU's AVX kernel and C > 4 its generic one: both compute the same values.
    x = _image(c=channels, h=32, w=21, seed=channels)
    _same(lambda t: F.interpolate(t, size=(13, 50), mode=mode), x)
    _same(lambda t: F.interpolate(t, size=(13, 50), mode=mode, antialias=True), x)
    cl = x.contiguous(memory_format=torch.channels_last)
    _same(lambda t: F.interpolate(t, size=(45, 9), mode=mode), cl)


def test_uint8_extremes_saturate():
    # Bicubic overshoots past 0 and 255 on hard edges; each pass clamps like the CPU.
    x = torch.zeros(1, 1, 8, 8, dtype=torch.uint8)
    x[..., ::2, :] = 255
    x[..., :, ::3] = 0
    for aa in (False, True):
        _same(lambda t: F.interpolate(t, size=(21, 19), mode="bicubic", antialias=aa), x)
        _same(lambda t: F.interpolate(t, size=(3, 5), mode="bicubic", antialias=aa), x)


def test_uint8_nearest_still_exact():
    _same(lambda t: F.interpolate(t, size=(30, 40), mode="nearest"), _image())
    _same(lambda t: F.interpolate(t, size=(30, 40), mode="nearest-exact"), _image())


@pytest.mark.parametrize("fn", [lambda t: F.interpolate(t, size=9, mode="linear"),
                                lambda t: F.interpolate(t.view(1, 2, 1, 1, 5), size=(2, 3, 9),
                                                        mode="trilinear")])
def test_uint8_linear_1d_3d_raise_like_cpu(fn):
    x = torch.randint(0, 256, (1, 2, 5), dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="not implemented for 'Byte'"):
        fn(x)
    with pytest.raises(RuntimeError, match="not implemented for 'Byte'"):
        fn(x.to("tpu"))
