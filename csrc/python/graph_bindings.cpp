// torchtpu._C.GraphExecutable: the compile backend hands C++ a compact node list built from
// the FX graph; C++ lowers it through the shared lowering table.
#include <torch/csrc/Dtype.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include "exec/graph_executor.h"

namespace py = pybind11;

namespace torchtpu::python {
namespace {

using exec::GraphArg;

c10::TypePtr element_type_of(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  if (auto list = t->cast<c10::ListType>()) return list->getElementType();
  return t;
}

// ("in", i) | ("scalar_in", i, sample) | ("node", n, k) | ("list", [..]) | ("const", value) |
// ("none",)
GraphArg to_graph_arg(py::handle obj, const c10::TypePtr& type) {
  py::tuple t = py::reinterpret_borrow<py::tuple>(obj);
  std::string tag = py::cast<std::string>(t[0]);
  GraphArg a;
  if (tag == "in") {
    a.kind = GraphArg::Kind::kInput;
    a.index = py::cast<int>(t[1]);
  } else if (tag == "scalar_in") {
    a.kind = GraphArg::Kind::kScalarInput;
    a.index = py::cast<int>(t[1]);
    py::handle v = t[2];
    a.constant = py::isinstance<py::bool_>(v)  ? c10::IValue(py::cast<bool>(v))
                 : py::isinstance<py::int_>(v) ? c10::IValue(py::cast<int64_t>(v))
                                               : c10::IValue(py::cast<double>(v));
  } else if (tag == "node") {
    a.kind = GraphArg::Kind::kNode;
    a.index = py::cast<int>(t[1]);
    a.output = py::cast<int>(t[2]);
  } else if (tag == "list") {
    a.kind = GraphArg::Kind::kList;
    c10::TypePtr elem = element_type_of(type);
    for (py::handle item : py::reinterpret_borrow<py::list>(t[1])) {
      a.items.push_back(to_graph_arg(item, elem));
    }
  } else if (tag == "const") {
    a.kind = GraphArg::Kind::kConst;
    c10::TypePtr base = type;
    if (auto opt = base->cast<c10::OptionalType>()) base = opt->getElementType();
    py::handle v = t[1];
    const bool is_complex = PyComplex_Check(v.ptr());
    if (base->kind() == c10::TypeKind::TensorType &&
        (py::isinstance<py::bool_>(v) || py::isinstance<py::int_>(v) ||
         py::isinstance<py::float_>(v) || is_complex)) {
      // Decompositions pass Python numbers where the schema says Tensor: a wrapped number
      // (`x * 0.5j` traces to mul.Tensor(x, 0.5j)).
      a.constant = py::isinstance<py::bool_>(v)  ? c10::IValue(py::cast<bool>(v))
                   : py::isinstance<py::int_>(v) ? c10::IValue(py::cast<int64_t>(v))
                   : is_complex                  ? c10::IValue(py::cast<c10::complex<double>>(v))
                                                 : c10::IValue(py::cast<double>(v));
    } else {
      a.constant = torch::jit::toIValue(v, type);
    }
  } else {
    a.kind = GraphArg::Kind::kNone;
  }
  return a;
}

}  // namespace

void bind_graph(py::module& m) {
  py::class_<exec::GraphExecutable, std::shared_ptr<exec::GraphExecutable>>(m, "GraphExecutable")
      .def(py::init<std::string, int>())
      .def("add_node",
           [](exec::GraphExecutable& g, const std::string& op, const std::string& overload,
              py::list args, py::list out_types) {
             auto handle = c10::Dispatcher::singleton().findOp({op, overload});
             TORCH_CHECK(handle.has_value(), "torchtpu: unknown operator ", op, ".", overload);
             const auto& sargs = handle->schema().arguments();
             TORCH_CHECK(args.size() == sargs.size(), "torchtpu: ", op, " expects ", sargs.size(),
                         " arguments, got ", args.size());
             std::vector<exec::GraphArg> converted;
             for (size_t i = 0; i < sargs.size(); ++i) {
               converted.push_back(to_graph_arg(args[i], sargs[i].type()));
             }
             std::vector<lowering::TensorType> types;
             for (py::handle item : out_types) {
               py::tuple pair = py::reinterpret_borrow<py::tuple>(item);
               TORCH_CHECK(THPDtype_Check(pair[0].ptr()), "torchtpu: expected a torch.dtype");
               auto st = reinterpret_cast<THPDtype*>(pair[0].ptr())->scalar_type;
               types.push_back(lowering::TensorType(lowering::to_element_type(st),
                                                    py::cast<std::vector<int64_t>>(pair[1])));
             }
             return g.add_node(op, overload, std::move(converted), std::move(types));
           })
      .def("set_outputs",
           [](exec::GraphExecutable& g, py::list outs) {
             std::vector<exec::GraphArg> converted;
             for (py::handle o : outs) converted.push_back(to_graph_arg(o, c10::TensorType::get()));
             g.set_outputs(std::move(converted));
           })
      .def("run",
           [](exec::GraphExecutable& g, const std::vector<at::Tensor>& inputs) {
             std::vector<c10::IValue> results;
             {
               py::gil_scoped_release no_gil;
               results = g.run(inputs);
             }
             py::list out;
             for (const auto& r : results) {
               if (r.isTensor()) {
                 out.append(py::cast(r.toTensor()));
               } else {
                 out.append(py::none());
               }
             }
             return out;
           })
      .def("prepare",
           [](exec::GraphExecutable& g, const std::vector<at::Tensor>& inputs) {
             py::gil_scoped_release no_gil;
             return g.prepare(inputs);
           })
      .def("stats", [](const exec::GraphExecutable& g) {
        exec::GraphStats s = g.stats();
        py::dict d;
        d["compiles"] = s.compiles;
        d["compile_seconds"] = s.compile_seconds;
        d["executions"] = s.executions;
        d["launch_seconds"] = s.launch_seconds;
        return d;
      });
}

}  // namespace torchtpu::python
