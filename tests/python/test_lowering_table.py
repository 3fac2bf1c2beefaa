"""The one lowering table holds one entry per op: a name registered twice would make the entry
in use depend on the order static initializers run across files."""

import torchtpu


def test_no_op_is_registered_twice():
    assert torchtpu._C._duplicate_lowerings() == []


def test_table_lists_core_ops():
    names = set(torchtpu._C._lowered_ops())
    for op in ("aten::add.Tensor", "aten::mm", "aten::count_nonzero.dim_IntList",
               "aten::_grouped_mm", "aten::gcd", "aten::_weight_norm_interface"):
        assert op in names, op
