"""torch.compile(model, backend="tpu").

Dynamo captures the graph, AOTAutograd (with PyTorch's core ATen decompositions) turns it into
functional forward and backward graphs, and each graph is handed to C++ as a compact node list
that the same lowering table as eager mode turns into ONE XLA program per input signature.
A graph we cannot lower runs eagerly on the tpu instead (counted, and said once in the log).
"""

from __future__ import annotations

import collections
import itertools
import logging
import operator
import threading
import weakref
from typing import Any

import torch
import torch.fx
from torch._decomp import core_aten_decompositions
from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
# make_boxed_func from its own light module: torch._functorch.aot_autograd (and
# torch._dynamo.backends.common) import AOTAutograd's partitioners and networkx, 0.2-0.3 s that only
# torch.compile needs (see _tpu_backend); torchtpu.compile_step's first call does not pay them.
from torch._functorch._aot_autograd.utils import make_boxed_func
from torch._inductor.output_code import OutputCode

from . import _C
from . import _config
from . import _fake_impls


# Fake-tensor rules for tpu tensors (see _fake_impls), before Dynamo traces anything.
_fake_impls.register()

log = logging.getLogger("torchtpu.compile")

# Bumped whenever the recipe encoding (what _GraphLowering records) changes meaning.
_RECIPE_FORMAT = "torchtpu-graph-recipe-2"  # 2: host_inputs, host_outputs

_graph_ids = itertools.count()
# The graph table for graph_metrics(). A graph's executable (its programs) lives only as long as
# the Python object that runs it (a CompiledGraph, a dynamic graph's runner), which Dynamo drops
# with its cache entry (torch._dynamo.reset(), a recompile limit, the compiled function freed):
# the table holds a finalizer per live graph, not the graph, and keeps only the final counters of
# released graphs, the most recent _RETIRED_MAX of them. A workload that compiles ever new
# graphs thus keeps a bounded number of programs alive.
_RETIRED_MAX = 1024
_graphs: dict = {}  # name -> weakref.finalize(owner) whose args are (name, GraphExecutable)
_retired: "collections.OrderedDict[str, dict]" = collections.OrderedDict()
_eager_graphs: "collections.deque" = collections.deque(maxlen=_RETIRED_MAX)  # (name, reason)
# Graphs with collectives: (name, "in program" | "split", why split).
_collective_graphs: "collections.deque" = collections.deque(maxlen=_RETIRED_MAX)


# Specializations kept per dynamic graph (one per concrete signature) and per
# torchtpu.compile_step (one per traced signature): each holds its programs and constants on the
# device, so a workload of ever new sizes must not keep all of them. The least recently used go
# (counted in metrics()["graph_cache_evictions"]); a signature met again is specialized again,
# its program then coming from the disk cache by its recipe.
_SPECIALIZATIONS_MAX = 64


class _BoundedCache:
    """An LRU of specializations, `on_evict(key, value)` told of each one dropped."""

    def __init__(self, on_evict=None):
        self._entries: "collections.OrderedDict" = collections.OrderedDict()
        self._on_evict = on_evict

    def get(self, key):
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key, value) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > max(1, _SPECIALIZATIONS_MAX):
            old_key, old = self._entries.popitem(last=False)
            _C._count_graph_cache_eviction()
            if self._on_evict is not None:
                self._on_evict(old_key, old)

    def __len__(self) -> int:
        return len(self._entries)


def _retire(name: str, g) -> None:
    _graphs.pop(name, None)
    _retired[name] = g.stats()
    while len(_retired) > _RETIRED_MAX:
        _retired.popitem(last=False)


def _track(owner, name: str, g) -> None:
    """Counts `g` in graph_metrics() while `owner` lives; then keeps its counters only."""
    f = weakref.finalize(owner, _retire, name, g)
    f.atexit = False
    _graphs[name] = f


class _Unsupported(Exception):
    pass


