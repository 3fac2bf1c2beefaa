"""torchtpu.compile_step: a whole training step (forward, backward, optimizer update, zero_grad)
as ONE XLA program per input signature.

Why a helper beside `torch.compile`: in torch 2.13, Dynamo cannot keep a train step in one graph
even with `torch._dynamo.config.trace_autograd_ops=True` (which traces `loss.backward()` as
autograd.grad + accumulate_grad). `Optimizer.step` calls `torch._dynamo.graph_break()` twice on
purpose, Dynamo's optimizer support graph-breaks before `_init_group` whenever a parameter's
`.grad` was written in the same graph ("pending mutation on parameter"), `Optimizer.zero_grad` is
wrapped in `torch._disable_dynamo`, and a returned loss whose graph the backward consumed breaks
at the backward. A compiled AdamW step therefore runs 4-26 programs (forward+backward, optimizer,
eager glue), never one.

What this does instead, in the spirit of jax.jit: the step function runs ONCE per signature
under make_fx (fake tensors, functionalization, the backend's decompositions), with every
tensor of the given modules and optimizers (parameters, buffers, `.grad`, optimizer state,
tensor hyperparameters such as a tensor learning rate) swapped for a graph input. Autograd runs
inside the trace, so the backward is part of the graph; the optimizer's in-place updates become
`copy_` writes into its inputs, which the graph executor lowers to in-place (donated) buffer
updates inside the same program. New tensors the step creates (a first `.grad`, first optimizer
state) are graph outputs that are installed on the real objects after the call. The graph then
goes through the same lowering as `torch.compile(backend="tpu")` (one lowering table).

The jax.jit contract applies: Python values the step reads (ints, floats, bools, the modules'
training flags, non-tensor hyperparameters) are baked into the trace and part of the cache key; a
new value traces again. Keep changing hyperparameters in tensors (`lr=torch.tensor(...)`), and call
LR schedulers outside the step (a tensor LR is then updated in place and read by the program).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

log = logging.getLogger("torchtpu.compile")

_step_ids = itertools.count()


class _Owners:
    """The modules and optimizers whose tensors the step reads and updates."""

    def __init__(self, owners):
        self.modules: list[torch.nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        for o in owners:
            if isinstance(o, torch.nn.Module):
                self.modules.append(o)
            elif isinstance(o, torch.optim.Optimizer):
                self.optimizers.append(o)
            else:
                raise TypeError(f"torchtpu.compile_step: expected nn.Module or torch.optim.Optimizer "
                                f"objects after the step function, got {type(o).__name__}")


def _prepare_optimizer(opt: torch.optim.Optimizer) -> None:
    """capturable=True keeps the step counters on the device: the counter is then a program input
    that is updated in place, where a CPU counter would be read on the host each step."""
    for group in opt.param_groups:
        if "capturable" in group and not group["capturable"]:
            group["capturable"] = True
        # The foreach implementations are written for tracing (a tensor learning rate stays a
        # tensor under torch.compiler.is_compiling()); the per-tensor loops of some optimizers
        # read it on the host (`alpha=-lr`). Same math either way.
        if group.get("foreach", False) is None and not group.get("fused"):
            group["foreach"] = True
        for p in group["params"]:
            st = opt.state.get(p)
            if st and isinstance(st.get("step"), torch.Tensor) and st["step"].device != p.device:
                st["step"] = st["step"].to(p.device)


def _tensor_sig(t: torch.Tensor):
    return ("T", t.dtype, tuple(t.shape), str(t.device), t.requires_grad)


class _Slots:
    """The flat list of state tensors for one call, and how to find each on the real objects."""

    def __init__(self, owners: _Owners):
        self.tensors: list[torch.Tensor] = []
        self.key: list = []
        self.params: list[torch.Tensor] = []  # slot order of parameters (deduplicated)
        self.index: dict[int, int] = {}  # id(tensor) -> slot
        self.grad_slot: dict[int, int | None] = {}  # id(param) -> slot of its .grad
        seen_params: set[int] = set()

        def add(t: torch.Tensor) -> int:
            if id(t) in self.index:
                return self.index[id(t)]
            if t.device.type != "tpu":
                raise ValueError(f"torchtpu.compile_step: a state tensor is on {t.device}; move "
                                 "the model and optimizer state to the tpu device first")
            self.index[id(t)] = len(self.tensors)
            self.tensors.append(t)
            self.key.append(_tensor_sig(t))
            return self.index[id(t)]

        def add_param(p: torch.Tensor) -> None:
            if id(p) in seen_params:
                return
            seen_params.add(id(p))
            self.params.append(p)
            add(p)

        for m in owners.modules:
            self.key.append(("module", m.training))
            for p in m.parameters():
                add_param(p)
            for b in m.buffers():
                add(b)
        for opt in owners.optimizers:
            for group in opt.param_groups:
                for p in group["params"]:
                    add_param(p)
        for p in self.params:
            if p.grad is None:
                self.grad_slot[id(p)] = None
                self.key.append(("nograd",))
            else:
                self.grad_slot[id(p)] = add(p.grad)
        for opt in owners.optimizers:
            for group in opt.param_groups:
                gkey = []
                for k, v in group.items():
                    if k == "params":
                        continue
                    if isinstance(v, torch.Tensor):
                        add(v)
                        gkey.append((k, "T"))
                    else:
                        gkey.append((k, repr(v)))
                self.key.append(("group", tuple(gkey)))
                for p in group["params"]:
                    st = opt.state.get(p, {})
                    skey = []
                    for k, v in st.items():
                        if isinstance(v, torch.Tensor):
                            add(v)
                            skey.append((k, "T"))
                        else:
                            skey.append((k, repr(v)))
                    self.key.append(("state", tuple(skey)))


def _arg_key(flat_args: list) -> tuple:
    out = []
    for a in flat_args:
        if isinstance(a, torch.Tensor):
            out.append(_tensor_sig(a))
        else:
            try:
                hash(a)
            except TypeError:
                raise TypeError(f"torchtpu.compile_step: argument of type {type(a).__name__} is "
                                "neither a tensor nor a hashable Python value") from None
            out.append(("V", type(a).__name__, a))
    return tuple(out)


@contextlib.contextmanager
def _swapped_state(owners: _Owners, slots: _Slots, traced: list):
    """Inside: every state tensor of the modules and optimizers is its traced stand-in; `.grad` of
    the stand-in parameters hold the traced gradients. Restores the real objects on exit."""
    by_id = {id(t): traced[i] for i, t in enumerate(slots.tensors)}
    saved_modules = []
    for m in owners.modules:
        for mod in m.modules():
            saved_modules.append((mod, dict(mod._parameters), dict(mod._buffers)))
            for name, p in mod._parameters.items():
                if p is not None:
                    mod._parameters[name] = by_id[id(p)]
            for name, b in mod._buffers.items():
                if b is not None:
                    mod._buffers[name] = by_id[id(b)]
    saved_opts = []
    for opt in owners.optimizers:
        saved_opts.append((opt, opt.state, [dict(g) for g in opt.param_groups]))
        new_state: dict = collections.defaultdict(dict)
        for real_p, st in opt.state.items():
            new_state[by_id[id(real_p)]] = {
                k: by_id[id(v)] if isinstance(v, torch.Tensor) else v for k, v in st.items()}
        opt.state = new_state
        for g in opt.param_groups:
            for k, v in list(g.items()):
                if k == "params":
                    g[k] = [by_id[id(p)] for p in v]
                elif isinstance(v, torch.Tensor):
                    g[k] = by_id[id(v)]
    for p in slots.params:
        stand_in = by_id[id(p)]
        slot = slots.grad_slot[id(p)]
        stand_in.grad = None if slot is None else traced[slot]
    try:
        yield by_id
    finally:
        for mod, params, buffers in saved_modules:
            mod._parameters.clear()
            mod._parameters.update(params)
            mod._buffers.clear()
            mod._buffers.update(buffers)
        for opt, state, groups in saved_opts:
            opt.state = state
            for g, saved in zip(opt.param_groups, groups):
                g.clear()
                g.update(saved)


class _Traced:
    """One signature's program and how to put its results back on the real objects."""

    def __init__(self, compiled, out_spec, installs, num_user_outputs):
        self.compiled = compiled
        self.out_spec = out_spec
        self.installs = installs  # list of (kind, where, output index or None)
        self.num_user_outputs = num_user_outputs


