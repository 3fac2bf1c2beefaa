"""nn.LSTM / nn.GRU on tpu through the fused cell lowerings, forward and backward against CPU."""

import pytest
import torch
import torch.nn as nn

import torchtpu

RNN_OPS = ("_thnn", "lstm", "gru")


def _rnn_fallbacks():
    fb = torchtpu.metrics()["cpu_fallbacks_by_op"]
    return {k: v for k, v in fb.items() if any(s in k for s in RNN_OPS)}


def _grads(mod):
    return {n: p.grad.detach().cpu() for n, p in mod.named_parameters()}


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("batch_first,bidirectional,bias", [(False, True, True), (True, False, True),
                                                           (False, True, False)])
def test_rnn_forward_backward_matches_cpu(kind, batch_first, bidirectional, bias):
    torch.manual_seed(0)
    cls = nn.LSTM if kind == "lstm" else nn.GRU
    cpu = cls(5, 7, num_layers=2, bidirectional=bidirectional, batch_first=batch_first, bias=bias)
    tpu = cls(5, 7, num_layers=2, bidirectional=bidirectional, batch_first=batch_first,
              bias=bias).to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    x = torch.randn(4, 3, 5)
    d = 2 if bidirectional else 1
    h0 = torch.randn(2 * d, 3 if not batch_first else 4, 7)
    state = (h0, torch.randn_like(h0)) if kind == "lstm" else h0
    state_t = tuple(s.to("tpu") for s in state) if kind == "lstm" else state.to("tpu")
    xc = x.clone().requires_grad_()
    xt = x.to("tpu").requires_grad_()
    before = _rnn_fallbacks()
    out_c, hn_c = cpu(xc, state)
    out_t, hn_t = tpu(xt, state_t)
    torch.testing.assert_close(out_t.cpu(), out_c, rtol=1e-5, atol=1e-5)
    hn_c = hn_c if kind == "lstm" else (hn_c,)
    hn_t = hn_t if kind == "lstm" else (hn_t,)
    for a, b in zip(hn_c, hn_t):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-5)
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(out_c.shape, generator=gen)
    wh = [torch.randn(h.shape, generator=gen) for h in hn_c]
    loss_c = (out_c * w).sum() + sum((h * v).sum() for h, v in zip(hn_c, wh))
    loss_t = (out_t * w.to("tpu")).sum() + sum((h * v.to("tpu")).sum() for h, v in zip(hn_t, wh))
    loss_c.backward()
    loss_t.backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    gc, gt = _grads(cpu), _grads(tpu)
    for name in gc:
        torch.testing.assert_close(gt[name], gc[name], rtol=1e-4, atol=1e-5, msg=name)
    assert _rnn_fallbacks() == before, "RNN ops fell back to the CPU"


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_rnn_training_float16_autocast(kind):
    """Half-precision gates under autocast compute in float32 inside the cell, like CUDA."""
    torch.manual_seed(0)
    cls = nn.LSTM if kind == "lstm" else nn.GRU
    cpu = cls(6, 8, num_layers=1)
    tpu = cls(6, 8, num_layers=1).to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    x = torch.randn(5, 2, 6)
    before = _rnn_fallbacks()
    with torch.autocast("tpu", dtype=torch.float16):
        out_t, _ = tpu(x.to("tpu"))
    assert out_t.dtype == torch.float16
    out_t.float().sum().backward()
    out_c, _ = cpu(x.half().float())
    torch.testing.assert_close(out_t.float().cpu(), out_c, rtol=1e-2, atol=1e-2)
    assert _rnn_fallbacks() == before


def test_cells_match_cpu():
    torch.manual_seed(0)
    for cls in (nn.LSTMCell, nn.GRUCell):
        cpu = cls(4, 6)
        tpu = cls(4, 6).to("tpu")
        tpu.load_state_dict(cpu.state_dict())
        x = torch.randn(3, 4)
        xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
        oc, ot = cpu(xc), tpu(xt)
        oc = oc if isinstance(oc, tuple) else (oc,)
        ot = ot if isinstance(ot, tuple) else (ot,)
        for a, b in zip(oc, ot):
            torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-5)
        sum(o.sum() for o in oc).backward()
        sum(o.sum() for o in ot).backward()
        torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)


def test_fused_gru_cell_outputs_have_cuda_shapes():
    # Issue 18 (the GRU cell workspace's shape): the CPU has no _thnn_fused_gru_cell kernel; the
    # tpu kernel returns CUDA's outputs: hy [B, H] and the workspace [B, 5H] (r, z, n, hn, hx),
    # and nn.GRUCell through it matches the CPU forward and backward.
    cell = torch.nn.GRUCell(4, 3)
    x, h = torch.randn(2, 4), torch.randn(2, 3)
    gi, gh = (x @ cell.weight_ih.T).detach(), (h @ cell.weight_hh.T).detach()
    hy, ws = torch.ops.aten._thnn_fused_gru_cell(
        gi.to("tpu"), gh.to("tpu"), h.to("tpu"), cell.bias_ih.detach().to("tpu"),
        cell.bias_hh.detach().to("tpu"))
    assert hy.shape == (2, 3) and ws.shape == (2, 15)
    torch.testing.assert_close(hy.cpu(), cell(x, h).detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ws[:, 12:].cpu(), h)
    dev = torch.nn.GRUCell(4, 3).to("tpu")
    dev.load_state_dict(cell.state_dict())
    xs = [x.clone().requires_grad_(), x.to("tpu").requires_grad_()]
    hs = [h.clone().requires_grad_(), h.to("tpu").requires_grad_()]
    cell(xs[0], hs[0]).sum().backward()
    dev(xs[1], hs[1]).sum().backward()
    for a, b in [(xs[1].grad, xs[0].grad), (hs[1].grad, hs[0].grad),
                 (dev.weight_ih.grad, cell.weight_ih.grad), (dev.bias_hh.grad, cell.bias_hh.grad)]:
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)