def _decompositions():
    decomps = dict(core_aten_decompositions())
    # Ops the lowering table handles as a whole: keep them out of the decomposition table so the
    # graph keeps the fused op (one lowering instead of a chain of primitives).
    aten = torch.ops.aten
    for op in (aten.native_layer_norm.default,):
        decomps.pop(op, None)
    # Ops whose lowering checks its indices the way the CPU kernel does (device-side checks,
    # lowering/checks.h): the decompositions go through index_put/gather, which would accept
    # negative indices or raise another error type.
    for op in (aten.nll_loss_forward.default, aten.nll_loss_backward.default,
               aten.nll_loss2d_forward.default, aten.nll_loss2d_backward.default,
               aten.index_add.default, aten.index_copy.default, aten.index_fill.int_Scalar,
               aten.index_fill.int_Tensor, aten.max_unpool2d.default, aten.max_unpool3d.default):
        decomps.pop(op, None)
    # bernoulli(p) decomposes to rand_like(p) < p, which drops the CPU kernel's check that every
    # p is in [0, 1]; the lowering checks it on the device.
    decomps.pop(aten.bernoulli.default, None)
    return decomps


def _flatten_vals(val) -> list:
    if isinstance(val, (list, tuple)):
        out = []
        for v in val:
            out += _flatten_vals(v)
        return out
    if isinstance(val, torch.Tensor):
        if any(not isinstance(s, int) for s in val.shape):
            raise _Unsupported("symbolic shapes (dynamic=True) are not supported yet")
        return [(val.dtype, list(val.shape))]
    if val is None:
        return []
    raise _Unsupported(f"a node produces a {type(val).__name__}")


