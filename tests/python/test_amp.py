import torch
import torch.nn as nn

import torchtpu  # noqa: F401


def test_autocast_policy_matches_cuda_lists():
    a = torch.randn(4, 4, device="tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        mm = a @ a
        sm = torch.softmax(mm, -1)
        add = a + a
    assert mm.dtype == torch.bfloat16  # lower-precision list
    assert sm.dtype == torch.float32  # fp32 list
    assert add.dtype == torch.float32  # untouched
    assert torch.get_autocast_dtype("tpu") == torch.bfloat16


def test_autocast_training_tracks_cpu_autocast():
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    tpu = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt_t = torch.optim.SGD(tpu.parameters(), lr=0.1)
    x, y = torch.randn(32, 16), torch.randn(32, 4)
    losses = []
    for _ in range(8):
        for model, opt, dev in ((cpu, opt_c, "cpu"), (tpu, opt_t, "tpu")):
            opt.zero_grad()
            with torch.autocast(dev, dtype=torch.bfloat16):
                loss = nn.functional.mse_loss(model(x.to(dev)).float(), y.to(dev))
            loss.backward()
            opt.step()
            losses.append(loss.item())
    cpu_losses, tpu_losses = losses[0::2], losses[1::2]
    assert tpu_losses[-1] < tpu_losses[0]
    for lc, lt in zip(cpu_losses, tpu_losses):
        assert abs(lc - lt) <= 0.02 * abs(lc), (cpu_losses, tpu_losses)
