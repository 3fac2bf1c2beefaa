#include "aten/executor.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "aten/host_transfer.h"
#include "device/current_device.h"
#include "device/generator.h"
#include "lowering/strided.h"
#include "runtime/compile.h"
#include "runtime/inflight.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"

namespace torchtpu::aten {
namespace {

using lowering::LArg;
using lowering::StridedView;
using shlo::ElementType;
using shlo::TensorType;
using shlo::Value;

// ---------------------------------------------------------------------------------------------
// Per-call state: the signature key and the runtime values that feed the program's parameters.

struct Param {
  enum class Kind { kStorage, kScalar, kCpuTensor, kGenerator } kind;
  // kStorage
  c10::StorageImpl* storage = nullptr;
  device::BufferPtr buffer;
  std::vector<int64_t> dims;
  ElementType dtype = ElementType::kF32;
  // kScalar / kCpuTensor
  c10::Scalar scalar;
  size_t arg_index = 0;  // kGenerator: where the Generator? sits on the stack
  at::Tensor cpu_tensor;
};

struct ArgDesc {
  enum class Kind { kTensor, kTensorList, kScalar, kDefaultScalar, kGenerator, kConst, kNone };
  Kind kind = Kind::kNone;
  int param = -1;  // tensor / scalar / generator
  StridedView view;
  c10::ScalarType dtype = c10::kFloat;
  std::vector<ArgDesc> items;  // kTensorList (kNone entries for absent optionals)
};

struct CallState {
  std::string key;
  std::vector<Param> params;
  std::vector<ArgDesc> args;  // one per called-op argument
  int device = -1;
  bool any_f64 = false;
};

void put(std::string& key, int64_t v) { key.append(reinterpret_cast<const char*>(&v), 8); }
void put(std::string& key, char c) { key.push_back(c); }
void put_ints(std::string& key, c10::IntArrayRef v) {
  put(key, static_cast<int64_t>(v.size()));
  key.append(reinterpret_cast<const char*>(v.data()), v.size() * 8);
}

std::string device_str(int index) { return "tpu:" + std::to_string(index); }

bool is_scalar_type(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::NumberType) return true;
  if (auto opt = t->cast<c10::OptionalType>()) {
    return opt->getElementType()->kind() == c10::TypeKind::NumberType;
  }
  return false;
}

bool is_generator_type(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::GeneratorType) return true;
  if (auto opt = t->cast<c10::OptionalType>()) {
    return opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

ElementType scalar_element_type(const c10::Scalar& s, bool any_f64) {
  if (s.isBoolean()) return ElementType::kPred;
  if (s.isIntegral(false)) return ElementType::kS64;
  TORCH_CHECK_NOT_IMPLEMENTED(!s.isComplex(), "torchtpu: complex scalars are not supported");
  // Python floats are doubles; f32 keeps programs TPU-friendly unless f64 data is involved.
  return any_f64 ? ElementType::kF64 : ElementType::kF32;
}

bool same_scalar(const c10::Scalar& a, const c10::Scalar& b) {
  if (a.type() != b.type()) return false;
  if (a.isBoolean()) return a.toBool() == b.toBool();
  if (a.isIntegral(false)) return a.toLong() == b.toLong();
  if (a.isFloatingPoint()) {
    double x = a.toDouble(), y = b.toDouble();
    return std::memcmp(&x, &y, sizeof(double)) == 0;
  }
  return false;
}

class Scanner {
 public:
  explicit Scanner(CallState& s) : s_(s) {}

  void tensor(const at::Tensor& t, ArgDesc& d) {
    if (!t.defined()) {
      put(s_.key, 'N');
      d.kind = ArgDesc::Kind::kNone;
      return;
    }
    if (!t.is_privateuseone()) {
      if (t.device().is_cpu() && t.dim() == 0) {
        // Like CUDA, a CPU 0-d tensor joins a tpu op as a runtime scalar.
        d.kind = ArgDesc::Kind::kTensor;
        d.dtype = t.scalar_type();
        d.param = static_cast<int>(s_.params.size());
        Param p;
        p.kind = Param::Kind::kCpuTensor;
        p.cpu_tensor = t;
        p.dtype = lowering::to_element_type(t.scalar_type());
        s_.params.push_back(std::move(p));
        put(s_.key, 'c');
        put(s_.key, static_cast<int64_t>(t.scalar_type()));
        return;
      }
      TORCH_CHECK(false,
                  "Expected all tensors to be on the same device, but found at least two devices, ",
                  s_.device >= 0 ? device_str(s_.device) : std::string("tpu:0"), " and ",
                  t.device(), "!");
    }
    int dev = t.device().index();
    if (s_.device < 0) {
      s_.device = dev;
    } else {
      TORCH_CHECK(dev == s_.device,
                  "Expected all tensors to be on the same device, but found at least two devices, ",
                  device_str(s_.device), " and ", device_str(dev), "!");
    }
    c10::StorageImpl* st = t.storage().unsafeGetStorageImpl();
    int index = -1;
    for (size_t i = 0; i < s_.params.size(); ++i) {
      if (s_.params[i].kind == Param::Kind::kStorage && s_.params[i].storage == st) {
        index = static_cast<int>(i);
        break;
      }
    }
    if (index < 0) {
      index = static_cast<int>(s_.params.size());
      Param p;
      p.kind = Param::Kind::kStorage;
      p.storage = st;
      device::handle_of(t.storage())->snapshot(&p.buffer, &p.dims, &p.dtype);
      if (!p.buffer) {
        // Never written: the program sees zeros (materialized only if the program reads it).
        p.dtype = lowering::to_element_type(t.scalar_type());
        int64_t itemsize = static_cast<int64_t>(t.element_size());
        p.dims = {static_cast<int64_t>(t.storage().nbytes()) / itemsize};
      }
      s_.params.push_back(std::move(p));
    }
    const Param& p = s_.params[static_cast<size_t>(index)];
    d.kind = ArgDesc::Kind::kTensor;
    d.param = index;
    d.dtype = t.scalar_type();
    d.view.sizes = t.sizes().vec();
    d.view.strides = t.strides().vec();
    d.view.offset = t.storage_offset();
    put(s_.key, 'T');
    put(s_.key, static_cast<int64_t>(index));
    put(s_.key, static_cast<int64_t>(d.dtype));
    put_ints(s_.key, t.sizes());
    put_ints(s_.key, t.strides());
    put(s_.key, d.view.offset);
    put_ints(s_.key, p.dims);
    put(s_.key, static_cast<int64_t>(p.dtype));
    put(s_.key, static_cast<char>(p.buffer ? 1 : 0));
  }

  void scan(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t first) {
    const auto& args = schema.arguments();
    s_.args.resize(args.size());
    // f64 anywhere makes Python floats f64 (they are doubles in PyTorch's CPU math too).
    for (size_t i = 0; i < args.size(); ++i) {
      const c10::IValue& v = stack[first + i];
      if (v.isTensor() && v.toTensor().defined() && v.toTensor().scalar_type() == c10::kDouble) {
        s_.any_f64 = true;
      }
    }
    for (size_t i = 0; i < args.size(); ++i) {
      const c10::IValue& v = stack[first + i];
      ArgDesc& d = s_.args[i];
      if (v.isTensor()) {
        tensor(v.toTensor(), d);
      } else if (v.isTensorList()) {
        d.kind = ArgDesc::Kind::kTensorList;
        auto list = v.toTensorList();
        put(s_.key, 'L');
        put(s_.key, static_cast<int64_t>(list.size()));
        d.items.resize(list.size());
        for (size_t j = 0; j < list.size(); ++j) tensor(list.get(j), d.items[j]);
      } else if (v.isList() && args[i].type()->str().find("Tensor") != std::string::npos) {
        d.kind = ArgDesc::Kind::kTensorList;
        auto list = v.toList();
        put(s_.key, 'O');
        put(s_.key, static_cast<int64_t>(list.size()));
        d.items.resize(list.size());
        for (size_t j = 0; j < list.size(); ++j) {
          c10::IValue item = list.get(j);
          tensor(item.isNone() ? at::Tensor() : item.toTensor(), d.items[j]);
        }
      } else if (is_generator_type(args[i].type())) {
        d.kind = ArgDesc::Kind::kGenerator;
        d.param = static_cast<int>(s_.params.size());
        Param p;
        p.kind = Param::Kind::kGenerator;
        p.dtype = ElementType::kU64;
        p.arg_index = first + i;
        s_.params.push_back(std::move(p));
        put(s_.key, 'G');
      } else if (v.isNone()) {
        d.kind = ArgDesc::Kind::kNone;
        put(s_.key, 'n');
      } else if (is_scalar_type(args[i].type()) && v.isScalar()) {
        c10::Scalar sc = v.toScalar();
        ElementType et = scalar_element_type(sc, s_.any_f64);
        const auto& def = args[i].default_value();
        bool is_default = def.has_value() && def->isScalar() && same_scalar(def->toScalar(), sc);
        d.dtype = lowering::to_scalar_type(et);
        if (is_default) {
          d.kind = ArgDesc::Kind::kDefaultScalar;
          put(s_.key, 'd');
        } else {
          d.kind = ArgDesc::Kind::kScalar;
          d.param = static_cast<int>(s_.params.size());
          Param p;
          p.kind = Param::Kind::kScalar;
          p.scalar = sc;
          p.dtype = et;
          s_.params.push_back(std::move(p));
          put(s_.key, 's');
        }
        put(s_.key, static_cast<int64_t>(et));
      } else {
        d.kind = ArgDesc::Kind::kConst;
        put(s_.key, 'K');
        constant(v);
      }
    }
  }

 private:
  void constant(const c10::IValue& v) {
    if (v.isInt()) {
      put(s_.key, 'i');
      put(s_.key, v.toInt());
    } else if (v.isDouble()) {
      double x = v.toDouble();
      int64_t bits;
      std::memcpy(&bits, &x, 8);
      put(s_.key, 'f');
      put(s_.key, bits);
    } else if (v.isBool()) {
      put(s_.key, v.toBool() ? 'T' : 'F');
    } else if (v.isIntList()) {
      put(s_.key, 'l');
      put_ints(s_.key, v.toIntVector());
    } else if (v.isString()) {
      put(s_.key, 's');
      s_.key += v.toStringRef();
      put(s_.key, '\0');
    } else if (v.isDevice()) {
      put(s_.key, 'D');
      put(s_.key, static_cast<int64_t>(v.toDevice().index()));
    } else if (v.isScalar()) {
      c10::Scalar s = v.toScalar();
      put(s_.key, 'S');
      put(s_.key, static_cast<int64_t>(s.type()));
      double x = s.toDouble();
      int64_t bits;
      std::memcpy(&bits, &x, 8);
      put(s_.key, bits);
    } else if (v.isList()) {
      auto list = v.toList();
      put(s_.key, '[');
      for (const c10::IValue& item : list) constant(item);
      put(s_.key, ']');
    } else {
      // Layouts, memory formats and the like: their printed form is their identity.
      std::ostringstream os;
      os << v;
      s_.key += os.str();
      put(s_.key, '\0');
    }
  }

  CallState& s_;
};

// ---------------------------------------------------------------------------------------------
// A compiled program for one signature and how its outputs land.

struct OutputSink {
  bool to_storage = false;  // else: a new returned tensor
  int index = 0;            // return index, or param index of the storage written
  std::vector<int64_t> dims;
  c10::ScalarType dtype = c10::kFloat;
  ElementType element_type = ElementType::kF32;
};

struct Entry {
  bool fallback = false;  // the lowering declined this signature: run on CPU
  std::string fallback_reason;
  std::shared_ptr<runtime::Program> program;
  std::vector<int> used_params;  // program argument k is CallState.params[used_params[k]]
  std::vector<OutputSink> outputs;
  size_t num_returns = 0;
  uint64_t rng_numel = 0;
};

struct Cache {
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<Entry>> entries;
  std::unordered_map<std::string, std::string> last_signature;  // per op, for compile logs
};

Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

bool log_compiles() {
  static const bool on = [] {
    const char* v = std::getenv("TORCHTPU_LOG_COMPILES");
    return v && std::string(v) != "0";
  }();
  return on;
}

bool fallback_allowed() {
  const char* v = std::getenv("TORCHTPU_CPU_FALLBACK");
  return !(v && std::string(v) == "0");
}

std::string describe_tensor(const at::Tensor& t) {
  if (!t.defined()) return "None";
  std::ostringstream os;
  os << c10::toString(t.scalar_type()) << t.sizes();
  if (!t.is_contiguous()) os << " strides " << t.strides();
  if (t.storage_offset() != 0) os << " offset " << t.storage_offset();
  if (!t.is_privateuseone()) os << " on " << t.device();
  return os.str();
}

std::vector<std::string> describe_args(const c10::FunctionSchema& schema,
                                       const torch::jit::Stack& stack, size_t first) {
  std::vector<std::string> out;
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = stack[first + i];
    std::ostringstream os;
    os << args[i].name() << "=";
    if (v.isTensor()) {
      os << describe_tensor(v.toTensor());
    } else if (v.isTensorList()) {
      os << "[";
      for (const at::Tensor& t : v.toTensorVector()) os << describe_tensor(t) << ", ";
      os << "]";
    } else if (is_scalar_type(args[i].type()) && v.isScalar()) {
      os << "Scalar(" << v.toScalar().type() << ")";
    } else {
      os << v;
    }
    out.push_back(os.str());
  }
  return out;
}

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
  return s;
}