def _normalized_args(node: torch.fx.Node, schema) -> list:
    args = list(node.args)
    out = []
    for i, arg in enumerate(schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            out.append(args[i])
        elif arg.name in node.kwargs:
            out.append(node.kwargs[arg.name])
        elif arg.has_default_value():
            out.append(arg.default_value)
        else:
            out.append(None)
    return out


class _GraphLowering:
    """Turns an ATen FX graph into a GraphExecutable. With `concrete` (node -> value from
    running the graph on fake tensors of one concrete signature), symbolic sizes become
    constants: a dynamic graph is specialized per concrete signature."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, concrete: dict | None = None,
                 runtime_scalars: frozenset = frozenset()):
        self.gm = gm
        self.name = name
        self.concrete = concrete
        # Number placeholders that travel as runtime values (see _runtime_scalar_placeholders).
        self.runtime_scalars = runtime_scalars
        self.env: dict = {}
        self.constants: list[torch.Tensor] = []

    def val(self, n: torch.fx.Node):
        return self.concrete[n] if self.concrete is not None else n.meta.get("val")

    def encode(self, a: Any):
        if isinstance(a, torch.fx.Node):
            ref = self.env[a]
            if ref[0] == "multi":
                raise _Unsupported(f"{a} is a tuple used as a tensor")
            return ref
        if isinstance(a, (list, tuple)):
            items = [self.encode(x) if isinstance(x, torch.fx.Node) else x for x in a]
            if all(not isinstance(x, tuple) or x[0] == "const" for x in items):
                return ("const", [x[1] if isinstance(x, tuple) else x for x in items])
            if any(isinstance(x, torch.fx.Node) for x in a):
                return ("list", [("none",) if x is None else self.encode(x) for x in a])
            if any(isinstance(x, torch.SymInt) for x in a):
                raise _Unsupported("symbolic sizes (dynamic=True) are not supported yet")
            return ("const", list(a))
        if a is None:
            return ("none",)
        if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise _Unsupported("symbolic values (dynamic=True) are not supported yet")
        return ("const", a)

    def build(self):
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        get_attrs = [n for n in self.gm.graph.nodes if n.op == "get_attr"]
        tensors, scalars = [], []
        for n in placeholders:
            val = self.val(n)
            if isinstance(val, torch.Tensor):
                tensors.append(n)
            elif n in self.runtime_scalars:
                scalars.append(n)
            elif self.concrete is not None and isinstance(val, (int, float, bool)):
                self.env[n] = ("const", val)
            else:
                raise _Unsupported(f"graph input {n.name} is a {type(val).__name__}")
        # Inputs: the tensors, then the runtime scalars (0-d CPU tensors), then the constants.
        num_inputs = len(tensors) + len(scalars) + len(get_attrs)
        g = _C.GraphExecutable(self.name, num_inputs)
        # The same node list, kept as plain data: a serialized compiled graph (precompile) is
        # this recipe, and loading it replays it into a new GraphExecutable.
        self.recipe = {"num_inputs": num_inputs, "nodes": [], "outputs": None}
        for i, n in enumerate(tensors):
            self.env[n] = ("in", i)
        # A CPU tensor input (a model's plain tensor attribute that forward moves with
        # `.to(x.device)`, as Diffusers' QwenImage RoPE tables) is moved to tpu at each call: the
        # program reads it there, and its `_to_copy(device="tpu")` is then an identity. 0-d CPU
        # tensors need no move: they join tpu ops as runtime scalars, as on CUDA.
        self.recipe["host_inputs"] = [i for i, n in enumerate(tensors)
                                      if self.val(n).device.type == "cpu" and self.val(n).dim() > 0]
        for n in self.gm.graph.nodes:
            if (n.op == "call_function" and n.args and n.args[0] in tensors
                    and isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
                    and tensors.index(n.args[0]) in self.recipe["host_inputs"]):
                raise _Unsupported(f"{n.target} writes into the CPU input {n.args[0].name}")
        for k, n in enumerate(scalars):
            self.env[n] = ("scalar_in", len(tensors) + k, self.val(n))
        for j, n in enumerate(get_attrs):
            self.env[n] = ("in", len(tensors) + len(scalars) + j)
            self.constants.append(getattr(self.gm, n.target))
        outputs = None
        for n in self.gm.graph.nodes:
            if n.op in ("placeholder", "get_attr"):
                continue
            if n.op == "output":
                outputs = n.args[0]
                continue
            if n.op != "call_function":
                raise _Unsupported(f"{n.op} nodes")
            if n.target is operator.getitem:
                base = self.env[n.args[0]]
                if base[0] != "multi":
                    raise _Unsupported("getitem on a single tensor")
                # Outputs that are None (an output_mask left them out) take no slot; a list
                # result (the Tensor[] of a (Tensor[], Tensor) return) is indexed again.
                slot = base[2][n.args[1]]
                if slot is None:
                    self.env[n] = ("none",)
                elif isinstance(slot, list):
                    self.env[n] = ("multi", base[1], slot)
                else:
                    self.env[n] = ("node", base[1], slot)
                continue
            val = self.val(n)
            if self.concrete is not None and isinstance(val, (int, float, bool)):
                # Size arithmetic (sym_size, mul of sizes...): known once specialized.
                self.env[n] = ("const", val)
                continue
            if not isinstance(n.target, torch._ops.OpOverload):
                raise _Unsupported(f"call to {n.target}")
            schema = n.target._schema
            args = [self.encode(a) for a in _normalized_args(n, schema)]
            outs = _flatten_vals(val)
            try:
                idx = g.add_node(schema.name, schema.overload_name, args, outs)
            except NotImplementedError as e:
                raise _Unsupported(str(e).split("\n")[0]) from None
            self.recipe["nodes"].append((schema.name, schema.overload_name, args, outs))
            single = len(schema.returns) == 1 and str(schema.returns[0].type) == "Tensor"
            if single:
                self.env[n] = ("node", idx, 0)
            else:
                # Schema position -> flat output slot, skipping None results.
                slots, k = [], 0
                for v in (val if isinstance(val, (list, tuple)) else [val]):
                    if v is None:
                        slots.append(None)
                    elif isinstance(v, (list, tuple)):
                        items = []
                        for t in v:
                            items.append(None if t is None else k)
                            k += 0 if t is None else 1
                        slots.append(items)
                    else:
                        slots.append(k)
                        k += len(_flatten_vals(v))
                self.env[n] = ("multi", idx, slots)
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        encoded = []
        for o in outputs:
            if o is None or (isinstance(o, torch.fx.Node) and self.env[o][0] == "none"):
                encoded.append(("none",))
            elif isinstance(o, torch.fx.Node) and self.env[o][0] in ("in", "node"):
                encoded.append(self.env[o])
            else:
                raise _Unsupported(f"graph output {o!r}")
        g.set_outputs(encoded)
        self.recipe["outputs"] = encoded
        # Outputs the graph computes on the CPU (a factory with device="cpu", a CPU input's
        # arithmetic) are computed by the program and copied back, so they land where eager puts
        # them.
        self.recipe["host_outputs"] = [
            k for k, o in enumerate(outputs) if isinstance(o, torch.fx.Node)
            and isinstance(self.val(o), torch.Tensor) and self.val(o).device.type == "cpu"]
        return g


def _run_program(g, recipe: dict, args: list) -> list:
    """Runs a lowered graph: CPU tensor inputs go to tpu first, CPU outputs come back."""
    for i in recipe.get("host_inputs", ()):
        args[i] = args[i].to("tpu", non_blocking=True)
    out = g.run(args)
    host_outputs = recipe.get("host_outputs", ())
    if host_outputs:
        out = list(out)
        for k in host_outputs:
            if out[k] is not None:
                out[k] = out[k].cpu()
    return out


def _replay(name: str, recipe: dict):
    g = _C.GraphExecutable(name, recipe["num_inputs"])
    for op, overload, args, outs in recipe["nodes"]:
        g.add_node(op, overload, args, outs)
    g.set_outputs(recipe["outputs"])
    return g


def _is_dynamic(gm: torch.fx.GraphModule) -> bool:
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        for v in vals:
            if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                return True
            if isinstance(v, torch.Tensor) and any(not isinstance(d, int) for d in v.shape):
                return True
    return False


def _concrete_values(gm: torch.fx.GraphModule, args) -> dict:
    """Every node's value for these concrete inputs, computed on fake tensors (no device work).

    A plain walk over the nodes, not torch.fx.Interpreter: this runs at a dynamic graph's first
    call per signature, outside Dynamo's compile lock, often on the tpu autograd worker thread (a
    backward graph), so at the same time as another thread's AOTAutograd joint trace. While such
    a trace runs, torch.fx.traceback's node-meta state is on, and it is process-global
    (`should_preserve_node_meta`, `current_meta` in torch/fx/traceback.py);
    Interpreter.run_node then swaps `current_meta` for its node's meta (`set_current_meta`) in
    whichever thread it runs. The trace tags its backward nodes through that same dict
    (`set_partitioner_tag_is_backward` in torch/_functorch/_aot_autograd/
    graph_capture_wrappers.py `create_joint`), so it got our graph's "is_forward" tags or lost its
    grad_fn bookkeeping: "Node mul was invalid, but is output" from the partitioner, or "Expected
    current_level > 0, got 0" (issue 32). A PyTorch 2.13 defect, not ours: any fx.Interpreter run
    in another thread during a joint trace does this."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    values: dict = {}
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        inputs = iter([mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args])
        for n in gm.graph.nodes:
            if n.op == "placeholder":
                values[n] = next(inputs)
                continue
            a, kw = torch.fx.node.map_arg((n.args, n.kwargs), values.__getitem__)
            if n.op == "call_function":
                values[n] = n.target(*a, **kw)
            elif n.op == "call_method":
                values[n] = getattr(a[0], n.target)(*a[1:], **kw)
            elif n.op == "call_module":
                values[n] = gm.get_submodule(n.target)(*a, **kw)
            elif n.op == "get_attr":
                values[n] = operator.attrgetter(n.target)(gm)
            elif n.op == "output":
                values[n] = a[0]
    return values


