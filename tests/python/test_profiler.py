"""torch.profiler on tpu: the tpu activity profiler (PyTorch's PrivateUse1 Kineto registry)
records one device activity per executed program, linked to the CPU op that launched it, and
host-side compiles, copies, syncs and CPU fallbacks beside the ops. Values are checked against
CPU; times only for consistency (non-negative, inside the profiled window), never for speed."""

from __future__ import annotations

import glob
import json
import os
import warnings

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function
from torch.testing import assert_close

import torchtpu
import torchtpu.profiler

TPU_ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]

# An op with a CPU kernel and no lowering: on tpu tensors it always takes the CPU fallback.
_lib = torch.library.Library("torchtpu_test_profiler", "DEF")
_lib.define("triple(Tensor x) -> Tensor")
_lib.impl("triple", lambda x: x * 3, "CPU")


def device_events(prof):
    events = prof.events() if hasattr(prof, "events") else prof.function_events
    return [e for e in events if e.device_type == DeviceType.PrivateUse1]


def cpu_events(prof, name):
    return [e for e in prof.events() if e.device_type == DeviceType.CPU and e.name == name]


def window(prof):
    cpu = [e for e in prof.events() if e.device_type == DeviceType.CPU]
    return min(e.time_range.start for e in cpu), max(e.time_range.end for e in cpu)


def test_tpu_activity_profiler_is_registered():
    assert torchtpu.profiler.is_available()
    assert ProfilerActivity.PrivateUse1 in torch.profiler.supported_activities()


def test_eager_ops_get_one_device_activity_each_linked_to_their_op():
    a = torch.randn(32, 32)
    b = torch.randn(32, 32)
    x, y = a.to("tpu"), b.to("tpu")
    torch.relu(x @ y + 1).cpu()  # compiled outside the profile
    with profile(activities=TPU_ACTIVITIES) as prof:
        out = torch.relu(x @ y + 1)
        torch.tpu.synchronize()
    assert_close(out.cpu(), torch.relu(a @ b + 1))

    dev = device_events(prof)
    names = [e.name for e in dev]
    for name in ("aten::mm", "aten::add.Tensor", "aten::relu"):
        assert names.count(name) == 1, names
    start, end = window(prof)
    # The host-side tpu:: events carry the id of the op they belong to: map ids to the ops.
    ids = {e.id: e for e in prof.events()
           if e.device_type == DeviceType.CPU and not e.name.startswith("tpu::")}
    for e in dev:
        assert e.device_index == 0
        assert e.time_range.end >= e.time_range.start
        assert start <= e.time_range.start and e.time_range.end <= end + 1
        if e.name.startswith("aten::"):
            # Linked to the CPU op that launched it: same op, and that op lists it as its kernel.
            op = ids[e.linked_correlation_id]
            assert e.name.startswith(op.name), (e.name, op.name)
            assert e.name in [k.name for k in op.kernels]
    # Each launch also shows as a host-side event under its op.
    assert len(cpu_events(prof, "tpu::launch")) == 3


def test_key_averages_shows_device_time_per_op():
    x = torch.randn(64, 64, device="tpu")
    (x @ x).cpu()
    with profile(activities=TPU_ACTIVITIES) as prof:
        for _ in range(3):
            y = x @ x
        torch.tpu.synchronize()
    rows = {r.key: r for r in prof.key_averages()}
    assert rows["aten::mm"].count == 3
    assert rows["aten::mm"].device_time_total > 0
    table = prof.key_averages().table(sort_by="device_time_total", row_limit=10)
    assert "aten::mm" in table and "TPU" in table
    assert_close(y.cpu(), x.cpu() @ x.cpu())


def test_compiled_graph_is_one_device_activity():
    def f(a, b):
        return torch.tanh(a @ b) * 2 + b

    compiled = torch.compile(f, backend="tpu")
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    x, y = a.to("tpu"), b.to("tpu")
    compiled(x, y)  # compiles outside the profile
    with profile(activities=TPU_ACTIVITIES) as prof:
        out = compiled(x, y)
        torch.tpu.synchronize()
    assert_close(out.cpu(), f(a, b))
    graphs = [e for e in device_events(prof) if e.name.startswith("graph ")]
    assert len(graphs) == 1, [e.name for e in device_events(prof)]
    assert not [e for e in device_events(prof) if e.name in ("aten::mm", "aten::tanh")]
    start, end = window(prof)
    g = graphs[0]
    assert start <= g.time_range.start <= g.time_range.end <= end + 1
    assert not cpu_events(prof, "tpu::compile")  # the second call compiled nothing


