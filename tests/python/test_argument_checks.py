"""The argument checks the CPU kernels make, on tpu: distribution parameters, integer powers,
fill values that overflow the dtype, and integer division by zero. Values the host knows
(Python numbers, structural floats) raise at the call; values that live on the device (a std
tensor, a probability tensor, a divisor tensor) raise at the next sync through the device-side
check flags (test_index_checks.py), naming the op. Every case is run on the CPU first: the tpu
raises the same exception type with the CPU's wording."""

import pytest
import torch
from torch.testing import assert_close

import torchtpu


def cpu_raises(fn):
    with pytest.raises(Exception) as info:
        fn("cpu")
    return type(info.value), str(info.value).splitlines()[0]


def assert_usable():
    a = torch.tensor([7, -7])
    assert_close((a.to("tpu") // 2).cpu(), a // 2)
    assert torchtpu._C._deferred_check_count() == 0


# Raised at the call: the value is known on the host.
HOST_CASES = {
    "normal_negative_std": lambda d: torch.zeros(3, device=d).normal_(0.0, -1.0),
    "normal_tensor_mean_negative_std": lambda d: torch.normal(torch.zeros(3, device=d), -2.0),
    "bernoulli_p_above_one": lambda d: torch.zeros(3, device=d).bernoulli_(1.5),
    "bernoulli_p_negative": lambda d: torch.bernoulli(torch.zeros(3, device=d), -0.5),
    "uniform_reversed_range": lambda d: torch.zeros(3, device=d).uniform_(2, 1),
    "pow_negative_int": lambda d: torch.tensor([2], device=d) ** -1,
    "pow_uint8_negative_int": lambda d: torch.tensor([2], dtype=torch.uint8, device=d) ** -1,
    "pow_inplace_negative_int": lambda d: torch.tensor([2], device=d).pow_(-2),
    "full_uint8_overflow": lambda d: torch.full((2,), 300, dtype=torch.uint8, device=d),
    "full_int32_overflow": lambda d: torch.full((2,), 2**31, dtype=torch.int32, device=d),
    "fill_uint8_overflow": lambda d: torch.zeros(2, dtype=torch.uint8, device=d).fill_(256),
    "masked_fill_int8_overflow": lambda d: torch.zeros(2, dtype=torch.int8, device=d).masked_fill(
        torch.tensor([True, False], device=d), 200),
    "floor_divide_by_zero": lambda d: torch.tensor([1], device=d) // 0,
    "remainder_by_zero": lambda d: torch.tensor([1], device=d) % 0,
    "remainder_inplace_by_zero": lambda d: torch.tensor([5, 7], device=d).remainder_(0),
    "fmod_by_zero": lambda d: torch.fmod(torch.tensor([1], device=d), 0),
    "div_trunc_by_zero": lambda d: torch.div(torch.tensor([1], device=d), 0, rounding_mode="trunc"),
    "div_floor_by_zero": lambda d: torch.div(torch.tensor([1], device=d), 0, rounding_mode="floor"),
}


@pytest.mark.parametrize("name", sorted(HOST_CASES))
def test_host_known_argument_raises_at_the_call(name):
    fn = HOST_CASES[name]
    kind, message = cpu_raises(fn)
    with pytest.raises(kind) as info:
        fn("tpu")  # no sync: the check is on the host
    assert str(info.value).splitlines()[0] == message
    assert_usable()


# Raised at the next sync: the value lives on the device.
DEVICE_CASES = {
    "normal_std_tensor": lambda d: torch.normal(torch.zeros(2, device=d),
                                                torch.tensor([1.0, -1.0], device=d)),
    "bernoulli_p_tensor": lambda d: torch.bernoulli(torch.tensor([0.5, 1.5], device=d)),
    "bernoulli_inplace_p_tensor": lambda d: torch.zeros(3, device=d).bernoulli_(
        torch.tensor([0.5, -0.5, 0.0], device=d)),
    "floor_divide_by_zero_tensor": lambda d: torch.tensor([5, 7], device=d) // torch.tensor(
        [2, 0], device=d),
    "remainder_by_zero_tensor": lambda d: torch.tensor([5, 7], device=d) % torch.tensor(
        [2, 0], device=d),
    "remainder_scalar_by_zero_tensor": lambda d: torch.remainder(3, torch.tensor([0], device=d)),
    "fmod_by_zero_tensor": lambda d: torch.fmod(torch.tensor([5], device=d),
                                                torch.tensor([0], device=d)),
    "div_trunc_by_zero_tensor": lambda d: torch.div(torch.tensor([5], device=d),
                                                    torch.tensor([0], device=d),
                                                    rounding_mode="trunc"),
}


@pytest.mark.parametrize("name", sorted(DEVICE_CASES))
def test_device_argument_raises_at_the_next_sync(name):
    fn = DEVICE_CASES[name]
    kind, message = cpu_raises(fn)
    torch.tpu.synchronize()
    r = fn("tpu")
    with pytest.raises(kind) as info:
        r.cpu()
    assert message.split("(")[0].strip() in str(info.value)
    assert "on tpu" in str(info.value)
    assert_usable()


def test_float_division_by_zero_is_not_an_error():
    a = torch.tensor([4.0, -4.0, 0.0])
    assert_close((a.to("tpu") // 0).cpu(), a // 0, equal_nan=True)
    assert_close(torch.div(torch.tensor([4]).to("tpu"), 0).cpu(), torch.div(torch.tensor([4]), 0))


def test_valid_arguments_still_work():
    torchtpu.reset_metrics()
    assert_close((torch.tensor([2, 3], device="tpu") ** 2).cpu(), torch.tensor([4, 9]))
    assert_close(torch.full((2,), 255, dtype=torch.uint8, device="tpu").cpu(),
                 torch.full((2,), 255, dtype=torch.uint8))
    assert_close(torch.full((2,), -1, dtype=torch.uint8, device="tpu").cpu(),
                 torch.full((2,), -1, dtype=torch.uint8))
    a, b = torch.tensor([7, -7, 9]), torch.tensor([2, 3, -4])
    assert_close((a.to("tpu") % b.to("tpu")).cpu(), a % b)
    assert_close(torch.div(a.to("tpu"), b.to("tpu"), rounding_mode="trunc").cpu(),
                 torch.div(a, b, rounding_mode="trunc"))
    p = torch.zeros(1000, device="tpu").bernoulli_(torch.tensor(0.25, device="tpu"))
    assert 150 < p.sum().item() < 350
    assert torch.zeros(1000, device="tpu").normal_(0, 0.0).abs().sum().item() == 0
    m = torch.zeros(3, device="tpu").uniform_(1, 1)
    assert_close(m.cpu(), torch.ones(3))
    assert torchtpu.metrics()["cpu_fallbacks"] == 0


def test_zero_division_in_a_compiled_graph():
    def f(a, b):
        return (a // b) + 1

    g = torch.compile(f, backend="tpu")
    a, b = torch.tensor([5, 7]), torch.tensor([2, 0])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        g(a.to("tpu"), b.to("tpu")).cpu()
    good = torch.tensor([2, 3])
    assert_close(g(a.to("tpu"), good.to("tpu")).cpu(), f(a, good))


# Shapes the CPU's convolution refuses (check_shape_forward): they failed in XLA's compiler on
# tpu ("XLA failed to compile aten::convolution"); now the lowering raises the CPU's message.
CONV_SHAPE_CASES = {
    "conv2d_channels": lambda d: torch.nn.functional.conv2d(
        torch.zeros(2, 3, 5, 5, device=d), torch.zeros(4, 2, 3, 3, device=d)),
    "conv2d_groups_channels": lambda d: torch.nn.functional.conv2d(
        torch.zeros(2, 3, 5, 5, device=d), torch.zeros(4, 2, 3, 3, device=d), groups=2),
    "conv1d_weight_not_divisible": lambda d: torch.nn.functional.conv1d(
        torch.zeros(2, 4, 5, device=d), torch.zeros(3, 2, 3, device=d), groups=2),
    "conv_transpose2d_channels": lambda d: torch.nn.functional.conv_transpose2d(
        torch.zeros(2, 3, 4, 4, device=d), torch.zeros(2, 3, 2, 2, device=d)),
    "conv_transpose3d_channels": lambda d: torch.nn.functional.conv_transpose3d(
        torch.zeros(1, 3, 2, 2, 2, device=d), torch.zeros(2, 3, 2, 2, 2, device=d)),
}


@pytest.mark.parametrize("name", sorted(CONV_SHAPE_CASES))
def test_convolution_shape_mismatch_raises_the_cpu_error(name):
    fn = CONV_SHAPE_CASES[name]
    kind, message = cpu_raises(fn)
    with pytest.raises(kind) as info:
        fn("tpu")
    # A regular convolution's input channels are refused earlier, by PyTorch's meta function
    # (its own wording); everything else by the lowering, in the CPU's words (its doubled
    # brackets included).
    wording = "Invalid channel dimensions" if name.startswith("conv2d") else message
    assert wording in str(info.value)
    assert_usable()