# Where an op can take a symbolic int argument as a runtime value (its lowering reads it through
# LoweringContext::number): (op, argument position). Scalar- and Tensor-typed positions always can.
_RUNTIME_INT_POSITIONS = {(torch.ops.aten.select.int, 2)}


def _runtime_scalar_placeholders(gm: torch.fx.GraphModule) -> frozenset:
    """The number inputs of a dynamic graph (a compiled function's Python int, which Dynamo
    makes symbolic once it sees a second value) that only feed ops as values: they travel to
    the program at run time, so a new value reuses the program. A number that decides a shape
    (a slice bound, a size) stays part of the signature."""
    out = set()
    for n in gm.graph.nodes:
        if n.op != "placeholder" or not isinstance(n.meta.get("val"), (torch.SymInt, torch.SymFloat)):
            continue
        ok = bool(n.users)
        for user in n.users:
            val = user.meta.get("val")
            vals = val if isinstance(val, (list, tuple)) else [val]
            # An op that turns the number into another number (size arithmetic) would be
            # folded into a constant of this call's value: such inputs stay in the signature.
            if not isinstance(user.target, torch._ops.OpOverload) or not all(
                    isinstance(v, torch.Tensor) for v in vals):
                ok = False
                break
            schema = user.target._schema
            for i, (a, sa) in enumerate(zip(_normalized_args(user, schema), schema.arguments)):
                if a is n:
                    t = str(sa.type)
                    ok &= t in ("Scalar", "Scalar?", "Tensor") or (
                        (user.target, i) in _RUNTIME_INT_POSITIONS)
                elif isinstance(a, (list, tuple)) and any(x is n for x in a):
                    ok = False
        if ok:
            out.add(n)
    return frozenset(out)


