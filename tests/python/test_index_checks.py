"""Out-of-range indices raise on tpu as on the CPU, never a silently wrong result.

XLA clamps gather indices and drops out-of-range scatter updates, so every program that
indexes also computes a check flag; the next sync of the device (item(), cpu(), synchronize(),
an event wait) raises the CPU kernel's error naming the op, and the process stays usable. With
TPU_LAUNCH_BLOCKING=1 the error comes at the op itself, and torch.compile(backend="tpu") graphs
carry the same checks. Each case here is run on the CPU first: the tpu must raise the same
exception type (and the CPU's wording where a regex is given)."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torchtpu

BAD = [1, 10]  # 10 is past every size-5 dim below


def _setitem(x, i, v):
    y = x.clone()
    y[i] = v
    return y


# name -> (inputs (CPU tensors), fn(*inputs), regex both the CPU's and the tpu's message match)
CASES = {
    "index": ((torch.arange(5.0), torch.tensor(BAD)), lambda x, i: x[i],
              "index 10 is out of bounds for dimension 0 with size 5"),
    "index_negative": ((torch.arange(5.0), torch.tensor([-6])), lambda x, i: x[i],
                       "index -6 is out of bounds for dimension 0 with size 5"),
    "index_second_dim": ((torch.zeros(3, 4), torch.tensor([5])), lambda x, i: x[:, i],
                         "index 5 is out of bounds for dimension . with size 4"),
    "gather": ((torch.arange(5.0), torch.tensor(BAD)), lambda x, i: x.gather(0, i),
               "index 10 is out of bounds for dimension 0 with size 5"),
    "gather_negative": ((torch.arange(5.0), torch.tensor([-1])), lambda x, i: x.gather(0, i),
                        "index -1 is out of bounds for dimension 0 with size 5"),
    "index_select": ((torch.arange(5.0), torch.tensor(BAD)), lambda x, i: x.index_select(0, i),
                     "index out of range in self"),
    "embedding": ((torch.randn(5, 3), torch.tensor(BAD)), lambda w, i: F.embedding(i, w),
                  "index out of range in self"),
    "embedding_negative": ((torch.randn(5, 3), torch.tensor([-1])),
                           lambda w, i: F.embedding(i, w), "index out of range in self"),
    "embedding_bag": ((torch.randn(5, 3), torch.tensor(BAD), torch.tensor([0])),
                      lambda w, i, o: F.embedding_bag(i, w, o),
                      "takes value 10 which is not in the valid range \\[0, 5\\)"),
    "scatter": ((torch.zeros(5), torch.tensor(BAD), torch.ones(2)),
                lambda x, i, s: x.scatter(0, i, s),
                "index 10 is out of bounds for dimension 0 with size 5"),
    "scatter_value": ((torch.zeros(5), torch.tensor(BAD)), lambda x, i: x.scatter(0, i, 2.0),
                      "index 10 is out of bounds for dimension 0 with size 5"),
    "scatter_add": ((torch.zeros(5), torch.tensor(BAD), torch.ones(2)),
                    lambda x, i, s: x.scatter_add(0, i, s),
                    "index 10 is out of bounds for dimension 0 with size 5"),
    "scatter_reduce": ((torch.zeros(5), torch.tensor(BAD), torch.ones(2)),
                       lambda x, i, s: x.scatter_reduce(0, i, s, "amax"),
                       "index 10 is out of bounds for dimension 0 with size 5"),
    "setitem": ((torch.zeros(5), torch.tensor(BAD), torch.ones(2)), _setitem,
                "index 10 is out of bounds for dimension 0 with size 5"),
    "index_put_accumulate": ((torch.zeros(5), torch.tensor(BAD), torch.ones(2)),
                             lambda x, i, v: x.clone().index_put_((i,), v, accumulate=True),
                             "index 10 is out of bounds for dimension 0 with size 5"),
    "index_add": ((torch.zeros(5), torch.tensor(BAD), torch.ones(2)),
                  lambda x, i, s: x.index_add(0, i, s), "index out of range in self"),
    "index_add_negative": ((torch.zeros(5), torch.tensor([-1]), torch.ones(1)),
                           lambda x, i, s: x.index_add(0, i, s), "index out of range in self"),
    "index_copy": ((torch.zeros(5), torch.tensor(BAD), torch.ones(2)),
                   lambda x, i, s: x.index_copy(0, i, s),
                   "index 10 is out of bounds for dimension 0 with size 5"),
    "index_fill": ((torch.zeros(5), torch.tensor(BAD)), lambda x, i: x.index_fill(0, i, 1.0),
                   "index 10 is out of bounds for dimension 0 with size 5"),
    "take": ((torch.arange(5.0), torch.tensor(BAD)), lambda x, i: x.take(i),
             "out of range: tried to access index 10 on a tensor of 5 elements"),
    "put": ((torch.zeros(5), torch.tensor(BAD), torch.ones(2)), lambda x, i, s: x.put(i, s),
            "out of range: tried to access index 10 on a tensor of 5 elements"),
    "nll_loss": ((torch.randn(2, 5), torch.tensor(BAD)), lambda x, t: F.nll_loss(x, t),
                 "Target 10 is out of bounds"),
    "nll_loss_negative": ((torch.randn(2, 5), torch.tensor([1, -1])),
                          lambda x, t: F.nll_loss(x, t), "Target -1 is out of bounds"),
    "cross_entropy": ((torch.randn(2, 5), torch.tensor(BAD)), lambda x, t: F.cross_entropy(x, t),
                      "Target 10 is out of bounds"),
    "nll_loss2d": ((torch.randn(1, 5, 2, 2), torch.full((1, 2, 2), 7)),
                   lambda x, t: F.nll_loss(x, t), "Target 7 is out of bounds"),
    "one_hot": ((torch.tensor(BAD),), lambda i: F.one_hot(i, 5), None),
    "max_unpool2d": ((torch.ones(1, 1, 2, 2), torch.tensor([[[[0, 1], [2, 100]]]])),
                     lambda x, i: F.max_unpool2d(x, i, 2),
                     "Found an invalid max index: 100 \\(output volumes are of size 4x4\\)"),
    "masked_scatter": ((torch.zeros(5), torch.ones(5, dtype=torch.bool), torch.ones(2)),
                       lambda x, m, s: x.masked_scatter(m, s),
                       "Number of elements of source < number of ones in mask"),
}


def cpu_error(name):
    inputs, fn, _ = CASES[name]
    with pytest.raises(Exception) as info:
        fn(*inputs)
    return type(info.value)


def on_tpu(inputs):
    return [t.to("tpu") for t in inputs]


def fixed_inputs(inputs):
    """The same inputs with every index made valid (modulo the sizes used above)."""
    return [t.remainder(4) if t.dtype == torch.long and t.dim() < 4 else t for t in inputs]


def assert_usable():
    """After an error the device still computes right: a checked op with good indices."""
    x = torch.arange(5.0)
    i = torch.tensor([4, 0, 2])
    assert_close(x.to("tpu").gather(0, i.to("tpu")).cpu(), x.gather(0, i))
    assert torchtpu._C._deferred_check_count() == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_out_of_range_raises_at_the_next_sync(name):
    inputs, fn, match = CASES[name]
    expected = cpu_error(name)
    torch.tpu.synchronize()
    result = fn(*on_tpu(inputs))  # asynchronous: nothing has been read yet
    with pytest.raises(expected, match=match) as info:
        result.cpu() if isinstance(result, torch.Tensor) else result[0].cpu()
    if name != "one_hot":  # one_hot's check is the scatter's (as on CUDA)
        assert "on tpu" in str(info.value)
    assert_usable()


@pytest.mark.parametrize("name", ["index", "gather", "embedding", "scatter_add", "nll_loss"])
def test_valid_indices_match_cpu(name):
    inputs, fn, _ = CASES[name]
    good = fixed_inputs(inputs)
    assert_close(fn(*on_tpu(good)).cpu(), fn(*good))


def test_every_sync_point_raises():
    x = torch.arange(5.0, device="tpu")
    bad = torch.tensor(BAD, device="tpu")
    x.gather(0, bad)
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.tpu.synchronize()
    y = x.gather(0, bad).sum()
    with pytest.raises(RuntimeError, match="out of bounds"):
        y.item()
    x.gather(0, bad)
    event = torch.tpu.Event()
    event.record()
    with pytest.raises(RuntimeError, match="out of bounds"):
        event.synchronize()
    assert_usable()


def test_in_place_write_with_bad_index_then_good_one():
    x = torch.zeros(5, device="tpu")
    x[torch.tensor(BAD, device="tpu")] = 1.0
    with pytest.raises(IndexError, match="index 10 is out of bounds"):
        x.cpu()
    x[torch.tensor([1, 3], device="tpu")] = 2.0
    assert_close(x.cpu()[[1, 3]], torch.tensor([2.0, 2.0]))


def test_ignore_index_is_not_an_error():
    x, t = torch.randn(3, 5), torch.tensor([1, -100, 4])
    assert_close(F.cross_entropy(x.to("tpu"), t.to("tpu")).cpu(), F.cross_entropy(x, t))
    t2 = torch.tensor([1, 7, 4])
    assert_close(F.nll_loss(x.to("tpu"), t2.to("tpu"), ignore_index=7).cpu(),
                 F.nll_loss(x, t2, ignore_index=7))


def test_negative_indices_where_the_cpu_allows_them():
    x = torch.arange(5.0)
    i = torch.tensor([-1, -5])
    assert_close(x.to("tpu")[i.to("tpu")].cpu(), x[i])
    assert_close(x.to("tpu").take(i.to("tpu")).cpu(), x.take(i))
    assert_close(x.to("tpu").index_fill(0, i.to("tpu"), 9.0).cpu(), x.index_fill(0, i, 9.0))


def test_checks_do_not_pile_up_without_a_sync():
    x = torch.arange(5.0, device="tpu")
    i = torch.tensor([0, 4], device="tpu")
    for _ in range(1500):
        x.gather(0, i)
    assert torchtpu._C._deferred_check_count() <= 512
    torch.tpu.synchronize()
    assert torchtpu._C._deferred_check_count() == 0


def test_a_bad_index_found_while_trimming_is_raised_at_the_next_sync():
    x = torch.arange(5.0, device="tpu")
    x.gather(0, torch.tensor(BAD, device="tpu"))
    good = torch.tensor([0, 4], device="tpu")
    for _ in range(1200):
        x.gather(0, good)
    with pytest.raises(RuntimeError, match="index 10 is out of bounds"):
        torch.tpu.synchronize()
    assert_usable()


# ------------------------------------------------------------------------------------------
# Host-known indices raise at the call, like the CPU.


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x[7],
        lambda x: x.select(0, 7),
        lambda x: x[torch.ones(3, dtype=torch.bool, device=x.device)],
        lambda x: x.__setitem__(torch.ones(3, dtype=torch.bool, device=x.device), 1.0),
        lambda x: x.view(5, 1)[:, torch.tensor([True, False], device=x.device)],
    ],
    ids=["int", "select", "mask_shape", "mask_shape_setitem", "mask_second_dim"],
)
def test_host_known_index_raises_at_the_call(fn):
    x = torch.arange(5.0)
    with pytest.raises(IndexError) as cpu:
        fn(x)
    with pytest.raises(IndexError) as tpu:
        fn(x.to("tpu"))
    assert str(tpu.value).split("(")[0].strip() == str(cpu.value).split("(")[0].strip()
    assert_usable()


# ------------------------------------------------------------------------------------------
# TPU_LAUNCH_BLOCKING=1: the error comes at the op; torch.compile: the same checks.

_SUBPROCESS = """
import importlib.util, json, torch, torchtpu
spec = importlib.util.spec_from_file_location("cases", {path!r})
t = importlib.util.module_from_spec(spec)
spec.loader.exec_module(t)
out = dict()
for name, (inputs, fn, match) in sorted(t.CASES.items()):
    if {compiled}:
        torch._dynamo.reset()
        fn = torch.compile(fn, backend="tpu")
    args = [x.to("tpu") for x in inputs]
    where = None
    try:
        r = fn(*args)
        where = "sync"
        (r if isinstance(r, torch.Tensor) else r[0]).cpu()
        out[name] = ["none", "", ""]
    except Exception as e:
        out[name] = [type(e).__name__, where or "op", str(e).splitlines()[0]]
    ok = torch.arange(5.0).to("tpu").gather(0, torch.tensor([4, 0]).to("tpu")).cpu()
    assert ok.tolist() == [4.0, 0.0], ok