// ---------------------------------------------------------------------------------------------
// Meta inference: PyTorch's own meta kernels give output shapes and dtypes and raise PyTorch's
// own errors (broadcasting, in-place dtype rules) before anything is compiled.

c10::IValue to_meta(const c10::IValue& v) {
  auto meta = [](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || !t.is_privateuseone()) return t;
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
  };
  if (v.isTensor()) return meta(v.toTensor());
  if (v.isTensorList()) {
    std::vector<at::Tensor> ts;
    for (const at::Tensor& t : v.toTensorVector()) ts.push_back(meta(t));
    return c10::IValue(ts);
  }
  if (v.isList()) {
    auto list = v.toList();
    bool has_tensors = false;
    for (const c10::IValue& item : list) has_tensors |= item.isTensor();
    if (has_tensors) {
      c10::List<std::optional<at::Tensor>> out;
      for (const c10::IValue& item : list) {
        out.push_back(item.isNone() ? std::optional<at::Tensor>() : meta(item.toTensor()));
      }
      return c10::IValue(out);
    }
  }
  return v;
}

// Runs `op` on meta copies of the given arguments; returns its returns.
torch::jit::Stack meta_call(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args) {
  torch::jit::Stack s;
  for (const auto& v : args) s.push_back(to_meta(v));
  op.callBoxed(&s);
  return s;
}

