"""Size buckets (TORCHTPU_SIZE_BUCKETS=1, csrc/device/buckets.h) and size-generic elementwise
programs (csrc/exec/generic.h): storages keep device buffers rounded up to a bucket, and an
elementwise op compiles one program per bucket instead of one per shape. Nothing a user can
observe sees the padding: values, numel, views, host copies, storage sizes, resize_/set_/
as_strided, serialization and the memory counters all match the CPU (or the unbucketed
accounting). The variable is read once per process, so each test runs a fresh interpreter with
it set (smallest bucket 16 elements, so small tensors cross several bucket boundaries).
"""

from __future__ import annotations

import json

PRELUDE = """
import json, io, re, torch, torchtpu
torch.tpu.init()
assert torchtpu._C._size_buckets(), "size buckets are off"
torch.manual_seed(0)
failures = []
def same(name, got, want, exact=True):
    got = got.cpu() if isinstance(got, torch.Tensor) else got
    if isinstance(want, torch.Tensor):
        ok = (got.shape == want.shape and got.dtype == want.dtype and
              (torch.equal(got, want) if exact else torch.allclose(got, want, equal_nan=True)))
    else:
        ok = got == want
    if not ok:
        failures.append(f"{name}: got {got!r} want {want!r}")
def compiled():
    return torchtpu.metrics()["programs_compiled"]
"""

SIZES = "(1, 5, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100)"


def run(run_python, body: str, **env) -> dict:
    code = PRELUDE + body + "\nprint('RESULT ' + json.dumps({'failures': failures, **extra}))\n"
    # Every size runs size-generic programs unless a test says otherwise (the small-call fast
    # path would otherwise give results under 64 elements, and strided ones under 1024, exact
    # programs).
    # A None value leaves the variable unset (its default).
    env = {"TORCHTPU_SIZE_GENERIC_MIN_ELEMENTS": "1", "TORCHTPU_SIZE_GENERIC_VIEW_MIN_ELEMENTS": "1",
           **env}
    env = {k: v for k, v in env.items() if v is not None}
    r = run_python(code, timeout=600, TORCHTPU_SIZE_BUCKETS="1", TORCHTPU_SIZE_BUCKET_MIN="16",
                   TORCHTPU_CACHE="0", **env)
    line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT "):])
    assert result["failures"] == [], "\n".join(result["failures"])
    return result


def test_elementwise_across_bucket_boundaries_matches_cpu(run_python):
    """Unary, binary, scalar, comparison, cast and in-place ops on sizes on both sides of bucket
    boundaries give the CPU's values, shapes and dtypes; sizes within one bucket share one
    program per op (the second size of a bucket compiles nothing)."""
    result = run(run_python, f"""
extra = {{}}
ops = {{
    "add": lambda a, b: a + b,
    "mul_scalar": lambda a, b: a * 2.5,
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=3),
    "div": lambda a, b: a / (b.abs() + 1),
    "pow": lambda a, b: a.abs() ** 1.5,
    "neg_exp": lambda a, b: torch.exp(-a),
    "sin": lambda a, b: torch.sin(a),
    "silu": lambda a, b: torch.nn.functional.silu(a),
    "gt": lambda a, b: a > b,
    "where": lambda a, b: torch.where(a > 0, a, b),
    "to_int": lambda a, b: (a * 10).to(torch.int32),
    "clone": lambda a, b: a.clone(),
    "broadcast_0d": lambda a, b: a * b.sum(),
    "int_plus_float": lambda a, b: (a * 10).to(torch.int64) + 0.5,
}}
for n in {SIZES}:
    a, b = torch.randn(n), torch.randn(n)
    ta, tb = a.to("tpu"), b.to("tpu")
    for name, f in ops.items():
        same(f"{{name}}[{{n}}]", f(ta, tb), f(a, b), exact=False)
    # In place, on a 2-d shape too.
    c = a.clone(); tc = ta.clone()
    c.mul_(b).add_(1.0); tc.mul_(tb).add_(1.0)
    same(f"inplace[{{n}}]", tc, c, exact=False)
    m = torch.randn(n, 3); tm = m.to("tpu")
    same(f"2d[{{n}}]", (tm * 2).sigmoid(), (m * 2).sigmoid(), exact=False)
    same(f"numel[{{n}}]", ta.numel(), n)
# Sizes of one bucket share programs: 17..32 is one bucket above the smallest (16).
x = torch.randn(20).to("tpu"); y = torch.randn(20).to("tpu")
(x * y + 1).sin().cpu()
before = compiled()
for n in (21, 25, 30, 32):
    x = torch.randn(n).to("tpu"); y = torch.randn(n).to("tpu")
    (x * y + 1).sin().cpu()
extra["compiles_within_bucket"] = compiled() - before
""")
    assert result["compiles_within_bucket"] == 0