def _compile_dynamic(gm: torch.fx.GraphModule, name: str):
    """A graph with symbolic sizes: specialized and compiled once per concrete signature. Number
    inputs that only feed ops as values are runtime arguments, not part of that signature."""
    def evicted(key, entry):
        # Its finalizer holds the executable for graph_metrics(): retire it now, not with `run`.
        f = _graphs.get(entry[3])
        if f is not None:
            f()

    specialized = _BoundedCache(evicted)
    names = itertools.count()
    runtime_scalars = _runtime_scalar_placeholders(gm)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    runtime_pos = [i for i, n in enumerate(placeholders) if n in runtime_scalars]

    def run(*args):
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor)
                    else (type(a),) if i in runtime_pos else a for i, a in enumerate(args))
        entry = specialized.get(key)
        if entry is None:
            sub = f"{name}.{next(names)}"
            try:
                lowering = _GraphLowering(gm, sub, _concrete_values(gm, args), runtime_scalars)
                g = lowering.build()
                _track(run, sub, g)
                entry = (g, [c.to("tpu") for c in lowering.constants], lowering.recipe, sub)
            except _Unsupported as e:
                _eager_graphs.append((sub, str(e)))
                log.warning("torchtpu: graph %s runs eagerly on tpu (not compiled): %s", sub, e)
                entry = (None, [], {}, sub)
            specialized.put(key, entry)
        g, constants, recipe, _ = entry
        if g is None:
            return gm.forward(*args)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        # Python floats travel in f32 as in eager mode (f64 only with f64 data, which the
        # program's other inputs decide), ints in s64.
        scalars = [torch.tensor(args[i], dtype=torch.int64 if isinstance(args[i], int)
                                else torch.float32) for i in runtime_pos]
        return _run_program(g, recipe, tensors + scalars + constants)

    return make_boxed_func(run)


