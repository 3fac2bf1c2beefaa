"""The one lowering table holds one entry per op: a name registered twice would make the entry
in use depend on the order static initializers run across files."""

import subprocess
import sys
from pathlib import Path

import torchtpu

ROOT = Path(__file__).resolve().parents[2]


def test_no_op_is_registered_twice():
    assert torchtpu._C._duplicate_lowerings() == []


def test_table_lists_core_ops():
    names = set(torchtpu._C._lowered_ops())
    for op in ("aten::add.Tensor", "aten::mm", "aten::count_nonzero.dim_IntList",
               "aten::_grouped_mm", "aten::gcd", "aten::_weight_norm_interface"):
        assert op in names, op


def test_descriptors_state_each_ops_facts():
    # One descriptor per op, read by both execution paths: complex support and graph-only entries
    # are flags of the registration, not lists kept elsewhere.
    facts = dict(torchtpu._C._op_descriptors())
    assert set(facts) == set(torchtpu._C._lowered_ops())
    assert facts["aten::add.Tensor"] == ["complex"]
    assert facts["aten::_fft_c2c"] == ["complex"]
    assert facts["aten::view_as_real"] == ["complex", "graph_only"]
    assert facts["aten::view"] == ["complex", "graph_only"]
    assert facts["aten::rand"] == ["graph_only"]
    assert facts["aten::relu"] == []
    # Eager copy_ lowers aten::copy; a compiled graph keeps copy_ to write a mutated input.
    assert facts["aten::copy"] == ["complex"]
    assert facts["aten::copy_"] == ["complex", "graph_only", "overwrites_self"]
    # Collectives inside programs (lowering/collectives.cpp): graph-only, as the eager op goes to
    # the process group, which builds its programs from the same lowerings.
    assert facts["_c10d_functional::all_reduce"] == ["graph_only", "collective"]
    assert facts["_c10d_functional::wait_tensor"] == ["complex", "graph_only"]
    assert all(set(f) <= {"complex", "graph_only", "overwrites_self", "collective"}
               for f in facts.values())


def test_ops_page_is_generated_from_the_descriptors():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "op_table.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
