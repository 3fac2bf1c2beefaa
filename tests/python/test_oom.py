"""An allocation the device cannot hold raises torch.OutOfMemoryError at the call, as on CUDA
(the CPU raises a RuntimeError there too), naming the size and the device; storage is lazy on
tpu, so without the check the failure only surfaced at the first use. The process stays usable."""

from __future__ import annotations

import re

import pytest
import torch

import torchtpu  # noqa: F401

HUGE = 2**50  # elements: 4 PiB of float32, more than any device or host holds


def test_cpu_also_refuses_at_the_call():
    with pytest.raises(RuntimeError, match="allocate 4503599627370496 bytes"):
        torch.empty(HUGE)


@pytest.mark.parametrize("make", [
    lambda d: torch.empty(HUGE, device=d),
    lambda d: torch.empty(2**25, 2**25, device=d),
    lambda d: torch.zeros(HUGE, device=d),
    lambda d: torch.ones(2**40, 2**10, dtype=torch.int8, device=d),
    lambda d: torch.tensor([1.0], device=d).new_empty(HUGE),
    lambda d: torch.empty_strided((HUGE,), (1,), device=d),
], ids=["empty", "empty_2d", "zeros", "ones_int8", "new_empty", "empty_strided"])
def test_huge_allocation_raises_out_of_memory_at_the_call(make):
    with pytest.raises(torch.OutOfMemoryError) as info:
        make("tpu")
    msg = str(info.value)
    assert "out of memory" in msg and "tpu:0" in msg
    nbytes = int(re.search(r"\((\d+) bytes\)", msg).group(1))
    assert nbytes >= 2**50
    # Still usable afterwards.
    x = torch.arange(4.0, device="tpu")
    assert (x * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_error_names_the_device_it_was_asked_for():
    with pytest.raises(torch.OutOfMemoryError, match=r"on tpu:1\b"):
        torch.empty(HUGE, device="tpu:1")
    with torch.tpu.device(2):
        with pytest.raises(torch.OutOfMemoryError, match=r"on tpu:2\b"):
            torch.empty(HUGE, device="tpu")


def test_out_of_memory_error_is_a_runtime_error():
    # Code written for CUDA catches either.
    with pytest.raises(RuntimeError):
        torch.empty(HUGE, device="tpu")


def test_allocations_that_fit_are_not_refused():
    x = torch.empty(2**28, dtype=torch.int8, device="tpu")  # 256 MiB, lazily materialized
    assert x.shape == (2**28,)
    y = torch.zeros(3, device="tpu")
    assert y.cpu().tolist() == [0.0, 0.0, 0.0]
