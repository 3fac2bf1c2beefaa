"""Custom kernels on tpu: a StableHLO module or a JAX function (Pallas kernels included) as a
tpu op.

    y = torchtpu.stablehlo_op(module_text, x)           # a module you wrote

    @torchtpu.jax_op                                     # also torch.tpu.pallas.jax_op
    def gelu(x):
        return jax.nn.gelu(x)
    y = gelu(x)                                          # x: a tpu tensor

Both run through the op torchtpu::stablehlo_call(Tensor[] args, str module) -> Tensor[]: its
lowering (csrc/lowering/stablehlo_call.cpp) puts the module's functions into the program being
built and calls its entry function. Eagerly that is one small program per module and input
signature, compiled once and cached like any op; inside torch.compile(backend="tpu") the module is
inlined into the graph's one program (no graph break).
"""

from __future__ import annotations

import functools
import json
import re
import threading
from typing import Any, Callable

import torch

from . import _C

__all__ = ["stablehlo_op", "jax_op", "JaxOp"]


def _plugin_stablehlo_versions() -> dict:
    try:
        attrs = _C._plugin_attributes()
    except Exception:
        return {}
    return {k: v for k, v in attrs.items() if "stablehlo" in k}


def _version_str(v) -> str:
    return ".".join(str(x) for x in v) if isinstance(v, (list, tuple)) else str(v)


def _rejected(error: Exception, emitter_version=None) -> RuntimeError:
    """The plugin's compile error, with what we know of the StableHLO versions involved."""
    versions = _plugin_stablehlo_versions()
    plugin = versions.get("stablehlo_current_version")
    msg = f"torchtpu.stablehlo_op: the {_C._platform()} PJRT plugin rejected the module: {error}"
    if plugin is not None:
        msg += f"\n(this plugin reads StableHLO up to version {_version_str(plugin)}"
        if emitter_version is not None:
            msg += f"; the module was written for StableHLO {_version_str(emitter_version)}"
            if tuple(emitter_version) > tuple(plugin):
                msg += (", which is newer: use a JAX whose StableHLO is not newer than the "
                        "plugin's, or a newer plugin")
        msg += ")"
    return RuntimeError(msg)


def _is_compile_error(e: RuntimeError) -> bool:
    return "failed to compile" in str(e)


def stablehlo_op(module_text: str, *args: torch.Tensor):
    """Runs a StableHLO module (MLIR text) on tpu tensors; returns its result, or a tuple when
    the entry function (@main, or the only public function) returns several. The inputs must
    match the entry function's tensor types exactly (shape and dtype), else ValueError."""
    if not isinstance(module_text, str):
        raise TypeError(f"torchtpu.stablehlo_op: module_text must be a str, got {type(module_text)}")
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"torchtpu.stablehlo_op: argument {i} is a {type(a).__name__}, "
                            "not a tensor")
    outs = _call(module_text, list(args))
    return outs[0] if len(outs) == 1 else tuple(outs)


def _call(text: str, args: list, emitter_version=None) -> list:
    try:
        return torch.ops.torchtpu.stablehlo_call(args, text)
    except RuntimeError as e:
        if _is_compile_error(e) and not isinstance(e, ValueError):
            raise _rejected(e, emitter_version) from None
        raise


# ------------------------------------------------------------------------------------------
# JAX functions.

_lib = None
_lib_lock = threading.Lock()
_ops: dict[str, "JaxOp"] = {}


def _library():
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = torch.library.Library("torchtpu_jax", "FRAGMENT")
        return _lib


def _jax():
    try:
        import jax
        import jax.numpy as jnp
        from jax import export
    except ImportError as e:
        raise ImportError("torchtpu.jax_op needs JAX (pip install jax; on Python 3.11 "
                          "jax==0.10.2)") from e
    return jax, jnp, export


def _jax_platform() -> str:
    return {"tpu": "tpu", "cuda": "cuda", "gpu": "cuda"}.get(_C._platform(), "cpu")


def _jnp_dtype(dtype: torch.dtype):
    _, jnp, _ = _jax()
    table = {
        torch.float32: jnp.float32, torch.float64: jnp.float64, torch.float16: jnp.float16,
        torch.bfloat16: jnp.bfloat16, torch.int8: jnp.int8, torch.int16: jnp.int16,
        torch.int32: jnp.int32, torch.int64: jnp.int64, torch.uint8: jnp.uint8,
        torch.bool: jnp.bool_, torch.complex64: jnp.complex64, torch.complex128: jnp.complex128,
    }
    if dtype not in table:
        raise TypeError(f"torchtpu.jax_op: {dtype} has no JAX dtype")
    return table[dtype]


def _torch_dtype(jdtype) -> torch.dtype:
    import numpy as np

    name = np.dtype(jdtype).name
    table = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
             "bfloat16": torch.bfloat16, "int8": torch.int8, "int16": torch.int16,
             "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
             "bool": torch.bool, "complex64": torch.complex64, "complex128": torch.complex128}
    if name not in table:
        raise TypeError(f"torchtpu.jax_op: the JAX function returns {name}, which torch cannot hold")
    return table[name]


