"""Values are run time, structure is compile time: a view's offset into its storage is a runtime
argument of the program that reads or writes it, so indexing loops (a row loop, a sliding
window, a KV-cache position) compile one program per form instead of one per position, in
eager mode and under torch.compile(backend="tpu"). Every value is compared with CPU PyTorch."""

import torch
from torch.testing import assert_close

import torchtpu

POSITIONS = 100


def compiled():
    """Programs built: compiled by XLA or loaded from the disk cache (a program cache miss)."""
    m = torchtpu.metrics()
    return m["programs_compiled"] + m.get("disk_cache_hits", 0)


def loop_compiles(form, inputs, n=POSITIONS):
    """Runs form(*inputs, i) for i in 0..n-1 on tpu and on CPU; returns the programs compiled
    after the first position (the first one may compile) and checks every value."""
    cpu_inputs = [t.clone() for t in inputs]
    tpu_inputs = [t.to("tpu") for t in inputs]
    first = form(*tpu_inputs, 0)
    torch.tpu.synchronize()
    before = compiled()
    results = [first] + [form(*tpu_inputs, i) for i in range(1, n)]
    torch.tpu.synchronize()
    after = compiled()
    expected = [form(*cpu_inputs, i) for i in range(n)]
    for i, (got, want) in enumerate(zip(results, expected)):
        if isinstance(got, torch.Tensor):
            got = got.cpu()
        assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m: f"position {i}: {m}")
    for t, c in zip(tpu_inputs, cpu_inputs):
        assert_close(t.cpu(), c, msg=lambda m: f"inputs after the loop: {m}")
    return after - before


def test_row_select_matmul():
    x, w = torch.randn(POSITIONS, 16), torch.randn(16, 8)
    assert loop_compiles(lambda x, w, i: x[i] @ w, [x, w]) == 0


def test_row_window_sum():
    x = torch.randn(POSITIONS + 8, 16)
    assert loop_compiles(lambda x, i: x[i : i + 8].sum(), [x]) == 0


def test_column_select():
    x = torch.randn(12, POSITIONS)
    assert loop_compiles(lambda x, i: x[:, i] * 2 + 1, [x]) == 0


def test_narrow():
    x = torch.randn(POSITIONS + 4, 3, 5)
    assert loop_compiles(lambda x, i: x.narrow(0, i, 4).exp(), [x]) == 0


def test_strided_window_of_a_transpose():
    # A view with nested strides at a moving offset (read through slices, no gather).
    x = torch.randn(6, POSITIONS + 3)
    assert loop_compiles(lambda x, i: x.t()[i : i + 3, 1:5:2].clone(), [x]) == 0


def test_element_item():
    x = torch.randn(POSITIONS)
    assert loop_compiles(lambda x, i: torch.tensor(x[i].item()), [x]) == 0


def test_kv_cache_column_write():
    cache = torch.zeros(2, 3, POSITIONS, 4)
    values = torch.randn(POSITIONS, 2, 3, 4)

    def write(cache, values, pos):
        cache[:, :, pos] = values[pos]
        return cache[:, :, pos].sum()

    assert loop_compiles(write, [cache, values]) == 0


def test_row_write_scalar_and_inplace_op():
    x = torch.randn(POSITIONS, 7)

    def write(x, i):
        x[i] = 0.5 * i
        x[(i + 3) % POSITIONS].mul_(2)
        return x[i].clone()

    assert loop_compiles(write, [x]) == 0


def test_host_copy_into_view():
    x = torch.zeros(POSITIONS, 5)

    def write(x, i):
        x[i, 1:4] = torch.full((3,), float(i))  # a CPU tensor copied into a tpu view
        return x.sum()

    assert loop_compiles(write, [x]) == 0


def test_compiled_graph_fed_views_at_other_offsets():
    torch._dynamo.reset()

    @torch.compile(backend="tpu")
    def f(row, w):
        return torch.tanh(row @ w) + 1

    x, w = torch.randn(40, 16), torch.randn(16, 8)
    xt, wt = x.to("tpu"), w.to("tpu")
    f(xt[0], wt)
    torch.tpu.synchronize()
    before = compiled()
    got = [f(xt[i], wt).cpu() for i in range(1, 40)]
    assert compiled() == before
    for i, g in enumerate(got, start=1):
        assert_close(g, torch.tanh(x[i] @ w) + 1, rtol=1e-5, atol=1e-5)


def test_compiled_graph_writes_into_views_at_other_offsets():
    torch._dynamo.reset()

    @torch.compile(backend="tpu")
    def step(cache_col, v):
        cache_col.copy_(v * 2)
        return cache_col.sum()

    cache = torch.zeros(2, 20, 4)
    vs = torch.randn(20, 2, 4)
    ct, vt = cache.clone().to("tpu"), vs.to("tpu")
    step(ct[:, 0], vt[0])
    torch.tpu.synchronize()
    before = compiled()
    sums = [step(ct[:, p], vt[p]).cpu() for p in range(1, 20)]
    assert compiled() == before
    for p in range(20):
        cache[:, p] = vs[p] * 2
    assert_close(ct.cpu(), cache)
    for p, s in enumerate(sums, start=1):
        assert_close(s, cache[:, p].sum())


def test_fused_optimizer_learning_rate_schedule_compiles_once():
    # A scheduler moves the fused optimizers' float `lr` every step: a runtime value.
    for make in (
        lambda ps: torch.optim.Adam(ps, lr=1e-2, fused=True),
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, fused=True),
        lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, fused=True),
    ):
        init = [torch.randn(5, 3), torch.randn(7)]
        grads = [[torch.randn_like(p) for p in init] for _ in range(6)]
        ref = [torch.nn.Parameter(p.clone()) for p in init]
        dev = [torch.nn.Parameter(p.clone().to("tpu")) for p in init]
        opts = [make(ref), make(dev)]
        scheds = [torch.optim.lr_scheduler.StepLR(o, 1, gamma=0.7) for o in opts]
        counts = []
        for step in range(6):
            for params, on_tpu in ((ref, False), (dev, True)):
                for p, g in zip(params, grads[step]):
                    p.grad = g.to("tpu") if on_tpu else g.clone()
            for o, s in zip(opts, scheds):
                o.step()
                s.step()
            torch.tpu.synchronize()
            counts.append(compiled())
        assert counts[-1] == counts[1], counts  # step 0 and 1 may compile (state creation)
        for r, d in zip(ref, dev):
            assert_close(d.detach().cpu(), r.detach(), rtol=1e-5, atol=1e-6)
