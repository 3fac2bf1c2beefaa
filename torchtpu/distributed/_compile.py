"""Functional collectives (torch.distributed._functional_collectives, what DTensor and FSDP2
emit under torch.compile) in graphs compiled with backend="tpu".

When every group the graph's collectives use runs its collectives inside XLA programs (its ranks'
devices are one PJRT world: torchtpu.distributed.transport(group) is "xla"), the collectives are
lowered into the graph's one program like any other op (lowering/collectives.cpp): a compiled
DDP/FSDP step is then one program per rank per step. `in_program_reason` says whether that holds.

Otherwise (host-staged groups: several processes on XLA:CPU, TORCHTPU_COLLECTIVES=host, the
in-place c10d ops) the graph is split at its collectives: each run of other nodes becomes one
compiled program (the same lowering as any graph), and the collectives (with their wait_tensor
and getitem nodes) run eagerly between the programs through the process group's tpu backend, in
graph order.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

_COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d", "_c10d_functional_autograd")


def _is_collective(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:  # an element of a coalesced collective's result
        base = node.args[0]
        return isinstance(base, torch.fx.Node) and _is_collective(base)
    return (isinstance(node.target, torch._ops.OpOverload)
            and node.target.namespace in _COLLECTIVE_NAMESPACES)


def has_collectives(gm: torch.fx.GraphModule) -> bool:
    return any(_is_collective(n) for n in gm.graph.nodes)


def in_program_reason(gm: torch.fx.GraphModule) -> str | None:
    """None when one program can hold every collective of `gm` on this thread's current tpu
    device; else why the graph must be split at them."""
    from torchtpu import _C

    names: set[str] = set()
    for n in gm.graph.nodes:
        if not _is_collective(n) or n.target is operator.getitem:
            continue
        if n.target.namespace != "_c10d_functional":
            return f"{n.target} has no lowering inside programs (only _c10d_functional ops do)"
        if n.target is torch.ops._c10d_functional.wait_tensor.default:
            continue
        schema = n.target._schema
        pos = next((i for i, a in enumerate(schema.arguments) if a.name == "group_name"), None)
        if pos is None:
            return f"{n.target} names no process group"
        name = n.args[pos] if pos < len(n.args) else n.kwargs.get("group_name")
        if not isinstance(name, str):
            return f"{n.target}'s group is not a constant name ({name!r})"
        names.add(name)
    if not names:
        return None
    device = torch.tpu.current_device()
    why = _C._plan_collectives(device, sorted(names))
    return why or None


def split_at_collectives(gm: torch.fx.GraphModule, compile_segment):
    """A boxed callable running `gm` as compiled segments (compile_segment(sub_gm, None) ->
    a boxed OutputCode) and eager collective segments, alternating in graph order."""
    from torch.fx.passes.split_module import split_module

    partition: dict[torch.fx.Node, int] = {}
    current, current_is_collective = 0, None
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output", "get_attr"):
            continue
        kind = _is_collective(n)
        if current_is_collective is not None and kind != current_is_collective:
            current += 1
        current_is_collective = kind
        partition[n] = current
    collective_parts = {p for n, p in partition.items() if _is_collective(n)}
    split = split_module(gm, None, lambda n: partition[n], keep_original_order=True)
    for name, sub in list(split.named_children()):
        if int(name.rsplit("_", 1)[1]) in collective_parts:
            continue  # runs eagerly as an FX module
        setattr(split, name, _Segment(sub, compile_segment(sub, None)))

    def run(args):
        args = list(args)
        return split(*args)

    run._boxed_call = True
    return run


class _Segment(torch.nn.Module):
    """A compiled segment called like the FX submodule it replaces (positional args; a single
    value when the submodule returns one)."""

    def __init__(self, sub: torch.fx.GraphModule, compiled):
        super().__init__()
        self.compiled = compiled
        out = next(n for n in sub.graph.nodes if n.op == "output")
        self.single = not isinstance(out.args[0], (list, tuple))

    def forward(self, *args):
        outs = self.compiled(list(args))
        return outs[0] if self.single else tuple(outs)