std::vector<TensorType> types_of(const torch::jit::Stack& returns, const std::string& op) {
  std::vector<TensorType> out;
  for (const auto& v : returns) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      out.push_back(lowering::tensor_type(t.scalar_type(), t.sizes()));
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) {
        out.push_back(lowering::tensor_type(t.scalar_type(), t.sizes()));
      }
    } else {
      TORCH_CHECK_NOT_IMPLEMENTED(false, "torchtpu: ", op, " returns a non-tensor value");
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

class ProgramBuilder {
 public:
  ProgramBuilder(const OpPlan& plan, CallState& state, const torch::jit::Stack& stack,
                 size_t first)
      : plan_(plan), state_(state), stack_(stack), first_(first),
        param_values_(state.params.size()) {}

  std::shared_ptr<Entry> build(const std::vector<TensorType>& out_types) {
    auto entry = std::make_shared<Entry>();
    auto& b = module_.main();
    const auto& schema = plan_.lowered_op->schema();
    std::vector<LArg> largs;
    for (size_t j = 0; j < plan_.arg_map.size(); ++j) {
      largs.push_back(to_larg(state_.args[plan_.arg_map[j]], stack_[first_ + plan_.arg_map[j]]));
    }
    lowering::LoweringContext ctx(b, schema, std::move(largs), out_types);
    ctx.set_rng_source([this, entry]() -> Value {
      // The device's default generator, drawn at every launch (index -1 in used_params).
      if (!default_rng_) {
        default_rng_ = module_.main().add_argument(TensorType(ElementType::kU64, {2}));
        used_params_.push_back(-1);
      }
      return *default_rng_;
    });
    std::vector<Value> results = (*plan_.lowering)(ctx);
    TORCH_CHECK(results.size() == out_types.size(), "torchtpu: lowering of ", plan_.lowering_name,
                " returned ", results.size(), " values, the op has ", out_types.size());
    for (size_t i = 0; i < results.size(); ++i) {
      TORCH_CHECK(results[i].type == out_types[i], "torchtpu: lowering of ", plan_.lowering_name,
                  " produced ", results[i].type.str(), " for output ", i, " but PyTorch expects ",
                  out_types[i].str());
    }
    std::vector<Value> outputs;
    if (plan_.variant == Variant::kFunctional) {
      for (size_t i = 0; i < results.size(); ++i) {
        OutputSink sink;
        sink.index = static_cast<int>(i);
        sink.dims = results[i].shape();
        sink.element_type = results[i].dtype();
        sink.dtype = lowering::to_scalar_type(sink.element_type);
        entry->outputs.push_back(sink);
        outputs.push_back(results[i]);
      }
      entry->num_returns = results.size();
    } else {
      // Writes land in order; a storage written twice keeps the last write on top of the first.
      std::vector<int> written;
      for (size_t i = 0; i < plan_.mutated_args.size(); ++i) {
        const ArgDesc& d = state_.args[plan_.mutated_args[i]];
        TORCH_CHECK(d.kind == ArgDesc::Kind::kTensor, "torchtpu: ", plan_.called_name,
                    " mutates a non-tensor argument");
        Value v = b.convert(results[i], lowering::to_element_type(d.dtype));
        const Param& p = state_.params[static_cast<size_t>(d.param)];
        bool fresh = current_.count(d.param) == 0;
        if (fresh && lowering::covers_buffer(d.view, p.dims)) {
          TORCH_CHECK(v.shape() == d.view.sizes, "torchtpu: ", plan_.called_name,
                      " result shape differs from the written tensor");
          current_[d.param] = v;
        } else {
          TORCH_CHECK(lowering::to_element_type(d.dtype) == p.dtype, "torchtpu: ",
                      plan_.called_name, " writes through a view whose dtype differs from its "
                      "storage's; not supported");
          Value base = !fresh        ? current_[d.param]
                       : p.buffer    ? param_value(d.param)
                                     : module_.main().constant(0, TensorType(p.dtype, p.dims));
          current_[d.param] = lowering::write_view(b, base, d.view, v);
        }
        bool seen = false;
        for (int w : written) seen |= w == d.param;
        if (!seen) written.push_back(d.param);
      }
      for (int w : written) {
        OutputSink sink;
        sink.to_storage = true;
        sink.index = w;
        sink.dims = current_[w].shape();
        sink.element_type = current_[w].dtype();
        sink.dtype = lowering::to_scalar_type(sink.element_type);
        entry->outputs.push_back(sink);
        outputs.push_back(current_[w]);
      }
      entry->num_returns = plan_.mutated_args.size();
    }
    module_.finish(outputs);
    entry->used_params = used_params_;
    uint64_t n = 0;
    for (const auto& t : out_types) n += static_cast<uint64_t>(t.numel());
    entry->rng_numel = n;
    text_ = module_.str();
    return entry;
  }

  const std::string& text() const { return text_; }

 private:
  Value param_value(int index) {
    auto& slot = param_values_[static_cast<size_t>(index)];
    if (!slot) {
      const Param& p = state_.params[static_cast<size_t>(index)];
      TensorType t = p.kind == Param::Kind::kStorage     ? TensorType(p.dtype, p.dims)
                     : p.kind == Param::Kind::kGenerator ? TensorType(ElementType::kU64, {2})
                                                         : TensorType(p.dtype, {});
      slot = module_.main().add_argument(t);
      used_params_.push_back(index);
    }
    return *slot;
  }

  Value read_tensor(const ArgDesc& d) {
    const Param& p = state_.params[static_cast<size_t>(d.param)];
    if (p.kind == Param::Kind::kStorage && !p.buffer) {
      // A never-written storage reads as zeros: a constant XLA folds, never a transfer.
      return module_.main().constant(0, TensorType(lowering::to_element_type(d.dtype), d.view.sizes));
    }
    Value base = param_value(d.param);
    if (p.kind != Param::Kind::kStorage) return base;
    auto& b = module_.main();
    ElementType want = lowering::to_element_type(d.dtype);
    if (p.dtype != want) {
      TORCH_CHECK_NOT_IMPLEMENTED(shlo::bit_width(p.dtype) == shlo::bit_width(want),
                                  "torchtpu: reading a ", c10::toString(d.dtype),
                                  " view of a storage written with another element size");
      base = b.bitcast_convert(base, want);
    }
    return lowering::read_view(b, base, d.view);
  }

  LArg to_larg(const ArgDesc& d, const c10::IValue& v) {
    LArg a;
    switch (d.kind) {
      case ArgDesc::Kind::kTensor:
        a.kind = LArg::Kind::kTensor;
        a.value = read_tensor(d);
        break;
      case ArgDesc::Kind::kTensorList:
        a.kind = LArg::Kind::kTensorList;
        for (const ArgDesc& item : d.items) {
          if (item.kind == ArgDesc::Kind::kNone) {
            a.values.push_back(std::nullopt);
          } else {
            a.values.push_back(read_tensor(item));
          }
        }
        break;
      case ArgDesc::Kind::kScalar:
        a.kind = LArg::Kind::kScalar;
        a.value = param_value(d.param);
        a.ivalue = v;
        break;
      case ArgDesc::Kind::kDefaultScalar: {
        a.kind = LArg::Kind::kScalar;
        c10::Scalar s = v.toScalar();
        TensorType t(lowering::to_element_type(d.dtype), {});
        a.value = s.isIntegral(true) ? module_.main().constant_int(s.toLong(), t)
                                     : module_.main().constant(s.toDouble(), t);
        a.ivalue = v;
        break;
      }
      case ArgDesc::Kind::kGenerator:
        a.kind = LArg::Kind::kGenerator;
        a.value = param_value(d.param);
        a.ivalue = v;
        break;
      case ArgDesc::Kind::kConst:
        a.kind = LArg::Kind::kConst;
        a.ivalue = v;
        break;
      case ArgDesc::Kind::kNone:
        a.kind = LArg::Kind::kNone;
        a.ivalue = v;
        break;
    }
    return a;
  }

  const OpPlan& plan_;
  CallState& state_;
  const torch::jit::Stack& stack_;
  size_t first_;
  shlo::ModuleBuilder module_;
  std::vector<std::optional<Value>> param_values_;
  std::vector<int> used_params_;
  std::unordered_map<int, Value> current_;
  std::optional<Value> default_rng_;
  std::string text_;
};

// ---------------------------------------------------------------------------------------------
// Launch.

device::BufferPtr scalar_buffer(const Param& p, int device) {
  union {
    bool b;
    int64_t i;
    double d;
    float f;
    uint64_t u[2];
  } v{};
  c10::Scalar s = p.scalar;
  if (p.kind == Param::Kind::kCpuTensor) s = p.cpu_tensor.item();
  switch (p.dtype) {
    case ElementType::kPred: v.b = s.toBool(); break;
    case ElementType::kF32: v.f = s.toFloat(); break;
    case ElementType::kF64: v.d = s.toDouble(); break;
    case ElementType::kS64: v.i = s.toLong(); break;
    default: {
      // CPU 0-d tensors of other dtypes: upload their bytes as they are.
      at::Tensor c = p.cpu_tensor.contiguous();
      return upload(c.data_ptr(), {}, p.dtype, device);
    }
  }
  return upload(&v, {}, p.dtype, device);
}

void launch(const OpPlan& plan, const Entry& entry, CallState& state, torch::jit::Stack* stack,
            size_t first) {
  int dev = state.device >= 0 ? state.device : device::current_device();
  runtime::Runtime& rt = runtime::get();
  const pjrt::Device& device = rt.device(dev);
  std::vector<device::BufferPtr> keep;
  std::vector<PJRT_Buffer*> args;
  keep.reserve(entry.used_params.size());
  for (int index : entry.used_params) {
    device::BufferPtr buf;
    if (index < 0) {
      auto [seed, offset] =
          device::next_seed_offset(std::nullopt, static_cast<c10::DeviceIndex>(dev), entry.rng_numel);
      uint64_t seed_offset[2] = {seed, offset};
      buf = upload(seed_offset, {2}, ElementType::kU64, dev);
      args.push_back(buf->raw());
      keep.push_back(std::move(buf));
      continue;
    }
    Param& p = state.params[static_cast<size_t>(index)];
    switch (p.kind) {
      case Param::Kind::kStorage:
        // Never-written storages are folded into the program as zeros, never passed.
        TORCH_INTERNAL_ASSERT(p.buffer, "torchtpu: uninitialized storage passed to a program");
        buf = p.buffer;
        break;
      case Param::Kind::kScalar:
      case Param::Kind::kCpuTensor:
        buf = scalar_buffer(p, dev);
        break;
      case Param::Kind::kGenerator: {
        const c10::IValue& g = (*stack)[p.arg_index];
        std::optional<at::Generator> gen;
        if (g.isGenerator()) gen = g.toGenerator();
        auto [seed, offset] = device::next_seed_offset(gen, static_cast<c10::DeviceIndex>(dev),
                                                       entry.rng_numel);
        uint64_t state2[2] = {seed, offset};
        buf = upload(state2, {2}, ElementType::kU64, dev);
        break;
      }
    }
    args.push_back(buf->raw());
    keep.push_back(std::move(buf));
  }
  pjrt::ExecuteResult result = entry.program->execute(args, device);
  runtime::metrics().executions++;
  if (runtime::launch_blocking()) {
    runtime::metrics().host_syncs++;
    try {
      result.done->await();
    } catch (const pjrt::Error& e) {
      TORCH_CHECK(false, "torchtpu: ", entry.program->signature(), " failed: ", e.what());
    }
  } else {
    runtime::track_execution(dev, std::move(result.done));
  }
  std::vector<at::Tensor> new_tensors(entry.num_returns);
  for (size_t i = 0; i < entry.outputs.size(); ++i) {
    const OutputSink& sink = entry.outputs[i];
    device::BufferPtr buf(std::move(result.outputs[i]));
    if (sink.to_storage) {
      Param& p = state.params[static_cast<size_t>(sink.index)];
      static_cast<device::StorageHandle*>(p.storage->data_ptr().get_context())
          ->set_buffer(std::move(buf), sink.dims, sink.element_type);
    } else {
      new_tensors[static_cast<size_t>(sink.index)] =
          wrap_buffer(std::move(buf), sink.dims, sink.dtype, dev);
    }
  }
  // Replace the arguments by the returns.
  std::vector<c10::IValue> returns;
  if (plan.variant == Variant::kFunctional) {
    for (auto& t : new_tensors) returns.emplace_back(std::move(t));
  } else {
    for (size_t m : plan.mutated_args) returns.push_back((*stack)[first + m]);
  }
  stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  for (auto& r : returns) stack->push_back(std::move(r));
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                  const std::string& reason) {
  std::string name = full_name(op.schema().operator_name());
  TORCH_CHECK_NOT_IMPLEMENTED(fallback_allowed(), "torchtpu: ", name,
                              " is not supported natively on tpu (", reason,
                              ") and TORCHTPU_CPU_FALLBACK=0 forbids running it on the CPU");
  if (runtime::record_fallback(name)) {
    TORCH_WARN("torchtpu: ", name, " runs through the CPU fallback (", reason,
               "): its inputs travel to the host and back. Shown once per op; "
               "torchtpu.metrics()['cpu_fallbacks_by_op'] counts every call.");
  }
  at::native::cpu_fallback(op, stack);
}

// Resizes out= arguments the way the op's meta kernel does; true if anything changed.
bool resize_outs(const OpPlan& plan, const torch::jit::Stack& meta_returns,
                 torch::jit::Stack* stack, size_t first) {
  bool changed = false;
  for (size_t i = 0; i < plan.mutated_args.size() && i < meta_returns.size(); ++i) {
    if (!meta_returns[i].isTensor()) continue;
    const at::Tensor& want = meta_returns[i].toTensor();
    at::Tensor out = (*stack)[first + plan.mutated_args[i]].toTensor();
    if (out.sizes() != want.sizes()) {
      at::native::resize_output(out, want.sizes());
      changed = true;
    }
  }
  return changed;
}

}  // namespace

