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

A `torch.amp.GradScaler("tpu")` passed beside them works inside the step (scale, backward,
unscale_, clipping, step, update): its scale and growth tracker are program state, and its skip of
a step with non-finite gradients becomes a select in the program instead of a host read.

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
import operator
import threading
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

log = logging.getLogger("torchtpu.compile")

_step_ids = itertools.count()
# make_fx patches module-level state while it traces (torch.fx's patcher), so threads (thread
# ranks of torchtpu.testing.run_ranks_in_threads, each tracing its own step) trace one at a time.
_trace_lock = threading.Lock()


class _Owners:
    """The modules, optimizers and gradient scalers whose tensors the step reads and updates."""

    def __init__(self, owners):
        from torch.amp import GradScaler

        self.modules: list[torch.nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.scalers: list[GradScaler] = []
        for o in owners:
            if isinstance(o, torch.nn.Module):
                self.modules.append(o)
            elif isinstance(o, torch.optim.Optimizer):
                self.optimizers.append(o)
            elif isinstance(o, GradScaler):
                self.scalers.append(o)
            else:
                raise TypeError(f"torchtpu.compile_step: expected nn.Module, torch.optim.Optimizer "
                                f"or torch.amp.GradScaler objects after the step function, got "
                                f"{type(o).__name__}")


def _prepare_scaler(scaler) -> None:
    """The scale and growth tracker exist before the first call (GradScaler makes them at its
    first scale()), so they are program inputs updated in place from the first call on."""
    if not scaler.is_enabled():
        return
    if scaler._device != "tpu":
        raise ValueError(f"torchtpu.compile_step: the GradScaler is for device '{scaler._device}'; "
                         "use torch.amp.GradScaler('tpu')")
    if scaler._scale is None:
        scaler._lazy_init_scale_growth_tracker(torch.device("tpu"))


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
        from torch.amp.grad_scaler import OptState

        for scaler in owners.scalers:
            self.key.append(("scaler", scaler.is_enabled(), scaler._growth_factor,
                             scaler._backoff_factor, scaler._growth_interval))
            if not scaler.is_enabled():
                continue
            if any(st["stage"] is not OptState.READY
                   for st in scaler._per_optimizer_states.values()):
                raise RuntimeError("torchtpu.compile_step: the GradScaler was used outside the "
                                   "step since its last update(); scale, step and update it "
                                   "inside the step")
            add(scaler._scale)
            add(scaler._growth_tracker)
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
    saved_scalers = []
    for scaler in owners.scalers:
        saved_scalers.append((scaler, scaler._scale, scaler._growth_tracker,
                              scaler._per_optimizer_states))
        if scaler.is_enabled():
            from torch.amp.grad_scaler import _refresh_per_optimizer_state

            scaler._scale = by_id[id(scaler._scale)]
            scaler._growth_tracker = by_id[id(scaler._growth_tracker)]
            scaler._per_optimizer_states = collections.defaultdict(_refresh_per_optimizer_state)
            scaler._maybe_opt_step = _skippable_opt_step
    try:
        yield by_id
    finally:
        for scaler, scale, tracker, states in saved_scalers:
            scaler._scale, scaler._growth_tracker = scale, tracker
            scaler._per_optimizer_states = states
            scaler.__dict__.pop("_maybe_opt_step", None)
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


_PLAIN = (bool, int, float, str, type(None))


def _plain(v):
    """A hyperparameter as a cheap comparable value (repr only for what is not a plain value)."""
    if type(v) in _PLAIN or (type(v) is tuple and all(type(x) in _PLAIN for x in v)):
        return v
    return repr(v)


def _snapshot(owners: _Owners, dicts: list, params: list) -> tuple[list, list]:
    """Everything _Slots and the cache key are derived from, cheaply: the objects (compared by
    identity: every parameter, buffer, submodule, .grad, optimizer state entry and tensor
    hyperparameter, and the containers holding them) and the plain values (compared by
    equality: training flags, requires_grad, state keys, plain hyperparameters, scaler
    settings). The shapes, dtypes and devices of the state tensors are checked apart, once the
    objects are known to be the same."""
    objs = [v for d in dicts for v in d.values()]
    objs += [p.grad for p in params]
    flags = [p.requires_grad for p in params]
    for opt in owners.optimizers:
        state = opt.state
        objs.append(state)
        flags.append(len(state))
        for group in opt.param_groups:
            for k, v in group.items():
                if k == "params":
                    objs += v
                    flags.append(len(v))
                elif isinstance(v, torch.Tensor):
                    objs.append(v)
                else:
                    flags.append(_plain(v))
            for p in group["params"]:
                st = state.get(p)
                objs.append(st)
                if st:
                    flags.append(tuple(st))
                    for v in st.values():
                        if isinstance(v, torch.Tensor):
                            objs.append(v)
                        else:
                            flags.append(_plain(v))
    for sc in owners.scalers:
        objs += (sc._scale, sc._growth_tracker)
        flags.append((sc._enabled, sc._growth_factor, sc._backoff_factor, sc._growth_interval,
                      tuple(st["stage"] for st in sc._per_optimizer_states.values())))
    return objs, flags


def _meta(tensors: list) -> list:
    return [(t.shape, t.dtype, t.device, t.requires_grad) for t in tensors]


class _Guard:
    """The previous call's slots and program, valid while nothing they were derived from changed.
    (Object identity is safe to compare: the guard keeps the objects alive, so no new object can
    take the place of one of them at the same address.)"""

    def __init__(self, owners: _Owners, slots: _Slots, entry, arg_key):
        submodules = [sub for m in owners.modules for sub in m.modules()]
        self.submodules = submodules
        self.training = [sub.training for sub in submodules]
        self.dicts = [d for sub in submodules
                      for d in (sub._parameters, sub._buffers, sub._modules)]
        self.slots = slots
        self.entry = entry
        self.arg_key = arg_key
        self.objs, self.flags = _snapshot(owners, self.dicts, slots.params)
        self.meta = _meta(slots.tensors)

    def holds(self, owners: _Owners) -> bool:
        if [sub.training for sub in self.submodules] != self.training:
            return False
        objs, flags = _snapshot(owners, self.dicts, self.slots.params)
        return (len(objs) == len(self.objs) and all(map(operator.is_, objs, self.objs))
                and flags == self.flags and _meta(self.slots.tensors) == self.meta)


class _Traced:
    """One signature's program and how to put its results back on the real objects."""

    def __init__(self, compiled, out_spec, installs, num_user_outputs):
        self.compiled = compiled
        self.out_spec = out_spec
        self.installs = installs  # list of (kind, where, output index or None)
        self.num_user_outputs = num_user_outputs


def _dynamo_cache():
    from . import _dynamo

    return _dynamo._BoundedCache()


class CompiledStep:
    """The callable torchtpu.compile_step returns."""

    def __init__(self, fn: Callable, owners: _Owners):
        self.fn = fn
        self.owners = owners
        self.name = f"step{next(_step_ids)}"
        # Bounded like a dynamic graph's specializations (_dynamo._BoundedCache).
        self._cache = _dynamo_cache()
        self._last: _Guard | None = None
        for opt in owners.optimizers:
            _prepare_optimizer(opt)
        for scaler in owners.scalers:
            _prepare_scaler(scaler)

    @property
    def num_signatures(self) -> int:
        return len(self._cache)

    def __call__(self, *args, **kwargs):
        flat_args, args_spec = pytree.tree_flatten((args, kwargs))
        for a in flat_args:
            if isinstance(a, torch.Tensor) and a.device.type != "tpu":
                raise ValueError(f"torchtpu.compile_step: an argument is on {a.device}; pass tpu "
                                 "tensors")
        arg_key = (_arg_key(flat_args), args_spec)
        last = self._last
        if last is not None and last.arg_key == arg_key and last.holds(self.owners):
            # Same objects, flags and hyperparameters as the previous call: its slots (the flat
            # input list) and program still apply; no walk over modules and optimizers.
            slots, entry = last.slots, last.entry
        else:
            slots = _Slots(self.owners)
            key = (tuple(slots.key),) + arg_key
            entry = self._cache.get(key)
            if entry is None:
                traced = self._trace(slots, flat_args, args_spec)
                settled = self._settle(slots, traced, flat_args, args_spec)
                if settled is not None:
                    slots, traced = settled
                    key = (tuple(slots.key),) + arg_key
                entry = self._cache.get(key)
                if entry is None:
                    entry = self._compile(traced)
                    self._cache.put(key, entry)
            self._last = _Guard(self.owners, slots, entry, arg_key)
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

    def _settle(self, slots: _Slots, traced: dict, flat_args: list, args_spec):
        """The state a call creates (first `.grad` fields, first optimizer state) is created
        ahead, so that the call's program is the one every later call runs: one compile instead
        of one for the first call and another for the steady state. Returns the new slots and
        their trace, or None to keep `traced` (nothing to create, or what the step creates cannot
        be made ahead: e.g. SGD's momentum buffer, a copy of the first gradient; then the real
        objects are left as they were).

        Made ahead, and the same values the step would start from: zero gradients (a backward
        accumulating into zeros gives what it gives into None) and the optimizer's own lazy
        state (`_init_group`, the code its step runs first, run on CPU stand-ins of the
        parameters and uploaded, so no device program runs). Kept only if the new trace leaves
        every slot as it found it (a fixed point)."""
        changes = _slot_changes(traced["installs"], slots, self.owners)
        if not changes or changes["other"]:
            return None
        params = slots.params
        new_grads = [params[pi] for pi in changes["grads"]]
        saved_states = [(opt, {p: dict(st) for p, st in opt.state.items()})
                        for opt in self.owners.optimizers]
        try:
            for p in new_grads:
                p.grad = torch.zeros_like(p, device="cpu").to(p.device)
            for oi, pis in changes["state"].items():
                _init_state_ahead(self.owners.optimizers[oi], {id(params[pi]) for pi in pis})
            for oi, pi, k, v in changes["consts"]:
                opt = self.owners.optimizers[oi]
                opt.state[params[pi]][k] = v
            new_slots = _Slots(self.owners)
            new_traced = self._trace(new_slots, flat_args, args_spec)
            if _slot_changes(new_traced["installs"], new_slots, self.owners):
                raise _NotSettled()
        except Exception as e:  # noqa: BLE001 - any failure keeps the first trace
            log.info("torchtpu: compile_step %s keeps a first-call program (%s)", self.name,
                     type(e).__name__ if isinstance(e, _NotSettled) else e)
            for p in new_grads:
                p.grad = None
            for opt, saved in saved_states:
                # In place: the state's dicts stay the objects the user may hold.
                for p in [p for p in opt.state if p not in saved]:
                    del opt.state[p]
                for p, st in saved.items():
                    opt.state[p].clear()
                    opt.state[p].update(st)
            return None
        return new_slots, new_traced

    def _compile(self, traced: dict) -> _Traced:
        from . import _dynamo

        compiled = _dynamo._compile_graph(traced["gm"], traced["example"])
        log.info("torchtpu: compile_step %s traced a new signature (%d inputs)", self.name,
                 len(traced["example"]))
        return _Traced(compiled, traced["out_spec"], traced["installs"], traced["num_user"])

    def _trace(self, slots: _Slots, flat_args: list, args_spec) -> dict:
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
                _check_scalers_updated(self.owners)
                outputs, _ = self._collect(slots, state, by_id, record, result)
            return outputs

        example = slots.tensors + [a for a in flat_args if isinstance(a, torch.Tensor)]
        requires_grad = {i for i, t in enumerate(example) if t.requires_grad}
        from torch._subclasses.fake_tensor import DataDependentOutputException
        from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

        try:
            with _trace_lock, torch.compiler._compile_session_context():
                gm = make_fx(_functionalized(step, requires_grad),
                             decomposition_table=_dynamo.decomposition_table(), tracing_mode="fake",
                             _allow_non_fake_inputs=False)(*[t.detach() for t in example])
        except (GuardOnDataDependentSymNode, DataDependentOutputException) as e:
            raise _host_read_error(str(e).splitlines()[0]) from None
        except AssertionError as e:
            if "convert all Tensors to FakeTensors" not in str(e):
                raise
            # A tensor the step captured (a closure variable, a plain tensor attribute): it is
            # neither a program input nor known state, so its updates could not be written back.
            raise ValueError(
                "torchtpu.compile_step: the step uses a tensor that is neither an argument of the "
                "step nor a parameter, buffer, .grad or optimizer state of the given modules and "
                "optimizers (a tensor captured from an enclosing scope?); pass it as an argument "
                f"or register it as a buffer ({str(e).splitlines()[-1][:200]})") from None
        _clean_graph(gm)
        gm.recompile()
        return dict(record, gm=gm, example=example)

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


class _NotSettled(Exception):
    """The trace with the state made ahead still creates state: keep the first trace."""


def _slot_changes(installs: list, slots: _Slots, owners: _Owners) -> dict:
    """What a call with `installs` leaves that the next call's slots (and so its program) would
    see differently: parameters that get their first `.grad`, optimizers' parameters that get new
    state tensors, and plain state values that are new or changed. Empty when none."""
    grads, state, consts, other = [], {}, [], False
    for kind, where, idx in installs:
        if kind == "grad":
            pi = where
            had = slots.grad_slot[id(slots.params[pi])] is not None
            if idx is not None and not had:
                grads.append(pi)
            elif idx is None and had:
                other = True  # a .grad dropped: the next call has none
        elif kind == "state":
            oi, pi, k, const = where
            st = owners.optimizers[oi].state.get(slots.params[pi], {})
            if idx is not None:
                if not isinstance(st.get(k), torch.Tensor):
                    state.setdefault(oi, []).append(pi)
            elif k not in st or repr(st[k]) != repr(const):
                consts.append((oi, pi, k, const))
        else:
            other = True
    if not (other or grads or state or consts):
        return {}
    # `other`: the call drops something (a .grad), so the next call differs whatever is made
    # ahead.
    return {"grads": grads, "state": state, "consts": consts, "other": other}


def _init_state_ahead(opt: torch.optim.Optimizer, want: set) -> None:
    """The lazy state `opt.step()` creates for the parameters whose ids are in `want`, created
    now by the optimizer's own `_init_group` (torch.optim's optimizers), on CPU stand-ins of the
    parameters (same shape, dtype and strides; zero gradients), then uploaded to each parameter's
    device: the values the step would create, without running a device program. Raises when the
    optimizer has no `_init_group` or it created none of the wanted state."""
    import inspect

    init = getattr(opt, "_init_group", None)
    if init is None:
        raise _NotSettled()
    n_lists = len(inspect.signature(init).parameters) - 1  # after `group`
    saved_state, created = opt.state, 0
    for group in opt.param_groups:
        real = group["params"]
        if not any(id(p) in want for p in real):
            continue
        stand_ins = []
        for p in real:
            s = torch.empty_strided(p.shape, p.stride(), dtype=p.dtype)
            s.requires_grad_(p.requires_grad)
            if id(p) in want:
                s.grad = torch.zeros_like(s)
            stand_ins.append(s)
        by_stand_in = dict(zip(map(id, stand_ins), real))
        opt.state = collections.defaultdict(dict)
        try:
            group["params"] = stand_ins
            init(group, *[[] for _ in range(n_lists)])
            new_state = opt.state
        finally:
            group["params"] = real
            opt.state = saved_state
        for s, st in new_state.items():
            p = by_stand_in[id(s)]
            if id(p) not in want or not st:
                continue
            created += 1
            target = opt.state[p]
            for k, v in st.items():
                target[k] = v.to(p.device) if isinstance(v, torch.Tensor) else v
    if created == 0:
        raise _NotSettled()


def _skippable_opt_step(optimizer, optimizer_state, *args, **kwargs):
    """GradScaler.step without its host read: eagerly, GradScaler skips optimizer.step() when the
    unscaled gradients hold an inf or NaN (`if not found_inf.item()`). In one program the step
    runs always and its results are then selected: where any gradient was not finite, every
    parameter and optimizer state tensor keeps its value from before the step. State that the
    step creates (the first step's) is zero then, the value the optimizers in torch.optim start
    from, where an eager skipped first step leaves the state empty."""
    found = sum(optimizer_state["found_inf_per_device"].values())
    params = [p for g in optimizer.param_groups for p in g["params"]]
    before = {}
    with torch.no_grad():
        for p in params:
            before[(id(p), None)] = (p, p.clone())
            for k, v in optimizer.state.get(p, {}).items():
                if isinstance(v, torch.Tensor):
                    before[(id(p), k)] = (v, v.clone())
    retval = optimizer.step(*args, **kwargs)
    with torch.no_grad():
        skip = found > 0
        for p in params:
            t, old = before[(id(p), None)]
            t.copy_(torch.where(skip, old, t))
            st = optimizer.state.get(p, {})
            for k, v in list(st.items()):
                if not isinstance(v, torch.Tensor):
                    continue
                prev = before.get((id(p), k))
                if prev is None:
                    st[k] = torch.where(skip, torch.zeros_like(v), v)
                elif prev[0] is v:
                    v.copy_(torch.where(skip, prev[1], v))
                else:
                    st[k] = torch.where(skip, prev[1], v)
    return retval


def _check_scalers_updated(owners: _Owners) -> None:
    from torch.amp.grad_scaler import OptState

    for scaler in owners.scalers:
        if any(st["stage"] is not OptState.READY
               for st in scaler._per_optimizer_states.values()):
            raise RuntimeError("torchtpu.compile_step: the step used the GradScaler without "
                               "calling scaler.update() at its end; the scaler's per-step "
                               "record cannot outlive the program")


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
    `optimizer.zero_grad()` on the given modules and optimizers, and scale/unscale_/step/update on
    a given torch.amp.GradScaler("tpu"); their tensors (parameters, buffers, `.grad`, optimizer
    state, tensor hyperparameters, the scaler's scale) are the program's state, read and updated
    in place. Arguments may be tpu tensors (their shapes and dtypes pick the program) and
    hashable Python values (each value traces its own program)."""
    if not callable(fn):
        raise TypeError("torchtpu.compile_step: the first argument must be the step function")
    return CompiledStep(fn, _Owners(owners))