def test_compiles_copies_syncs_and_fallbacks_are_annotated(tmp_path):
    host = torch.randn(7, 7)
    with profile(activities=TPU_ACTIVITIES) as prof:
        x = host.to("tpu")  # host -> device, 196 bytes
        # A signature no other test compiles: under TORCHTPU_SIZE_GENERIC_MIN_ELEMENTS (64)
        # elements, so size buckets leave it an exact program of its own.
        y = torch.atan(x * 3.25 + 0.5)
        torch.tpu.synchronize()
        back = y.cpu()  # device -> host
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the once-per-op fallback warning
            tripled = torch.ops.torchtpu_test_profiler.triple(x)  # no lowering: CPU fallback
    assert_close(back, torch.atan(host * 3.25 + 0.5))
    assert_close(tripled.cpu(), host * 3)
    assert cpu_events(prof, "tpu::compile")
    assert cpu_events(prof, "tpu::synchronize")
    assert cpu_events(prof, "tpu::cpu_fallback")
    copies = {e.name for e in device_events(prof)}
    assert {"tpu::copy_h2d", "tpu::copy_d2h"} <= copies

    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    h2d = [e for e in events if e.get("name") == "tpu::copy_h2d" and e.get("args", {}).get("bytes")]
    assert any(e["args"]["bytes"] == 7 * 7 * 4 for e in h2d)
    compiles = [e for e in events if e.get("name") == "tpu::compile"]
    assert any("aten::atan" in e["args"].get("program", "") for e in compiles)
    assert all("cache" in e["args"]["program"] or "compiled" in e["args"]["program"]
               for e in compiles)
    fallback = [e for e in events if e.get("name") == "tpu::cpu_fallback"]
    assert any("torchtpu_test_profiler::triple" in e["args"].get("op", "") for e in fallback)


def test_chrome_trace_has_a_tpu_track_and_record_function_ranges(tmp_path):
    x = torch.randn(16, 16, device="tpu")
    torch.sin(x).cpu()
    with profile(activities=TPU_ACTIVITIES) as prof:
        with record_function("my_region"):
            y = torch.sin(x)
        torch.tpu.synchronize()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    region = [e for e in events if e.get("name") == "my_region" and e.get("ph") == "X"]
    assert len(region) == 1
    kernel = [e for e in events if e.get("name") == "aten::sin" and e.get("cat") == "kernel"]
    assert len(kernel) == 1
    # The device activity sits on its own process row (the tpu track), not the host's.
    host_pid = region[0]["pid"]
    assert kernel[0]["pid"] != host_pid
    assert kernel[0]["dur"] >= 0
    # The launch (inside the region on the host) is linked to it by a flow arrow.
    launch = [e for e in events if e.get("name") == "tpu::launch" and e.get("ph") == "X"]
    assert launch and region[0]["ts"] <= launch[0]["ts"] <= region[0]["ts"] + region[0]["dur"]
    flows = [e for e in events if e.get("ph") in ("s", "f") and e.get("cat") == "ac2g"]
    assert len(flows) >= 2
    assert_close(y.cpu(), torch.sin(x.cpu()))


def test_tensorboard_trace_handler_writes_a_trace_with_tpu_events(tmp_path):
    x = torch.randn(8, 8, device="tpu")
    (x * 2).cpu()
    with profile(
        activities=TPU_ACTIVITIES,
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(tmp_path)),
    ) as prof:
        for _ in range(2):
            y = x * 2
            torch.tpu.synchronize()
            prof.step()
    files = glob.glob(os.path.join(str(tmp_path), "*.pt.trace.json"))
    assert len(files) == 1
    events = json.load(open(files[0]))["traceEvents"]
    assert [e for e in events if e.get("name") == "aten::mul.Tensor" and e.get("cat") == "kernel"]
    assert_close(y.cpu(), x.cpu() * 2)


def test_cpu_only_profile_records_no_device_activity():
    x = torch.randn(8, 8, device="tpu")
    (x + 1).cpu()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (x + 1).cpu()
    assert not device_events(prof)
    assert cpu_events(prof, "aten::add")


def test_legacy_profiler_with_use_device_tpu():
    x = torch.randn(8, 8, device="tpu")
    torch.exp(x).cpu()
    with torch.autograd.profiler.profile(use_device="tpu", use_kineto=True) as prof:
        y = torch.exp(x)
        torch.tpu.synchronize()
    assert [e for e in device_events(prof) if e.name == "aten::exp"]
    assert_close(y.cpu(), torch.exp(x.cpu()))


def test_profiling_work_on_another_device_and_thread_is_attributed():
    import threading

    a = torch.randn(8, 8)
    results = {}

    def work():
        x = a.to("tpu:1")
        results["y"] = torch.cos(x)
        torch.tpu.synchronize()

    torch.cos(a.to("tpu:1")).cpu()
    with profile(activities=TPU_ACTIVITIES) as prof:
        t = threading.Thread(target=work)
        t.start()
        t.join()
    cos = [e for e in device_events(prof) if e.name == "aten::cos"]
    assert len(cos) == 1 and cos[0].device_index == 1
    assert_close(results["y"].cpu(), torch.cos(a))