class CompiledGraph(OutputCode):
    """One FX graph as one XLA program. An OutputCode, so AOTAutograd can bundle it and
    `torch.compile(...).aot_compile(...)` can save it: what is saved is the lowering recipe (plain
    data) and the graph's constants; loading replays the recipe, and the program itself comes
    from the persistent compilation cache."""

    def __init__(self, name: str, recipe: dict, constants: list, gm=None, executable=None):
        # An instance attribute: wrappers (torch._dynamo.disable) copy __dict__, not the class.
        self._boxed_call = True
        self.name = name
        self.recipe = recipe
        self.constants = constants
        self.gm = gm  # for the eager fallback; not serialized
        self._g = None
        self._eager = False
        if executable is not None:
            self._adopt(executable)

    def _adopt(self, g) -> None:
        self._g = g
        _track(self, self.name, g)
        self.constants = [c.to("tpu") if c.device.type != "tpu" else c for c in self.constants]

    def _executable(self):
        if self._g is None:
            self._adopt(_replay(self.name, self.recipe))
        return self._g

    def __call__(self, args):
        if self._eager:
            return self.gm.forward(*args)
        try:
            return _run_program(self._executable(), self.recipe, list(args) + self.constants)
        except NotImplementedError as e:
            if self.gm is None:
                raise
            # A lowering declined this signature (e.g. a dtype it cannot handle).
            self._eager = True
            _eager_graphs.append((self.name, str(e).split("\n")[0]))
            log.warning("torchtpu: graph %s falls back to eager on tpu: %s", self.name, e)
            return self.gm.forward(*args)

    def __getstate__(self):
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        # AOTAutograd serializes inside its fake mode; the constants are real tensors.
        with unset_fake_temporarily():
            constants = [c.cpu() for c in self.constants]
        return {"format": _RECIPE_FORMAT, "name": self.name, "recipe": self.recipe,
                "constants": constants}

    def __setstate__(self, state):
        if state.get("format") != _RECIPE_FORMAT:
            # AOTAutograd's cache treats a failed load as a bypass and compiles afresh.
            raise RuntimeError(f"torchtpu: compiled graph {state.get('name')} was saved by another "
                               f"torchtpu (format {state.get('format')}, this one reads "
                               f"{_RECIPE_FORMAT}); recompiling")
        # A fresh name, so graphs loaded from the cache and compiled here never share metrics.
        self.__init__(f"g{next(_graph_ids)}", state["recipe"], state["constants"])

    def prepare_for_serialization(self) -> None:
        pass

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        self._executable()

    def set_triton_bundle(self, triton_bundle) -> None:
        pass


class _InProgramCollectivesGraph(CompiledGraph):
    """A graph whose collectives are inside its program. Not saved in AOTAutograd's cache: whether
    its groups can run collectives in programs is decided per process (their ranks' devices), so
    another process compiles it afresh (and splits it when its groups stage through the host)."""

    def __getstate__(self):
        from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

        raise BypassAOTAutogradCache(f"torchtpu: graph {self.name} holds collectives")


class _UncachedGraph(OutputCode):
    """A graph that is not one fixed program (it runs eagerly, or is specialized per call): it
    tells AOTAutograd's cache to pass it by instead of saving it."""

    def __init__(self, fn, reason: str):
        self._boxed_call = True
        self.fn = fn
        self.reason = reason

    def __call__(self, args):
        return self.fn(args)

    def __getstate__(self):
        from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

        raise BypassAOTAutogradCache(f"torchtpu: {self.reason}")

    def prepare_for_serialization(self) -> None:
        pass

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        pass

    def set_triton_bundle(self, triton_bundle) -> None:
        pass