class CompiledStep:
    """The callable torchtpu.compile_step returns."""

    def __init__(self, fn: Callable, owners: _Owners):
        self.fn = fn
        self.owners = owners
        self.name = f"step{next(_step_ids)}"
        self._cache: dict = {}
        for opt in owners.optimizers:
            _prepare_optimizer(opt)

    @property
    def num_signatures(self) -> int:
        return len(self._cache)

    def __call__(self, *args, **kwargs):
        slots = _Slots(self.owners)
        flat_args, args_spec = pytree.tree_flatten((args, kwargs))
        for a in flat_args:
            if isinstance(a, torch.Tensor) and a.device.type != "tpu":
                raise ValueError(f"torchtpu.compile_step: an argument is on {a.device}; pass tpu "
                                 "tensors")
        key = (tuple(slots.key), _arg_key(flat_args), args_spec)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._trace(slots, flat_args, args_spec)
            self._cache[key] = entry
        inputs = slots.tensors + [a for a in flat_args if isinstance(a, torch.Tensor)]
        outs = entry.compiled(inputs)
        self._install(entry, slots, outs)
        user = outs[:entry.num_user_outputs]
        it = iter(user)
        leaves = [next(it) if is_t else v for is_t, v in entry.out_spec[0]]
        return pytree.tree_unflatten(leaves, entry.out_spec[1])

    def _install(self, entry: _Traced, slots: _Slots, outs: list) -> None:
        params = slots.params
        for kind, where, idx in entry.installs:
            value = None if idx is None else outs[idx]
            if kind == "grad":
                params[where].grad = value
            elif kind == "state":
                opt_i, p_i, k, const = where
                opt = self.owners.optimizers[opt_i]
                st = opt.state[params[p_i]] if params[p_i] in opt.state else None
                if st is None:
                    st = opt.state[params[p_i]] = {}
                st[k] = value if idx is not None else const
            elif kind == "state_drop":
                opt_i, p_i = where
                self.owners.optimizers[opt_i].state.pop(params[p_i], None)

    def _trace(self, slots: _Slots, flat_args: list, args_spec) -> _Traced:
        from torch.fx.experimental.proxy_tensor import make_fx

        from . import _dynamo

        n_state = len(slots.tensors)
        param_slots = {slots.index[id(p)] for p in slots.params}
        record: dict = {}

        def step(*flat):
            state = list(flat[:n_state])
            tensor_args = iter(flat[n_state:])
            call_args = [next(tensor_args) if isinstance(a, torch.Tensor) else a
                         for a in flat_args]
            with _swapped_state(self.owners, slots, state) as by_id:
                args, kwargs = pytree.tree_unflatten(call_args, args_spec)
                result = self.fn(*args, **kwargs)
                outputs, _ = self._collect(slots, state, by_id, record, result)
            return outputs

        example = slots.tensors + [a for a in flat_args if isinstance(a, torch.Tensor)]
        requires_grad = {i for i, t in enumerate(example) if t.requires_grad}
        from torch._subclasses.fake_tensor import DataDependentOutputException
        from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

        try:
            with torch.compiler._compile_session_context():
                gm = make_fx(_functionalized(step, requires_grad),
                             decomposition_table=_dynamo._decompositions(), tracing_mode="fake",
                             _allow_non_fake_inputs=False)(*[t.detach() for t in example])
        except (GuardOnDataDependentSymNode, DataDependentOutputException) as e:
            raise _host_read_error(str(e).splitlines()[0]) from None
        _clean_graph(gm)
        gm.recompile()
        compiled = _dynamo._compile_graph(gm, example)
        log.info("torchtpu: compile_step %s traced a new signature (%d inputs)", self.name,
                 len(example))
        return _Traced(compiled, record["out_spec"], record["installs"], record["num_user"])

    def _collect(self, slots: _Slots, state: list, by_id: dict, record: dict, result):
        """After the step ran on stand-ins: the graph's outputs (user results, then new tensors
        to install) and where each goes."""
        inputs_by_id = {id(t): i for i, t in enumerate(state)}
        flat_result, spec = pytree.tree_flatten(result)
        outputs: list = []
        leaves = []
        for v in flat_result:
            if isinstance(v, torch.Tensor):
                outputs.append(v.detach())
                leaves.append((True, None))
            else:
                leaves.append((False, v))
        num_user = len(outputs)
        installs: list = []
        for pi, p in enumerate(slots.params):
            stand_in = by_id[id(p)]
            g = stand_in.grad
            old = slots.grad_slot[id(p)]
            if g is None:
                if old is not None:
                    installs.append(("grad", pi, None))
            elif old is None or id(g) != id(state[old]):
                installs.append(("grad", pi, len(outputs)))
                outputs.append(g)
        param_pos = {id(by_id[id(p)]): pi for pi, p in enumerate(slots.params)}
        for oi, opt in enumerate(self.owners.optimizers):
            for stand_in_p, st in opt.state.items():
                pi = param_pos.get(id(stand_in_p))
                if pi is None:
                    raise RuntimeError("torchtpu.compile_step: the optimizer holds state for a "
                                       "tensor that is not one of its parameters")
                for k, v in st.items():
                    if isinstance(v, torch.Tensor):
                        if id(v) in inputs_by_id:
                            continue  # updated in place: a write into its input buffer
                        installs.append(("state", (oi, pi, k, None), len(outputs)))
                        outputs.append(v)
                    else:
                        installs.append(("state", (oi, pi, k, v), None))
        record["out_spec"] = (leaves, spec)
        record["installs"] = installs
        record["num_user"] = num_user
        return outputs, installs


