"""torch.tpu's memory functions, with the names and keys frameworks read from torch.cuda."""

from __future__ import annotations

import torch


def test_memory_stats_track_allocations_with_pytorch_keys():
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    x = torch.ones(1024, 256, device="tpu")  # 1 MiB of float32
    stats = torch.tpu.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
                "reserved_bytes.all.current", "reserved_bytes.all.peak",
                "active_bytes.all.peak", "num_alloc_retries", "num_ooms"):
        assert key in stats, key
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated() >= before + 2**20
    assert stats["allocated_bytes.all.peak"] >= stats["allocated_bytes.all.current"]
    assert torch.tpu.memory_reserved() == torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_reserved() == torch.tpu.max_memory_allocated()
    assert stats["num_alloc_retries"] == 0 and stats["num_ooms"] == 0
    peak = torch.tpu.max_memory_allocated()
    del x
    assert torch.tpu.memory_allocated() <= peak - 2**20
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()
    assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated()


def test_device_properties_and_mem_get_info():
    free, total = torch.tpu.mem_get_info()
    assert 0 < free <= total
    props = torch.tpu.get_device_properties(0)
    assert props.total_memory == total
    assert props.name == torch.tpu.get_device_name(0)
    assert torch.tpu.get_device_properties(torch.device("tpu", 1)).index == 1
    try:
        torch.tpu.get_device_properties(torch.tpu.device_count())
    except RuntimeError as e:
        assert "Invalid device index" in str(e)
    else:
        raise AssertionError("an out-of-range device index did not raise")