print("RESULT " + json.dumps(out))
"""


def _results(proc):
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


@pytest.fixture(scope="module")
def blocking_and_compiled(start_python):
    code_b = _SUBPROCESS.format(compiled=False, path=__file__)
    code_c = _SUBPROCESS.format(compiled=True, path=__file__)
    blocking = start_python(code_b, timeout=300, TPU_LAUNCH_BLOCKING="1")
    compiled = start_python(code_c, timeout=600)
    return _results(blocking.wait()), _results(compiled.wait())


@pytest.mark.parametrize("name", sorted(CASES))
def test_launch_blocking_raises_at_the_op(name, blocking_and_compiled):
    kind, where, message = blocking_and_compiled[0][name]
    assert kind == cpu_error(name).__name__, message
    assert where == "op", message
    match = CASES[name][2]
    if match:
        import re

        assert re.search(match, message), message


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_graphs_raise(name, blocking_and_compiled):
    kind, where, message = blocking_and_compiled[1][name]
    assert kind == cpu_error(name).__name__, message


def test_checks_can_be_turned_off(run_python):
    """TORCHTPU_INDEX_CHECKS=0: no flag outputs; an out-of-range gather clamps (XLA's rule)."""
    r = run_python(
        """
        import torch, torchtpu
        x = torch.arange(5.0, device="tpu")
        print(x.gather(0, torch.tensor([1, 10], device="tpu")).cpu().tolist())
        """,
        TORCHTPU_INDEX_CHECKS="0",
    )
    assert r.stdout.strip() == "[1.0, 4.0]"
