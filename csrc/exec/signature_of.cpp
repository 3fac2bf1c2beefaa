#include "exec/signature_of.h"

#include <c10/core/DefaultDtype.h>

#include <sstream>

#include "lowering/lowering.h"
#include "runtime/runtime.h"

namespace torchtpu::exec {
namespace {

using runtime::SigEntry;

// Storages numbered in the order the call reads them (parameters interleave runtime scalars).
int storage_ordinal(const CallState& state, int param) {
  int n = 0;
  for (int i = 0; i < param; ++i)
    n += state.params[static_cast<size_t>(i)].kind == Param::Kind::kStorage;
  return n;
}

SigEntry tensor_entry(const CallState& state, const ArgDesc& d, const at::Tensor& t) {
  SigEntry e;
  if (d.kind == ArgDesc::Kind::kNone || !t.defined()) return e;
  const Param& p = state.params.at(static_cast<size_t>(d.param));
  e.dtype = c10::toString(d.dtype);
  if (p.kind == Param::Kind::kCpuTensor) {
    e.kind = SigEntry::Kind::kCpuScalar;
    return e;
  }
  e.kind = SigEntry::Kind::kTensor;
  // A size-generic call's tensors are what its program reads: a whole bucket, or one element.
  e.sizes = state.generic ? d.view.sizes : t.sizes().vec();
  e.strides = state.generic ? d.view.strides : t.strides().vec();
  e.storage = storage_ordinal(state, d.param);
  e.runtime_offset = d.offset_param >= 0;
  e.storage_dims = p.dims;
  e.storage_dtype = c10::toString(lowering::to_scalar_type(p.dtype));
  e.storage_written = p.buffer != nullptr;
  return e;
}

SigEntry entry_of(const CallState& state, const ArgDesc& d, const c10::IValue& v) {
  SigEntry e;
  switch (d.kind) {
    case ArgDesc::Kind::kTensor:
      return tensor_entry(state, d, v.isTensor() ? v.toTensor() : at::Tensor());
    case ArgDesc::Kind::kTensorList: {
      e.kind = SigEntry::Kind::kList;
      std::vector<c10::IValue> items;
      if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorVector()) items.emplace_back(t);
      } else if (v.isList()) {
        for (const c10::IValue& item : v.toList()) items.push_back(item);
      }
      for (size_t j = 0; j < d.items.size(); ++j) {
        const c10::IValue& item = j < items.size() ? items[j] : c10::IValue();
        e.items.push_back(
            tensor_entry(state, d.items[j], item.isTensor() ? item.toTensor() : at::Tensor()));
      }
      return e;
    }
    case ArgDesc::Kind::kScalar:
      e.kind = SigEntry::Kind::kScalar;
      e.dtype = c10::toString(d.dtype);
      return e;
    case ArgDesc::Kind::kDefaultScalar:
      e.kind = SigEntry::Kind::kDefaultScalar;
      return e;
    case ArgDesc::Kind::kScalarList:
      e.kind = SigEntry::Kind::kRuntimeInts;
      e.value = std::to_string(d.items.size());
      return e;
    case ArgDesc::Kind::kGenerator:
      e.kind = SigEntry::Kind::kGenerator;
      return e;
    case ArgDesc::Kind::kConst: {
      e.kind = SigEntry::Kind::kConst;
      std::ostringstream os;
      os << v;
      e.value = os.str();
      return e;
    }
    case ArgDesc::Kind::kNone:
      return e;
  }
  return e;
}

}  // namespace

namespace {

// torch's numeric settings (numerics.h), named where they differ from torch's defaults so that
// a recompile after changing one says so.
void add_numerics(runtime::Signature& sig, const CallState& state) {
  if (state.numerics != Numerics()) sig.context.push_back(describe(state.numerics));
}

}  // namespace

runtime::Signature eager_signature(const std::string& op, const c10::FunctionSchema& schema,
                                   const CallState& state, const torch::jit::Stack& stack,
                                   size_t first) {
  runtime::Signature sig;
  sig.op = op;
  sig.platform = runtime::get().platform();
  // The default dtype decides what a Python float promotes to (the Scanner keys it too).
  sig.context.push_back("default dtype " + std::string(c10::toString(c10::typeMetaToScalarType(
                                               c10::get_default_dtype()))));
  add_numerics(sig, state);
  if (state.generic) sig.context.push_back("size-generic");
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size() && i < state.args.size(); ++i) {
    sig.args.push_back(entry_of(state, state.args[i], stack[first + i]));
    sig.args.back().name = args[i].name();
  }
  return sig;
}

runtime::Signature graph_signature(const std::string& structure, const std::string& name,
                                   const CallState& state, const std::vector<at::Tensor>& inputs) {
  runtime::Signature sig;
  sig.op = "graph " + structure;
  sig.display = "graph " + name;
  sig.platform = runtime::get().platform();
  add_numerics(sig, state);
  for (size_t i = 0; i < inputs.size() && i < state.args.size(); ++i) {
    sig.args.push_back(tensor_entry(state, state.args[i], inputs[i]));
    sig.args.back().name = "input" + std::to_string(i);
  }
  return sig;
}

}  // namespace torchtpu::exec
