"""Serialization of tpu tensors/modules/optimizer state, and DataLoader(pin_memory=True) feeding
tpu with non_blocking copies, against CPU PyTorch."""

import io

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import torchtpu


def _roundtrip(obj, **load_kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kw)


def test_save_load_tensors():
    base = torch.randn(6, 4)
    t = base.to("tpu")
    view = t[1:5, ::2]  # a view shares storage with its base through save/load
    objs = {"t": t, "view": view, "half": base.half().to("tpu"), "int": torch.arange(5).to("tpu")}
    back = _roundtrip(objs)
    assert back["t"].device.type == "tpu"
    for k in objs:
        assert torch.equal(back[k].cpu(), objs[k].cpu()), k
    back["t"][1, 0] = 100.0
    assert back["view"][0, 0].item() == 100.0  # aliasing survives
    cpu = _roundtrip(objs, map_location="cpu")
    assert cpu["t"].device.type == "cpu" and torch.equal(cpu["t"], base)
    # And from CPU onto tpu.
    tp = _roundtrip({"x": base}, map_location="tpu")
    assert tp["x"].device.type == "tpu" and torch.equal(tp["x"].cpu(), base)


def test_module_and_adamw_state_dict_roundtrip():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(3, 4).to("tpu")).sum().backward()
    opt.step()
    sd, osd = model.state_dict(), opt.state_dict()
    for loc in ("tpu", "cpu"):
        msd = _roundtrip(sd, map_location=loc)
        o2 = _roundtrip(osd, map_location=loc)
        for k, v in sd.items():
            assert msd[k].device.type == loc and torch.equal(msd[k].cpu(), v.cpu()), k
        for pid, state in osd["state"].items():
            for name, v in state.items():
                assert torch.equal(o2["state"][pid][name].cpu(), v.cpu()), (pid, name)
        assert o2["param_groups"] == osd["param_groups"]
    # A fresh model/optimizer loaded from the tpu checkpoint continues exactly like the original.
    model2 = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to("tpu")
    model2.load_state_dict(_roundtrip(sd, map_location="tpu"))
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)
    opt2.load_state_dict(_roundtrip(osd, map_location="tpu"))
    x = torch.randn(3, 4)
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        m(x.to("tpu")).sum().backward()
        o.step()
    for a, b in zip(model.parameters(), model2.parameters()):
        assert torch.equal(a.cpu(), b.cpu())


def test_pin_memory_is_pinned_and_non_blocking_copy():
    t = torch.randn(16, 8)
    assert not t.is_pinned()
    p = t.pin_memory()
    assert p.is_pinned() and p.device.type == "cpu" and torch.equal(p, t)
    assert p[3:].is_pinned()  # pointers inside a pinned block
    d = p.to("tpu", non_blocking=True)
    p.zero_()  # reusing the pinned buffer right away must not change the device copy
    assert torch.equal(d.cpu(), t)


def test_empty_host_cache_after_tpu_is_initialized():
    # torch.accelerator.empty_host_cache() asks the device type's host allocator; with none
    # registered it dereferenced null once tpu was initialized (every vLLM shutdown crashed in
    # its cleanup). It now empties the pinned allocator, which keeps no cache: live pinned
    # tensors stay valid and pinned.
    torch.ones(2, device="tpu").sum().item()  # tpu initialized
    t = torch.randn(8, 5)
    p = t.pin_memory()
    torch.accelerator.empty_cache()
    torch.accelerator.empty_host_cache()
    assert p.is_pinned() and torch.equal(p, t)
    assert torch.equal(p.to("tpu", non_blocking=True).cpu(), t)


def _train(dev, pin, workers):
    torch.manual_seed(0)
    x = torch.randn(64, 6)
    y = (x @ torch.randn(6, 1)).squeeze(1) + 0.1 * torch.randn(64)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, pin_memory=pin,
                        num_workers=workers, generator=torch.Generator().manual_seed(3))
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(2):
        for xb, yb in loader:
            if pin:
                assert xb.is_pinned() and yb.is_pinned()
            xb, yb = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
            loss = nn.functional.mse_loss(model(xb).squeeze(1), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_pin_memory_feeds_tpu_like_cpu(workers):
    cpu = _train("cpu", False, workers)
    tpu = _train("tpu", True, workers)
    assert len(cpu) == len(tpu) == 8
    torch.testing.assert_close(torch.tensor(tpu), torch.tensor(cpu), rtol=1e-5, atol=1e-6)


def test_pin_memory_of_a_tpu_tensor_raises_like_cuda():
    # Issue 18: pin_memory() of a device tensor fails on CUDA too ("cannot pin
    # 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned"); tpu says the same.
    t = torch.ones(3, device="tpu")
    with pytest.raises(RuntimeError, match="only dense CPU tensors can be pinned"):
        t.pin_memory()
    assert not t.is_pinned()
