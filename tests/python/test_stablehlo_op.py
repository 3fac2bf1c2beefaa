"""torchtpu.stablehlo_op runs a StableHLO module as a tpu op (its own cached program eagerly,
inlined into a compiled graph's program); results compared with the same math on the CPU.
torchtpu.jax_op is tested in test_jax_op.py."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import torchtpu
import torchtpu._dynamo
from conftest import new_graphs

MUL_SIN = """
func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>) {
  %0 = stablehlo.multiply %a, %b : tensor<4xf32>
  %1 = stablehlo.sine %0 : tensor<4xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %2 = stablehlo.reduce(%1 init: %z) applies stablehlo.add across dimensions = [0]
       : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  return %1, %2 : tensor<4xf32>, tensor<f32>
}
"""


def compiles():
    return torchtpu.metrics()["programs_compiled"]


def test_stablehlo_op_matches_cpu_and_is_cached():
    a, b = torch.randn(4), torch.randn(4)
    y, s = torchtpu.stablehlo_op(MUL_SIN, a.to("tpu"), b.to("tpu"))
    assert_close(y.cpu(), torch.sin(a * b))
    assert_close(s.cpu(), torch.sin(a * b).sum())
    before = compiles()
    a2 = torch.randn(4)
    y2, _ = torchtpu.stablehlo_op(MUL_SIN, a2.to("tpu"), b.to("tpu"))
    assert compiles() == before
    assert_close(y2.cpu(), torch.sin(a2 * b))


def test_stablehlo_op_rejects_inputs_the_module_does_not_take():
    x = torch.randn(4, device="tpu")
    with pytest.raises(ValueError, match=r"takes \(tensor<4xf32>, tensor<4xf32>\) but was given "
                                         r"\(tensor<4xf32>, tensor<5xf32>\)"):
        torchtpu.stablehlo_op(MUL_SIN, x, torch.randn(5, device="tpu"))
    with pytest.raises(ValueError, match="tensor<4xf64>"):
        torchtpu.stablehlo_op(MUL_SIN, x, x.double())
    with pytest.raises(ValueError, match="dynamic dimensions"):
        torchtpu.stablehlo_op("func.func @main(%a: tensor<?xf32>) -> tensor<?xf32> {\n"
                              "  return %a : tensor<?xf32>\n}", x)
    assert_close((x + 1).cpu(), x.cpu() + 1)  # the process stays usable


def test_stablehlo_op_says_when_the_plugin_rejects_the_module():
    bad = ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
           "  %0 = stablehlo.frobnicate %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}")
    with pytest.raises(RuntimeError, match=r"(?s)plugin rejected the module.*frobnicate.*"
                                           r"reads StableHLO up to version \d+\.\d+"):
        torchtpu.stablehlo_op(bad, torch.randn(4, device="tpu"))


def test_stablehlo_op_is_inlined_into_a_compiled_graph():
    a, b = torch.randn(4), torch.randn(4)

    def f(x, y):
        return torchtpu.stablehlo_op(MUL_SIN, x * 2, y)[0] + 1

    compiled = torch.compile(f, backend="tpu", fullgraph=True)
    graphs_before = set(torchtpu._dynamo.graph_metrics())
    out = compiled(a.to("tpu"), b.to("tpu"))
    assert_close(out.cpu(), torch.sin(2 * a * b) + 1)
    before = compiles()
    out = compiled(b.to("tpu"), a.to("tpu"))
    assert compiles() == before
    assert_close(out.cpu(), torch.sin(2 * a * b) + 1)
    # Only this test's graphs: earlier tests in the process may have graphs that run eagerly.
    graphs = new_graphs(graphs_before)
    assert graphs and not [g for g in graphs.values() if "eager_reason" in g], graphs
