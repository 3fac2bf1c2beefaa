"""A mixed eager and compiled workload for test_engine_programs.py (run as a script): eager
functional, in-place, out= and foreach ops, views with runtime offsets (x[i], x[:, i], narrow, a
KV-cache write), CPU 0-d scalars, convolutions, index ops, default and explicit generators,
complex, two compiled graphs (random ops, an input mutated in place) and AdamW steps, eager and
compiled. `python engine_workload.py OUT.pt` saves CPU copies of every result in OUT.pt, to
compare two builds bit for bit."""
import sys
import torch
import torchtpu  # noqa: F401

out_path = sys.argv[1] if len(sys.argv) > 1 else None
torch.manual_seed(0)
dev = "tpu"
R = {}

def keep(name, t):
    if isinstance(t, (list, tuple)):
        for i, x in enumerate(t):
            keep(f"{name}.{i}", x)
    else:
        R[name] = t.detach().cpu().clone() if isinstance(t, torch.Tensor) else t

a = torch.randn(8, 16)
b = torch.randn(8, 16)
x, y = a.to(dev), b.to(dev)
# functional, python scalars, default scalar
keep("add", x + y)
keep("add_alpha", torch.add(x, y, alpha=2.5))
keep("mul_scalar", x * 3.0)
keep("sum", x.sum(1))
keep("mm", x @ y.t())
keep("int_plus_float", torch.arange(6, device=dev) + 1.5)
keep("f64", x.double() * 0.1)
# in-place and out=
z = x.clone()
z.mul_(2).add_(y, alpha=0.5)
keep("inplace", z)
o = torch.empty(0, device=dev)
torch.mul(x, y, out=o)
keep("out", o)
o2 = torch.empty(3, device=dev)
torch.arange(0, 10, 2, out=o2)
keep("arange_out", o2)
# foreach
ts = [x.clone(), y.clone()]
torch._foreach_add_(ts, [y, x])
keep("foreach_add_", ts)
keep("foreach_mul", torch._foreach_mul(ts, 0.5))
# views: slices with runtime offsets, narrow, column, kv-cache write
for i in range(3):
    keep(f"row{i}", x[i] * 2)
    keep(f"col{i}", x[:, i] + 1)
keep("narrow", x.narrow(1, 3, 5).exp())
cache = torch.zeros(2, 4, 6, 8, device=dev)
for pos in range(3):
    cache[:, :, pos] = torch.full((2, 4, 8), float(pos + 1), device=dev)
keep("cache", cache)
zz = x.clone()
zz[2:5, 1:7] += 1
keep("slice_inplace", zz)
# CPU 0-d scalars
s = torch.tensor(2.5)
keep("cpu_scalar", x * s)
keep("cpu_scalar_int", x + torch.tensor(3))
# conv (channels_last too)
img = torch.randn(2, 3, 10, 10)
w = torch.randn(4, 3, 3, 3)
keep("conv", torch.nn.functional.conv2d(img.to(dev), w.to(dev), padding=1))
keep("conv_cl", torch.nn.functional.conv2d(img.to(dev).to(memory_format=torch.channels_last),
                                           w.to(dev), stride=2))
# index ops
idx = torch.tensor([0, 3, 7]).to(dev)
keep("index_select", x.index_select(0, idx))
keep("gather", torch.gather(x, 1, torch.tensor([[0, 1]] * 8).to(dev)))
keep("index", x[idx])
v = x.clone()
v.index_put_((idx,), torch.ones(3, 16, device=dev))
keep("index_put", v)
keep("index_add", torch.zeros(8, 16, device=dev).index_add(0, idx, torch.ones(3, 16, device=dev)))
# random: default and explicit generators
torch.manual_seed(1)
keep("rand_default", torch.rand(5, device=dev))
keep("randn_default", torch.randn(5, device=dev))
g = torch.Generator(device=dev)
g.manual_seed(123)
keep("rand_gen", torch.rand(5, device=dev, generator=g))
u = torch.empty(7, device=dev)
u.uniform_(-1, 1, generator=g)
keep("uniform_gen", u)
keep("dropout", torch.nn.functional.dropout(torch.ones(64, device=dev), 0.3))
keep("bernoulli", torch.bernoulli(torch.full((16,), 0.5, device=dev)))
# complex
c = torch.randn(4, 4, dtype=torch.complex64)
cd = c.to(dev)
keep("complex_mul", cd * cd)
keep("complex_scalar", cd * 0.5j)
keep("complex_abs", cd.abs())
keep("conj", cd.conj() + 1)
# softmax, layernorm, matmul
keep("softmax", torch.softmax(x, -1))
keep("layer_norm", torch.nn.functional.layer_norm(x, (16,)))

# compiled graph 1: random op + in-place mutation of an input
def f1(p, q):
    p.add_(q)
    return torch.relu(p) * torch.rand_like(p), p.sum()

torch.manual_seed(2)
p = x.clone()
cf1 = torch.compile(f1, backend="tpu")
keep("g1.a", cf1(p, y))
keep("g1.b", cf1(p, y))
keep("g1.p", p)

# compiled graph 2: matmul/softmax/dropout
def f2(p, q, s):
    h = torch.softmax(p @ q.t() * s, -1)
    return torch.nn.functional.dropout(h, 0.1, training=True) + torch.randn_like(h)

cf2 = torch.compile(f2, backend="tpu")
keep("g2.a", cf2(x, y, 0.5))
keep("g2.b", cf2(x[:4], y[:4], 0.5))

# AdamW step (eager, fused by default? foreach) and a compiled one
model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
model_cpu_state = {k: v.clone() for k, v in model.state_dict().items()}
model = model.to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
for step in range(2):
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    keep(f"adamw.loss{step}", loss)
keep("adamw.params", list(model.parameters()))

model2 = torch.nn.Linear(16, 4)
model2.load_state_dict(torch.nn.Linear(16, 4).state_dict())
model2 = model2.to(dev)
opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2, capturable=False)

@torch.compile(backend="tpu")
def opt_step():
    opt2.step()

for step in range(2):
    model2(x).sum().backward()
    opt_step()
    opt2.zero_grad()
keep("adamw_compiled.params", list(model2.parameters()))
torch.tpu.synchronize()
if out_path:
    torch.save(R, out_path)