at::Tensor wrap_buffer(device::BufferPtr buffer, c10::IntArrayRef sizes, c10::ScalarType dtype,
                       int device_index) {
  int64_t numel = c10::multiply_integers(sizes);
  size_t nbytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  auto storage = device::make_storage(nbytes, device_index, std::move(buffer), sizes.vec(),
                                      lowering::to_element_type(dtype));
  auto t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      caffe2::TypeMeta::fromScalarType(dtype));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return t;
}

size_t program_cache_size() {
  std::lock_guard<std::mutex> g(cache().mutex);
  return cache().entries.size();
}

void run_lowered(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpPlan& plan = plan_for(op);
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t first = stack->size() - nargs;

  if (plan.variant == Variant::kOut && *plan.lowered_op == op) {
    // Out= ops lowered as themselves (arange.out, linspace.out, eye.out) size their outputs from
    // scalar *values*, which the signature deliberately leaves out: size them on every call.
    std::vector<c10::IValue> called_args(stack->begin() + static_cast<std::ptrdiff_t>(first),
                                         stack->end());
    resize_outs(plan, meta_call(op, called_args), stack, first);
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    CallState state;
    state.key.reserve(256);
    const OpPlan* plan_ptr = &plan;  // plans live forever: their address names the op
    state.key.append(reinterpret_cast<const char*>(&plan_ptr), sizeof(plan_ptr));
    Scanner(state).scan(schema, *stack, first);

    std::shared_ptr<Entry> entry;
    {
      std::lock_guard<std::mutex> g(cache().mutex);
      auto it = cache().entries.find(state.key);
      if (it != cache().entries.end()) entry = it->second;
    }
    if (entry) {
      runtime::metrics().cache_hits++;
      if (entry->fallback) return cpu_fallback(op, stack, entry->fallback_reason);
      return launch(plan, *entry, state, stack, first);
    }

    // Miss: validate with PyTorch's meta kernels, size out= arguments, infer output types.
    std::vector<c10::IValue> called_args(stack->begin() + static_cast<std::ptrdiff_t>(first),
                                         stack->end());
    std::vector<TensorType> out_types;
    try {
      if (plan.variant != Variant::kFunctional) {
        torch::jit::Stack meta_returns = meta_call(op, called_args);
        if (plan.variant == Variant::kOut && attempt == 0 &&
            resize_outs(plan, meta_returns, stack, first)) {
          continue;  // out= tensors changed shape: the signature changed too
        }
        if (*plan.lowered_op == op) out_types = types_of(meta_returns, plan.called_name);
      }
      if (out_types.empty()) {
        std::vector<c10::IValue> lowered_args;
        for (size_t idx : plan.arg_map) lowered_args.push_back(called_args[idx]);
        out_types = types_of(meta_call(*plan.lowered_op, lowered_args), plan.lowering_name);
      }
    } catch (const c10::NotImplementedError& e) {
      // No meta kernel: we cannot know the output types, so the CPU runs it.
      auto fb = std::make_shared<Entry>();
      fb->fallback = true;
      fb->fallback_reason = std::string("no meta kernel: ") + e.what_without_backtrace();
      std::lock_guard<std::mutex> g(cache().mutex);
      cache().entries.emplace(state.key, fb);
      return cpu_fallback(op, stack, fb->fallback_reason);
    }

    runtime::metrics().cache_misses++;
    std::vector<std::string> desc = describe_args(schema, *stack, first);
    std::string signature = plan.called_name + "(" + join(desc) + ")";
    ProgramBuilder builder(plan, state, *stack, first);
    std::shared_ptr<Entry> built;
    try {
      built = builder.build(out_types);
    } catch (const c10::NotImplementedError& e) {
      auto fb = std::make_shared<Entry>();
      fb->fallback = true;
      fb->fallback_reason = e.what_without_backtrace();
      std::lock_guard<std::mutex> g(cache().mutex);
      cache().entries.emplace(state.key, fb);
      return cpu_fallback(op, stack, fb->fallback_reason);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "torchtpu: lowering ", plan.lowering_name, " failed for ", signature,
                  ": ", e.what_without_backtrace());
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "torchtpu: lowering ", plan.lowering_name, " failed for ", signature,
                  ": ", e.what());
    }
    std::string why;
    {
      std::lock_guard<std::mutex> g(cache().mutex);
      auto it = cache().last_signature.find(plan.called_name);
      why = it == cache().last_signature.end() ? "first call of this op"
                                               : "differs from " + it->second;
      cache().last_signature[plan.called_name] = signature;
    }
    built->program = runtime::compile_program(builder.text(), signature, why);
    {
      std::lock_guard<std::mutex> g(cache().mutex);
      cache().entries.emplace(state.key, built);
    }
    return launch(plan, *built, state, stack, first);
  }
  TORCH_CHECK(false, "torchtpu: ", plan.called_name, ": out= arguments keep changing shape");
}

void run_lowered_by_name(const char* name, const char* overload, torch::jit::Stack* stack) {
  static std::mutex m;
  static std::unordered_map<std::string, c10::OperatorHandle> handles;
  std::string key = std::string(name) + "." + overload;
  std::optional<c10::OperatorHandle> op;
  {
    std::lock_guard<std::mutex> g(m);
    auto it = handles.find(key);
    if (it == handles.end()) {
      auto h = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
      it = handles.emplace(key, h).first;
    }
    op = it->second;
  }
  TORCH_INTERNAL_ASSERT(plan_for(*op).lowering, "torchtpu: ", key, " has no lowering");
  run_lowered(*op, stack);
}

void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpPlan& plan = plan_for(op);
  if (!plan.lowering) return cpu_fallback(op, stack, "no lowering");
  try {
    run_lowered(op, stack);
  } catch (const std::bad_alloc&) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "torchtpu: out of memory running ",
                     plan.called_name);
  }
}

}  // namespace torchtpu::aten