def _host_read_error(where: str) -> RuntimeError:
    return RuntimeError(
        "torchtpu.compile_step: the step reads a tensor's value on the host (.item(), float(t), "
        "a Python `if` on a tensor, or a tensor passed where a number is expected); one program "
        "cannot depend on a host read. Keep the value a tensor (torch.where instead of `if`), or "
        f"run that part outside the step. ({where})")


def _clean_graph(gm: torch.fx.GraphModule) -> None:
    """Drops what the trace records beside the computation: profiler ranges (the optimizer's
    record_function) and aliases (functionalization leaves them; a value is its own alias)."""
    graph = gm.graph
    for n in reversed(list(graph.nodes)):
        if n.op != "call_function":
            continue
        # Reversed: a range's exit (the enter's only user) goes before its enter.
        if isinstance(n.target, torch._ops.OpOverload) and n.target.namespace == "profiler":
            graph.erase_node(n)
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target is torch.ops.aten.alias.default:
            n.replace_all_uses_with(n.args[0])
            graph.erase_node(n)
    graph.eliminate_dead_code()
    gm.recompile()
    for n in graph.nodes:
        if n.op == "call_function" and n.target in (torch.ops.aten._local_scalar_dense.default,
                                                     torch.ops.aten.item.default):
            raise _host_read_error(n.meta.get("stack_trace") or str(n))