def test_views_and_storage_facts_see_no_padding(run_python):
    """Views, in-place writes through views, as_strided, set_, resize_, untyped storage sizes,
    host copies and torch.save/load of bucketed storages match the CPU exactly."""
    run(run_python, r"""
extra = {}
for n in (5, 16, 17, 40, 100):
    base = torch.arange(n * 2, dtype=torch.float32)
    t = base.to("tpu")
    same(f"storage_nbytes[{n}]", t.untyped_storage().nbytes(), base.untyped_storage().nbytes())
    same(f"storage_size[{n}]", t.untyped_storage().size(), base.untyped_storage().size())
    same(f"host_copy[{n}]", t.cpu(), base)
    same(f"numpy[{n}]", torch.from_numpy(t.cpu().numpy()), base)
    # Views and in-place writes through them.
    v, tv = base[1::2], t[1::2]
    same(f"strided_view[{n}]", tv, v)
    v.mul_(3); tv.mul_(3)
    same(f"write_through_view[{n}]", t, base)
    r, tr = base.view(2, n)[:, 1:], t.view(2, n)[:, 1:]
    r.add_(r.t().t()); tr.add_(tr.t().t())
    same(f"write_2d_view[{n}]", t, base)
    s, ts = base.as_strided((n // 2 + 1,), (2,), 1), t.as_strided((n // 2 + 1,), (2,), 1)
    same(f"as_strided[{n}]", ts, s)
    ts.fill_(-1.0); s.fill_(-1.0)
    same(f"as_strided_fill[{n}]", t, base)
    # The last element of the storage, via its offset.
    same(f"last[{n}]", t[-1], base[-1])
    same(f"item[{n}]", t[-1].item(), base[-1].item())
    # resize_: growing keeps the old elements in front.
    g, tg = base.clone(), t.clone()
    g.resize_(n * 3); tg.resize_(n * 3)
    same(f"resize_keep[{n}]", tg[: n * 2], g[: n * 2])
    same(f"resize_nbytes[{n}]", tg.untyped_storage().nbytes(), g.untyped_storage().nbytes())
    tg.fill_(2.0); g.fill_(2.0)
    same(f"resize_fill[{n}]", tg, g)
    # set_: a tensor over another's storage.
    e, te = torch.empty(0), torch.empty(0, device="tpu")
    e.set_(base.untyped_storage(), 1, (n,), (2,))
    te.set_(t.untyped_storage(), 1, (n,), (2,))
    same(f"set_[{n}]", te, e)
    # Serialization: the storage travels with its own size.
    buf = io.BytesIO(); torch.save({"t": t, "v": tv}, buf); buf.seek(0)
    loaded = torch.load(buf, map_location="cpu")
    same(f"save_load[{n}]", loaded["t"], base)
    same(f"save_load_view[{n}]", loaded["v"], base[1::2])
    same(f"save_load_storage[{n}]", loaded["t"].untyped_storage().nbytes(),
         base.untyped_storage().nbytes())
    buf.seek(0)
    back = torch.load(buf, map_location="tpu")
    same(f"load_to_tpu[{n}]", back["t"] + 1, base + 1)
    # DLPack of the host copy (tpu tensors have no host memory to share).
    same(f"dlpack[{n}]", torch.from_dlpack(t.cpu()), base)
    same(f"repr[{n}]", repr(t.cpu()), repr(base))
    printed = re.sub(r",\s*device='tpu:0'", "", str(t))
    same(f"str_tpu[{n}]", printed, str(base))
""")


def test_reductions_and_other_ops_on_bucketed_storages(run_python):
    """Reductions, softmax, cumulative ops, cat, matmul and indexing read exactly the logical
    elements of bucketed storages (the padding past them never enters a sum, max or product)."""
    run(run_python, """
extra = {}
for n in (3, 16, 17, 33, 70):
    a = torch.randn(n, 4) + 5  # padding zeros must not win a min or join a product
    ta = a.to("tpu")
    same(f"sum[{n}]", ta.sum(), a.sum(), exact=False)
    same(f"sum_dim0[{n}]", ta.sum(0), a.sum(0), exact=False)
    same(f"mean_last[{n}]", ta.mean(-1), a.mean(-1), exact=False)
    same(f"min[{n}]", ta.min(), a.min())
    same(f"prod[{n}]", (ta / 5).prod(), (a / 5).prod(), exact=False)
    same(f"amax[{n}]", ta.amax(0), a.amax(0))
    same(f"softmax[{n}]", ta.softmax(-1), a.softmax(-1), exact=False)
    same(f"log_softmax[{n}]", ta.log_softmax(0), a.log_softmax(0), exact=False)
    same(f"cumsum[{n}]", ta.cumsum(0), a.cumsum(0), exact=False)
    same(f"cat[{n}]", torch.cat([ta, ta * 2], 0), torch.cat([a, a * 2], 0), exact=False)
    same(f"mm[{n}]", ta @ ta.t(), a @ a.t(), exact=False)
    same(f"index[{n}]", ta[torch.tensor([0, n - 1]).to("tpu")], a[torch.tensor([0, n - 1])])
    same(f"argmax[{n}]", ta.view(-1).argmax(), a.view(-1).argmax())
    same(f"any[{n}]", (ta < 4.9).any(), (a < 4.9).any())
    same(f"all[{n}]", (ta > 0).all(), (a > 0).all())
""")