def _module_text(exported) -> str:
    """The exported module as text, without debug locations."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        module = ir.Module.parse(exported.mlir_module())
        return module.operation.get_asm(enable_debug_info=False)


def _jax_stablehlo_version():
    try:
        from jax._src.lib.mlir.dialects import stablehlo

        return tuple(int(x) for x in stablehlo.get_current_version().split("."))
    except Exception:
        return None


def _x64(avals):
    """JAX drops 64-bit types unless x64 is on: turn it on while exporting 64-bit signatures."""
    import contextlib

    jax, _, _ = _jax()
    wide = any(dt in (torch.float64, torch.int64, torch.complex128) for _, dt in avals)
    return jax.enable_x64(True) if wide else contextlib.nullcontext()


class _Exported:
    """One JAX function exported for one input signature: forward and (lazily) its VJP."""

    def __init__(self, fn: Callable, avals: tuple, static: dict):
        jax, jnp, export = _jax()
        self.fn = functools.partial(fn, **static) if static else fn
        self.avals = list(avals)
        self.in_avals = [jax.ShapeDtypeStruct(shape, _jnp_dtype(dt)) for shape, dt in avals]
        with _x64(avals):
            exp = export.export(jax.jit(self._flat_fn), platforms=[_jax_platform()])(
                *self.in_avals)
        self.text = _module_text(exp)
        self.out_meta = [(tuple(a.shape), _torch_dtype(a.dtype)) for a in exp.out_avals]
        self._vjp_text = None
        self._lock = threading.Lock()

    def _flat_fn(self, *args):
        out = self.fn(*args)
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)

    def vjp_text(self) -> str:
        """A module taking (inputs..., output cotangents...) and returning one gradient per
        input: jax.vjp of the function, recomputing the forward inside the backward program."""
        with self._lock:
            if self._vjp_text is None:
                jax, jnp, export = _jax()
                n = len(self.in_avals)

                def vjp(*primals_and_cts):
                    primals, cts = primals_and_cts[:n], primals_and_cts[n:]
                    _, pullback = jax.vjp(self._flat_fn, *primals)
                    grads = pullback(tuple(cts))
                    # Integer inputs get float0 cotangents: hand back zeros of their own dtype.
                    return tuple(
                        jnp.zeros(p.shape, p.dtype) if g.dtype == jax.dtypes.float0 else g
                        for p, g in zip(primals, grads))

                cts = [jax.ShapeDtypeStruct(s, _jnp_dtype(d)) for s, d in self.out_meta]
                with _x64(self.avals + self.out_meta):
                    exp = export.export(jax.jit(vjp), platforms=[_jax_platform()])(
                        *self.in_avals, *cts)
                self._vjp_text = _module_text(exp)
            return self._vjp_text


def _static_key(static: dict) -> str:
    # Dynamo does not trace json: with keywords, the key is computed outside the graph (the
    # keywords are constants of the call, so the key is one too).
    return _json_key(static) if static else "{}"


@torch.compiler.assume_constant_result
def _json_key(static: dict) -> str:
    try:
        return json.dumps(static, sort_keys=True)
    except TypeError as e:
        raise TypeError(f"torchtpu.jax_op: static keyword arguments must be JSON-like values "
                        f"(ints, floats, strings, bools, lists): {e}") from None


def _sanitize(name: str) -> str:
    return re.sub(r"\W", "_", name)


class JaxOp:
    """A JAX function as a torch op, `torchtpu_jax::<name>(Tensor[] args, str static) -> Tensor[]`.

    Tensor arguments are runtime values; keyword arguments are static (part of the exported
    program, JSON-encoded into the op's `static` argument). Its fake/meta kernel comes from the
    exported output shapes, its gradient from jax.vjp, and inside torch.compile(backend="tpu")
    it becomes torchtpu::stablehlo_call, inlined into the graph's program."""

    def __init__(self, fn: Callable, name: str | None = None):
        self.fn = fn
        base = _sanitize(name or getattr(fn, "__name__", "fn"))
        with _lib_lock:
            n, i = base, 1
            while n in _ops:
                i += 1
                n = f"{base}_{i}"
            _ops[n] = self
        self.name = n
        self._exports: dict = {}
        self._lock = threading.Lock()
        self._define()
        functools.update_wrapper(self, fn)

    # -- exporting ----------------------------------------------------------------------------

    def exported(self, args, static_json: str) -> _Exported:
        avals = tuple((tuple(a.shape), a.dtype) for a in args)
        key = (avals, static_json)
        with self._lock:
            e = self._exports.get(key)
        if e is None:
            try:
                e = _Exported(self.fn, avals, json.loads(static_json))
            except (TypeError, ValueError) as err:
                sig = ", ".join(f"{str(dt).replace('torch.', '')}{list(shape)}"
                                for shape, dt in avals)
                raise ValueError(f"torchtpu.jax_op {self.name}: JAX cannot trace the function "
                                 f"for inputs ({sig}) with static {static_json}: {err}") from None
            with self._lock:
                e = self._exports.setdefault(key, e)
        return e

    # -- the torch ops ------------------------------------------------------------------------

    def _define(self) -> None:
        lib = _library()
        fwd, bwd = self.name, self.name + "_vjp"
        lib.define(f"{fwd}(Tensor[] args, str static) -> Tensor[]")
        lib.define(f"{bwd}(Tensor[] args, str static) -> Tensor[]")
        self.op = getattr(torch.ops.torchtpu_jax, fwd).default
        self.vjp_op = getattr(torch.ops.torchtpu_jax, bwd).default
        ver = _jax_stablehlo_version()

        def run(args, static):
            _check_tpu(self.name, args)
            return _call(self.exported(args, static).text, list(args), ver)

        def run_vjp(args, static):
            return _call(self._vjp_for(args, static), list(args), ver)

        def fake(args, static):
            e = self.exported(args, static)
            return [args[0].new_empty(shape, dtype=dt) for shape, dt in e.out_meta]

        def fake_vjp(args, static):
            k = self._num_inputs(args, static)
            return [a.new_empty(a.shape) for a in args[:k]]

        lib.impl(fwd, run, "PrivateUse1")
        lib.impl(bwd, run_vjp, "PrivateUse1")
        lib.impl(fwd, _cpu_error(self.name), "CPU")
        lib.impl(bwd, _cpu_error(self.name), "CPU")
        torch.library.register_fake(f"torchtpu_jax::{fwd}", fake, lib=lib)
        torch.library.register_fake(f"torchtpu_jax::{bwd}", fake_vjp, lib=lib)

        def setup_context(ctx, inputs, output):
            args, static = inputs
            ctx.static = static
            ctx.save_for_backward(*args)

        def backward(ctx, grads):
            args = list(ctx.saved_tensors)
            cts = [g if g is not None else torch.zeros_like(o)
                   for g, o in zip(grads, self._outputs_like(args, ctx.static))]
            return list(self.vjp_op(args + cts, ctx.static)), None

        torch.library.register_autograd(f"torchtpu_jax::{fwd}", backward,
                                        setup_context=setup_context, lib=lib)
        _register_decompositions(self)

    def _num_inputs(self, args, static) -> int:
        # (inputs..., cotangents...): the forward signature is the one whose output count fits.
        for k in range(len(args), 0, -1):
            e = self._exports_for_prefix(args[:k], static)
            if e is not None and k + len(e.out_meta) == len(args):
                return k
        raise RuntimeError(f"torchtpu.jax_op {self.name}: backward called with arguments that "
                           "match no forward call")

    def _exports_for_prefix(self, args, static):
        avals = tuple((tuple(a.shape), a.dtype) for a in args)
        with self._lock:
            return self._exports.get((avals, static))

    def _vjp_for(self, args, static) -> str:
        k = self._num_inputs(args, static)
        return self._exports_for_prefix(args[:k], static).vjp_text()

    def _outputs_like(self, args, static):
        e = self.exported(args, static)
        return [args[0].new_empty(shape, dtype=dt) for shape, dt in e.out_meta]

    # -- calling ------------------------------------------------------------------------------

    def __call__(self, *args: torch.Tensor, **static: Any):
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                raise TypeError(f"torchtpu.jax_op {self.name}: positional argument {i} is a "
                                f"{type(a).__name__}; pass non-tensor values as keywords "
                                "(they are static)")
        outs = self.op(list(args), _static_key(static))
        return outs[0] if len(outs) == 1 else tuple(outs)


def _check_tpu(name: str, args) -> None:
    if not args:
        raise ValueError(f"torchtpu.jax_op {name}: needs at least one tensor argument")
    for a in args:
        if a.device.type != "tpu":
            raise ValueError(f"torchtpu.jax_op {name}: expects tpu tensors, got one on {a.device}")


def _cpu_error(name: str):
    def run(args, static):
        raise ValueError(f"torchtpu.jax_op {name}: expects tpu tensors, got CPU tensors "
                         "(move them with .to('tpu'))")

    return run


def _register_decompositions(op: JaxOp) -> None:
    """Inside torch.compile(backend="tpu"), the op becomes torchtpu::stablehlo_call of its
    exported module, so the graph lowering inlines it into the graph's program."""
    from . import _dynamo

    def fwd(args, static):
        return torch.ops.torchtpu.stablehlo_call(list(args), op.exported(args, static).text)

    def bwd(args, static):
        return torch.ops.torchtpu.stablehlo_call(list(args), op._vjp_for(args, static))

    _dynamo.register_decomposition(op.op, fwd)
    _dynamo.register_decomposition(op.vjp_op, bwd)


def jax_op(fn: Callable | None = None, *, name: str | None = None):
    """Wraps a JAX function (jnp code, or a Pallas kernel through pl.pallas_call) into a tpu op.
    Usable as `@jax_op`, `@jax_op(name=...)` or `jax_op(fn)`."""
    if fn is None:
        return lambda f: JaxOp(f, name)
    return JaxOp(fn, name)