def _functionalized(fn: Callable, requires_grad: set) -> Callable:
    """fn on functional tensors (as AOTAutograd does it: autograd above, functionalization below):
    every in-place update of an input becomes one `copy_` into that input at the end, which the
    graph executor turns into an in-place buffer update inside the program."""
    from torch._functorch._aot_autograd.functional_utils import from_fun, has_data_mutation
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

    def run(*flat):
        mode = FunctionalTensorMode()
        with mode:
            f_flat = [FunctionalTensor.to_functional(t) for t in flat]
        # Leaves for the autograd that runs inside the trace (the traced inputs themselves are
        # plain: autograd must record on the functional wrappers, not on make_fx's inputs).
        for i in requires_grad:
            f_flat[i].requires_grad_(True)
        with mode:
            outputs = fn(*f_flat)
        plain = []
        for o in outputs:
            if isinstance(o, FunctionalTensor):
                torch._sync(o)
                plain.append(from_fun(o))
            else:
                plain.append(o)
        with torch.no_grad():
            for t, f in zip(flat, f_flat):
                torch._sync(f)
                if has_data_mutation(f):
                    t.copy_(from_fun(f))
        return plain

    return run


def compile_step(fn: Callable, *owners: Any) -> CompiledStep:
    """Compiles a training step into one XLA program per input signature.

        step = torchtpu.compile_step(train_step, model, optimizer)
        loss = step(inputs, labels)

    `fn` may run forward, `loss.backward()`, gradient clipping, `optimizer.step()` and
    `optimizer.zero_grad()` on the given modules and optimizers; their tensors (parameters,
    buffers, `.grad`, optimizer state, tensor hyperparameters) are the program's state, read and
    updated in place. Arguments may be tpu tensors (their shapes and dtypes pick the program) and
    hashable Python values (each value traces its own program)."""
    if not callable(fn):
        raise TypeError("torchtpu.compile_step: the first argument must be the step function")
    return CompiledStep(fn, _Owners(owners))
