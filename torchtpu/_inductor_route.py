"""`torch.compile(model)` with no backend argument on tpu tensors.

Without a backend argument torch.compile uses Inductor, and Inductor in torch 2.13 claims the
device type "tpu" for its Pallas code generator, which needs JAX and a Pallas-capable platform
and emits one kernel per fused region. torchtpu routes every graph that touches tpu tensors to
its own backend instead (`backend="tpu"`): the whole graph becomes one XLA program through the
same lowering table as eager mode, with the same program cache, disk cache, metrics and
recompile reasons. Graphs on other devices keep going to Inductor unchanged.

Why this route rather than running Inductor's Pallas kernels: XLA already fuses the whole
graph; Inductor's split into Pallas kernels would add a JAX dependency, one launch per kernel
and interpret mode on platforms without Pallas (XLA:CPU), and a second lowering path beside our
table (the design allows one). The hook is the `__call__` of torch's own Inductor wrapper
object, the one thing `torch.compile(model)` and `torch.compile(model, backend="inductor")`
both call, so nothing else of Inductor is touched and importing torchtpu stays cheap.

TORCHTPU_ROUTE_INDUCTOR=0 turns the routing off (Inductor then handles tpu graphs itself).
"""

from __future__ import annotations

import logging

import torch

from . import _config

log = logging.getLogger("torchtpu.compile")

# Inductor options that have a meaning for tpu graphs: none of them change what we build, but
# these are the ones a user sets through `mode=`; they are accepted and explained once.
_MODE_NOTES = {
    "triton.cudagraphs": "mode='reduce-overhead': a tpu graph is already one XLA program launched "
                         "with one call, which is what CUDA graphs buy on CUDA",
    "max_autotune": "mode='max-autotune': XLA chooses its own kernels; no autotuning step is added",
    "coordinate_descent_tuning": "mode='max-autotune': XLA chooses its own kernels",
}
_noted: set[str] = set()


def enabled() -> bool:
    return _config.flag("TORCHTPU_ROUTE_INDUCTOR", True)


def _is_tpu(value) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_is_tpu(v) for v in value)
    return isinstance(value, torch.Tensor) and value.device.type == "tpu"


def graph_uses_tpu(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """True when an input or any value the graph produces lives on tpu (a graph can create its
    tensors on tpu from nothing, e.g. `torch.ones(3, device="tpu")`)."""
    if any(_is_tpu(a) for a in example_inputs):
        return True
    for n in gm.graph.nodes:
        if _is_tpu(n.meta.get("example_value", n.meta.get("val"))):
            return True
    return False


def _explain_options(config: dict) -> None:
    for key in config:
        note = _MODE_NOTES.get(key)
        if note is None and key not in _noted:
            note = f"Inductor option {key!r} does not apply to tpu graphs and is ignored"
        if note is not None and key not in _noted:
            _noted.add(key)
            log.info("torchtpu: %s", note)


def install() -> None:
    """Wraps torch's Inductor entry once (idempotent)."""
    wrapper_cls = getattr(torch, "_TorchCompileInductorWrapper", None)
    if wrapper_cls is None or getattr(wrapper_cls.__call__, "_torchtpu_route", False):
        return
    inductor_call = wrapper_cls.__call__

    def __call__(self, model_, inputs_, *, config_patches=None):
        if not (enabled() and graph_uses_tpu(model_, inputs_)):
            return inductor_call(self, model_, inputs_, config_patches=config_patches)
        if type(self).__name__ == "_TorchCompileAOTInductorWrapper":
            raise RuntimeError(
                "torchtpu: options={'use_aoti': True} (AOTInductor) cannot compile tpu graphs; "
                "use torch.compile(model) without it, or backend='tpu'")
        _explain_options({**self.config, **(config_patches or {})})
        from ._dynamo import tpu_backend

        return tpu_backend(model_, inputs_)

    __call__._torchtpu_route = True  # type: ignore[attr-defined]
    __call__.__doc__ = inductor_call.__doc__
    wrapper_cls.__call__ = __call__