def _compile_graph(gm: torch.fx.GraphModule, example_inputs):
    name = f"g{next(_graph_ids)}"
    if _is_dynamic(gm):
        return _UncachedGraph(_compile_dynamic(gm, name), "a dynamic graph is specialized per call")
    from .distributed import _compile as _dist_compile

    collectives = _dist_compile.has_collectives(gm)
    if collectives:
        why = _dist_compile.in_program_reason(gm)
        if why is None:
            try:
                lowering = _GraphLowering(gm, name)
                g = lowering.build()
                log.info("torchtpu: graph %s runs its collectives inside its program", name)
                _collective_graphs.append((name, "in program", ""))
                return _InProgramCollectivesGraph(name, lowering.recipe, lowering.constants, gm,
                                                  executable=g)
            except _Unsupported as e:
                why = str(e)
        # Compiled segments; the collectives run between them through the process group.
        log.info("torchtpu: graph %s is split at its collectives: %s", name, why)
        _collective_graphs.append((name, "split", why))
        split = _dist_compile.split_at_collectives(gm, _compile_graph)
        return _UncachedGraph(split, f"graph {name} is split at its collectives")
    try:
        lowering = _GraphLowering(gm, name)
        g = lowering.build()
    except _Unsupported as e:
        _eager_graphs.append((name, str(e)))
        log.warning("torchtpu: graph %s runs eagerly on tpu (not compiled): %s", name, e)
        return _UncachedGraph(make_boxed_func(gm.forward), f"graph {name} runs eagerly")
    return CompiledGraph(name, lowering.recipe, lowering.constants, gm, executable=g)


def _make_backend():
    from torch._dynamo.backends.common import AotAutograd

    class _TpuAotAutograd(AotAutograd):
        """AOTAutograd with its bundled cache on, so a later process with the same graph skips
        AOTAutograd's tracing and partitioning (the entry holds our lowering recipe; the program
        comes from torchtpu's own compilation cache). Off with TORCHTPU_CACHE=0."""

        def __call__(self, gm, example_inputs, **kwargs):
            import torch._functorch.config as functorch_config

            if not _config.flag("TORCHTPU_CACHE", True):
                patch = {"enable_autograd_cache": False}
            else:
                # The backward is lowered with the forward (not lazily at the first backward,
                # outside this patch), so the cache entry holds both.
                patch = {"bundled_autograd_cache": True, "force_non_lazy_backward_lowering": True}
            with functorch_config.patch(patch):
                return super().__call__(gm, example_inputs, **kwargs)

    # Declared serializable (it returns CompiledGraph objects): AOTAutograd's cache can keep the
    # result, and `torch.compile(...).aot_compile()` can save a compiled function that a later
    # process loads without tracing again.
    compiler = SerializableAOTDispatchCompiler(CompiledGraph, _compile_graph)
    return _TpuAotAutograd(
        fw_compiler=compiler,
        bw_compiler=compiler,
        inference_compiler=compiler,
        decompositions=decomposition_table(),
        keep_inference_input_mutations=True,
    )


_table: dict | None = None
_backend = None
# Threads that compile their first graph at once build the table and the backend once.
_build_lock = threading.Lock()


def decomposition_table() -> dict:
    """The one decomposition table of backend="tpu" and torchtpu.compile_step (built once: the
    core ATen table takes 0.1-0.2 s to build the first time), with register_decomposition's ops."""
    global _table
    with _build_lock:
        if _table is None:
            _table = _decompositions()
        return _table


def __getattr__(name: str):
    # `tpu_backend` (what backend="tpu" calls, see torchtpu._compile_backend) is made at first
    # use, with AOTAutograd.
    global _backend
    if name == "tpu_backend":
        if _backend is None:
            made = _make_backend()  # takes _build_lock itself (the decomposition table)
            with _build_lock:
                if _backend is None:
                    _backend = made
        return _backend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_decomposition(op, fn) -> None:
    """Traces `op` as `fn` in the graphs AOTAutograd makes for backend="tpu" and in
    torchtpu.compile_step's (torchtpu.jax_op's ops become torchtpu::stablehlo_call, which the
    lowering table inlines)."""
    decomposition_table()[op] = fn


def graph_metrics() -> dict:
    """Per compiled graph: compiles, compile seconds, executions, launch seconds."""
    out = dict(_retired)
    for f in list(_graphs.values()):
        live = f.peek()  # None once its owner is gone
        if live is not None:
            name, g = live[2]
            out[name] = g.stats()
    for name, reason in _eager_graphs:
        out.setdefault(name, {})["eager_reason"] = reason
    for name, how, why in _collective_graphs:
        out.setdefault(name, {})["collectives"] = how if not why else f"{how}: {why}"
    return out
