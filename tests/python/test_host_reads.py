"""Host reads are one transfer: printing a tpu tensor (repr/str/format) copies it to the host
once and formats it there, with exactly CPU PyTorch's text plus the device; tolist() and item()
read once too."""

import torch

import torchtpu


def syncs():
    return torchtpu.metrics()["host_syncs"]


def expected_repr(cpu: torch.Tensor, tpu: torch.Tensor) -> str:
    """What PyTorch's own formatter prints for the tpu tensor (running its ops on the device),
    which for short tensors is also CPU PyTorch's text plus the device."""
    with torch.no_grad():
        text = torchtpu._printing.pytorch_str_intern(tpu)
    if "\n" not in text:
        assert text.replace(", device='" + str(tpu.device) + "'", "") == repr(cpu)
    return text


def test_print_200x200_is_at_most_two_syncs():
    c = torch.randn(200, 200)
    t = c.to("tpu")
    torch.tpu.synchronize()
    before = syncs()
    text = repr(t)
    assert syncs() - before <= 2
    assert text == expected_repr(c, t)
    before = syncs()
    assert str(t) == text
    assert syncs() - before <= 2


def test_print_matches_cpu_for_dtypes_views_and_autograd():
    cases = [
        torch.arange(12, dtype=torch.int32).reshape(3, 4),
        torch.tensor([True, False, True]),
        torch.tensor([1.5, float("nan"), float("inf"), -0.0, 1e-8]),
        torch.randn(4, 5).to(torch.bfloat16),
        torch.randn(3, 3, dtype=torch.float64) * 1e6,
        torch.tensor(3.25),
        torch.zeros(0, 3),
    ]
    for c in cases:
        t = c.to("tpu")
        assert repr(t) == expected_repr(c, t), (repr(t), repr(c))
    base = torch.randn(6, 8)
    bt = base.to("tpu")
    view = bt[1:5, ::3]
    assert repr(view) == expected_repr(base[1:5, ::3], view)
    w = torch.randn(3, requires_grad=True)
    wt = w.detach().to("tpu").requires_grad_()
    assert repr(wt) == expected_repr(w, wt)
    y = wt * 2
    assert "grad_fn=<MulBackward0>" in repr(y) and "device='tpu:0'" in repr(y)
    assert f"{torch.tensor(2.5).to('tpu'):.2f}" == "2.50"


def test_large_tensor_summary_is_one_read():
    c = torch.randn(3000, 500)
    t = c.to("tpu")
    torch.tpu.synchronize()
    before = syncs()
    text = str(t)
    assert syncs() - before <= 2
    assert text == expected_repr(c, t)


def test_tolist_and_item_read_once():
    c = torch.randn(50, 20)
    t = c.to("tpu")
    torch.tpu.synchronize()
    before = syncs()
    assert t.tolist() == c.tolist()
    assert syncs() - before <= 1
    before = syncs()
    assert t[7, 3].item() == c[7, 3].item()
    assert syncs() - before <= 1
