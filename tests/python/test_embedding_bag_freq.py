"""embedding_bag(scale_grad_by_freq=True): each weight row's gradient is divided by how often
its index occurs in the batch (the documented semantics, and CUDA's).

torch 2.13's CPU kernel divides by the count of an unrelated index when an index occurring once
sorts after a repeated one (pytorch/pytorch#190063, fixed upstream by #190264); tpu follows the
documented semantics, so it is compared with the CPU's F.embedding (whose scaling is right) and
with CPU embedding_bag where all counts agree."""
import pytest
import torch
import torch.nn.functional as F

import torchtpu


def _grad(dev, idx, offsets, mode, weight, padding_idx=None, psw=None):
    w = weight.clone().to(dev).requires_grad_()
    out = F.embedding_bag(idx.to(dev), w, None if offsets is None else offsets.to(dev), mode=mode,
                          scale_grad_by_freq=True, padding_idx=padding_idx,
                          per_sample_weights=None if psw is None else psw.to(dev))
    g = torch.arange(out.numel(), dtype=out.dtype).view(out.shape).to(dev) / 7
    out.backward(g)
    return w.grad.cpu()


def _reference(idx, offsets, mode, weight, padding_idx=None):
    # The same bags through F.embedding (whose scale_grad_by_freq the CPU computes correctly).
    w = weight.clone().requires_grad_()
    flat = idx.reshape(-1)
    if offsets is None:
        starts = list(range(0, flat.numel(), idx.shape[1]))
    else:
        starts = offsets.tolist()
    ends = starts[1:] + [flat.numel()]
    rows = F.embedding(flat, w, padding_idx=padding_idx, scale_grad_by_freq=True)
    outs = []
    for s, e in zip(starts, ends):
        r = rows[s:e]
        keep = flat[s:e] != (padding_idx if padding_idx is not None else -1)
        r = r[keep]
        outs.append(r.sum(0) if mode == "sum" else r.sum(0) / max(int(keep.sum()), 1))
    out = torch.stack(outs)
    out.backward(torch.arange(out.numel(), dtype=out.dtype).view(out.shape) / 7)
    return w.grad


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_scale_grad_by_freq_mixed_counts(mode, padding_idx):
    torch.manual_seed(0)
    weight = torch.randn(10, 3)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 1, 1])
    offsets = torch.tensor([0, 4, 7])
    got = _grad("tpu", idx, offsets, mode, weight, padding_idx)
    torch.testing.assert_close(got, _reference(idx, offsets, mode, weight, padding_idx))
    got2d = _grad("tpu", idx.view(2, 5), None, mode, weight, padding_idx)
    torch.testing.assert_close(got2d, _reference(idx.view(2, 5), None, mode, weight, padding_idx))


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_scale_grad_by_freq_matches_cpu_where_cpu_is_right(mode):
    # Every index occurs twice: the CPU kernel's count lookup cannot pick a wrong count.
    weight = torch.randn(8, 4)
    idx = torch.tensor([3, 1, 6, 3, 1, 6, 0, 0])
    offsets = torch.tensor([0, 3, 5])
    torch.testing.assert_close(_grad("tpu", idx, offsets, mode, weight),
                               _grad("cpu", idx, offsets, mode, weight))


def test_scale_grad_by_freq_with_per_sample_weights():
    weight = torch.randn(6, 2)
    idx = torch.tensor([0, 2, 2, 5, 0, 0])
    offsets = torch.tensor([0, 2])
    psw = torch.tensor([0.5, 2.0, -1.0, 3.0, 1.5, 0.25])
    got = _grad("tpu", idx, offsets, "sum", weight, psw=psw)
    # per row: sum over its occurrences of psw * grad of the bag / count
    g = torch.arange(4, dtype=torch.float32).view(2, 2) / 7
    bag = torch.tensor([0, 0, 1, 1, 1, 1])
    want = torch.zeros(6, 2)
    counts = torch.bincount(idx, minlength=6).float()
    for k in range(6):
        want[idx[k]] += psw[k] * g[bag[k]] / counts[idx[k]]
    torch.testing.assert_close(got, want)