def test_memory_stats_report_padding(run_python):
    """memory_allocated counts the storages' own bytes, as without buckets; memory_stats adds the
    device buffers' bytes and the padding between them."""
    result = run(run_python, """
extra = {}
before = torch.tpu.memory_stats()
x = torch.ones(17, device="tpu")  # 68 bytes in a 32-element (128-byte) bucket
after = torch.tpu.memory_stats()
extra["allocated"] = after["allocated_bytes.all.current"] - before["allocated_bytes.all.current"]
extra["bucketed"] = after["bucketed_bytes.all.current"] - before["bucketed_bytes.all.current"]
extra["padding"] = after["padding_bytes.all.current"] - before["padding_bytes.all.current"]
extra["memory_allocated"] = torch.tpu.memory_allocated()
del x
extra["after_free"] = torch.tpu.memory_stats()["bucketed_bytes.all.current"]
""")
    assert result["allocated"] == 68
    assert result["bucketed"] == 128
    assert result["padding"] == 60
    assert result["memory_allocated"] == 68
    assert result["after_free"] == 0


def test_values_stay_runtime_in_generic_programs(run_python):
    """A generic program keeps scalars and positions as runtime values: a loop over changing
    values and one-element positions compiles once per op and bucket."""
    result = run(run_python, """
extra = {}
x = torch.randn(40).to("tpu")
pos = torch.randn(8).to("tpu")
(x * 1.0 + pos[0]).cpu()
before = compiled()
want = []
got = []
for i in range(1, 8):
    got.append((x * (i / 3) + pos[i]).cpu())
    want.append(x.cpu() * (i / 3) + pos.cpu()[i])
for i, (g, w) in enumerate(zip(got, want)):
    same(f"loop[{i}]", g, w, exact=False)
extra["compiles"] = compiled() - before
""")
    assert result["compiles"] == 0


def test_small_calls_run_exact_programs_below_the_thresholds(run_python):
    """The small-call fast path: elementwise results under TORCHTPU_SIZE_GENERIC_MIN_ELEMENTS
    (default 64) run exact programs (one per shape: a one-element add does not compute a whole
    bucket), larger ones share their bucket's generic program; results over strided views under
    TORCHTPU_SIZE_GENERIC_VIEW_MIN_ELEMENTS (default 1024) run exact ones too. Values match the CPU on both
    sides of each threshold."""
    body = f"""
extra = {{}}
for n in {SIZES} + (127, 128, 129, 200):
    a, b = torch.randn(n), torch.randn(n)
    ta, tb = a.to("tpu"), b.to("tpu")
    same(f"add[{{n}}]", ta + tb * 2, a + b * 2, exact=False)
    m, v = torch.randn(n, 6), torch.randn(n, 3)
    tm, tv = m.to("tpu"), v.to("tpu")
    same(f"view_add[{{n}}]", tm[:, 1:4] + tv, m[:, 1:4] + v, exact=False)
    m[:, ::2].mul_(v); tm[:, ::2].mul_(tv)
    same(f"view_mul_[{{n}}]", tm, m, exact=False)
def compiles_for(sizes, f):
    before = compiled()
    for n in sizes:
        x = torch.randn(n).to("tpu")
        f(x).cpu()
    return compiled() - before
# Under 64: one program per size. Above, within a bucket (129..256 with the smallest at 16):
# the first compiles, the rest share it.
extra["small"] = compiles_for((40, 41, 42), lambda x: x.cos() * 3)
extra["large"] = compiles_for((140, 150, 160), lambda x: x.cos() * 3)
extra["small_views"] = compiles_for((200, 202, 204), lambda x: x[::2].cos() * 3)
"""
    default = run(run_python, body, TORCHTPU_SIZE_GENERIC_MIN_ELEMENTS="64",
                  TORCHTPU_SIZE_GENERIC_VIEW_MIN_ELEMENTS="1")
    # cos and the scalar mul: two programs per small size. Above: one cos program for the whole
    # bucket (the loop already compiled its mul).
    assert default["small"] == 6 and default["large"] == 1, default
    # cos of 100..102 strided elements of storages of one bucket: one generic program (the mul
    # of its contiguous result was compiled by the loop).
    assert default["small_views"] == 1, default
    # The defaults (64, 1024): strided results under 1024 elements run an exact cos per size;
    # the mul of their contiguous results stays generic.
    views = run(run_python, body, TORCHTPU_SIZE_GENERIC_MIN_ELEMENTS=None,
                TORCHTPU_SIZE_GENERIC_VIEW_MIN_ELEMENTS=None)
    assert views["large"] == 1 and views["small_views"] == 3, views
