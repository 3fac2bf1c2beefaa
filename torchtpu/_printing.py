"""Printing a tpu tensor copies it to the host once and formats it there.

PyTorch's formatter runs many small ops on the tensor it prints (slicing the summarized corners,
abs/min/max/ne to pick a number format), each of which would be a device program followed by a
host sync; it copies xla/lazy/ipu/mtia tensors to the CPU first for that reason. tpu tensors get
the same treatment: their contents are formatted from one host copy, and PyTorch still writes the
rest (device, dtype, grad_fn, requires_grad) from the tensor itself.
"""

from __future__ import annotations

import torch
import torch._tensor_str as _tensor_str


def _formats_from_host(t: torch.Tensor) -> bool:
    # Plain tensors and parameters only: a FakeTensor on tpu (Dynamo/AOTAutograd format them in
    # debug logs while tracing) has no data to copy, and other subclasses print themselves.
    return (
        type(t) in (torch.Tensor, torch.nn.Parameter)
        and t.device.type == "tpu"
        and t.layout == torch.strided
        and not t.is_nested
        and not t.is_quantized
        and not torch._C._functorch.is_functorch_wrapped_tensor(t)
        and not torch._is_functional_tensor(t)
        and t.numel() > 0
    )


# PyTorch's own formatter, which formats on the device (tests compare against its text).
pytorch_str_intern = _tensor_str._str_intern


def install() -> None:
    original = _tensor_str._str_intern
    if getattr(original, "_torchtpu_host_formatting", False):
        return

    def _str_intern(inp, *, tensor_contents=None):
        if tensor_contents is None and _formats_from_host(inp):
            # The same indent PyTorch uses for the contents: the length of "tensor(" or of
            # "<Subclass>(".
            indent = len("tensor(")  # PyTorch's prefix for plain tensors and parameters
            primal, _ = torch.autograd.forward_ad.unpack_dual(inp)
            host = primal.detach().to("cpu")
            tensor_contents = _tensor_str._tensor_str(host, indent)
        return original(inp, tensor_contents=tensor_contents)

    _str_intern._torchtpu_host_formatting = True
    _tensor_str._str_intern = _str_intern
