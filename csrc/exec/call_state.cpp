#include "exec/call_state.h"

#include <c10/core/DefaultDtype.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "device/current_device.h"
#include "device/generator.h"
#include "exec/host_transfer.h"
#include "lowering/lowering.h"
#include "runtime/inflight.h"
#include "runtime/launch_queue.h"
#include "runtime/metrics.h"
#include "runtime/runtime.h"

namespace torchtpu::exec {

using shlo::ElementType;

namespace {

void put(std::string& key, int64_t v) { key.append(reinterpret_cast<const char*>(&v), 8); }
void put(std::string& key, char c) { key.push_back(c); }
void put_ints(std::string& key, c10::IntArrayRef v) {
  put(key, static_cast<int64_t>(v.size()));
  key.append(reinterpret_cast<const char*>(v.data()), v.size() * 8);
}

// A double's bits: -0.0 and 0.0, or two NaNs, are different constants.
void put_bits(std::string& key, double x) {
  int64_t bits;
  std::memcpy(&bits, &x, 8);
  put(key, bits);
}

std::string device_str(int index) { return "tpu:" + std::to_string(index); }

bool same_scalar(const c10::Scalar& a, const c10::Scalar& b) {
  if (a.type() != b.type()) return false;
  if (a.isBoolean()) return a.toBool() == b.toBool();
  if (a.isIntegral(false)) return a.toLong() == b.toLong();
  if (a.isFloatingPoint()) {
    double x = a.toDouble(), y = b.toDouble();
    return std::memcmp(&x, &y, sizeof(double)) == 0;
  }
  if (a.isComplex()) {
    c10::complex<double> x = a.toComplexDouble(), y = b.toComplexDouble();
    return std::memcmp(&x, &y, sizeof(x)) == 0;
  }
  return false;
}

bool is_kind_or_optional(const c10::TypePtr& t, c10::TypeKind kind) {
  if (t->kind() == kind) return true;
  auto opt = t->cast<c10::OptionalType>();
  return opt && opt->getElementType()->kind() == kind;
}

}  // namespace

bool is_scalar_type(const c10::TypePtr& t) {
  return is_kind_or_optional(t, c10::TypeKind::NumberType);
}

bool is_generator_type(const c10::TypePtr& t) {
  return is_kind_or_optional(t, c10::TypeKind::GeneratorType);
}

bool is_runtime_number(const c10::FunctionSchema& schema, const c10::Argument& arg) {
  c10::TypeKind kind = arg.type()->kind();
  if (kind != c10::TypeKind::FloatType && kind != c10::TypeKind::IntType &&
      kind != c10::TypeKind::OptionalType && kind != c10::TypeKind::ListType) {
    return false;
  }
  // Ops whose lowering reads these arguments through LoweringContext::number / number_list (a
  // Value), never as a host number, and whose host-side checks (aten/argument_checks.cpp) run
  // on every call. Keyed by the op's name without overload or in-place underscore: in-place and
  // functional forms alike (every in-place op here has its functional form here too).
  struct Entry {
    const char* op;
    const char* args[3];
  };
  static const Entry kTable[] = {
      {"aten::_fused_adam", {"lr"}},
      {"aten::_fused_adamw", {"lr"}},
      {"aten::_fused_sgd", {"lr"}},
      {"aten::uniform", {"from", "to"}},
      {"aten::normal", {"mean", "std"}},
      {"aten::normal_functional", {"mean", "std"}},
      {"aten::bernoulli", {"p"}},
      {"aten::exponential", {"lambd"}},
      {"aten::log_normal", {"mean", "std"}},
      {"aten::cauchy", {"median", "sigma"}},
      {"aten::geometric", {"p"}},
      {"aten::random", {"from", "to"}},
      {"aten::native_dropout", {"p"}},
      {"aten::native_dropout_backward", {"scale"}},
      {"aten::roll", {"shifts"}},
  };
  std::string_view op = schema.name();
  if (op.back() == '_') op.remove_suffix(1);
  for (const Entry& e : kTable) {
    if (op != e.op) continue;
    for (const char* name : e.args) {
      if (name && arg.name() == name) return true;
    }
  }
  return false;
}

ElementType scalar_element_type(const c10::Scalar& s, bool any_f64) {
  if (s.isBoolean()) return ElementType::kPred;
  if (s.isIntegral(false)) return ElementType::kS64;
  if (s.isComplex()) return any_f64 ? ElementType::kC128 : ElementType::kC64;
  // Python floats are doubles; f32 keeps programs TPU-friendly unless f64 data is involved.
  return any_f64 ? ElementType::kF64 : ElementType::kF32;
}

void ArgDesc::reset() {
  kind = Kind::kNone;
  param = -1;
  offset_param = -1;
  generic_view = -1;
  view.sizes.clear();
  view.strides.clear();
  view.offset = 0;
  view.offset_value.reset();
  dtype = c10::kFloat;
  items.clear();
}

void CallState::reset_args(size_t n) {
  if (args.size() > n) args.resize(n);
  for (ArgDesc& d : args) d.reset();
  args.resize(n);
}

// `args` keeps its ArgDescs (scan resets them): destroying and re-making them cost ~1% of a
// tiny eager op.
void CallState::clear() {
  key.clear();
  for (Param& p : params) {
    if (p.dims.capacity() != 0) spare_dims.push_back(std::move(p.dims));
  }
  params.clear();
  device = -1;
  any_f64 = false;
  numerics = Numerics();
  generic = false;
  out_sizes.clear();
  out_strides.clear();
  geometry_param = -1;
  generic_rank = 0;
}

namespace {

struct CallStatePool {
  std::vector<std::unique_ptr<CallState>> states;
  size_t depth = 0;
};

CallStatePool& call_state_pool() {
  thread_local CallStatePool pool;
  return pool;
}

}  // namespace

PooledCallState::PooledCallState() {
  CallStatePool& pool = call_state_pool();
  if (pool.depth == pool.states.size()) {
    pool.states.push_back(std::make_unique<CallState>());
    pool.states.back()->key.reserve(256);
    pool.states.back()->params.reserve(4);
  }
  state_ = pool.states[pool.depth++].get();
}

PooledCallState::~PooledCallState() {
  // Releases the buffers and tensors the state holds now, not at the next op.
  state_->clear();
  --call_state_pool().depth;
}

void Scanner::tensor(const at::Tensor& t, ArgDesc& d) {
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
    TORCH_CHECK(
        false, "Expected all tensors to be on the same device, but found at least two devices, ",
        s_.device >= 0 ? device_str(s_.device) : std::string("tpu:0"), " and ", t.device(), "!");
  }
  const int index = storage_param(t);
  if (generic_) {
    generic_tensor(t, index, d);
    return;
  }
  const Param& p = s_.params[static_cast<size_t>(index)];
  d.kind = ArgDesc::Kind::kTensor;
  d.param = index;
  d.dtype = t.scalar_type();
  if (with_views_) {
    d.view.sizes = t.sizes().vec();
    d.view.strides = t.strides().vec();
  }
  d.view.offset = t.storage_offset();
  // Structure only: a view covering all of its storage's bytes starts at 0; any other view
  // takes its offset at run time. (A covering view with an offset cannot be valid; it keeps
  // the runtime offset rather than a value in the key.) The storage's own bytes, not its
  // buffer's: a size bucket's padding is no part of it.
  const auto storage_bytes = static_cast<int64_t>(t.storage().nbytes());
  bool covers =
      t.is_contiguous() &&
      static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size()) == storage_bytes;
  bool runtime_offset = !covers || d.view.offset != 0;
  put(s_.key, 'T');
  put(s_.key, static_cast<int64_t>(index));
  put(s_.key, static_cast<int64_t>(d.dtype));
  put_ints(s_.key, t.sizes());
  put_ints(s_.key, t.strides());
  put(s_.key, static_cast<char>(runtime_offset ? 'o' : '0'));
  put_ints(s_.key, p.dims);
  put(s_.key, static_cast<int64_t>(p.dtype));
  put(s_.key, static_cast<char>(p.buffer ? 1 : 0));
  if (runtime_offset) d.offset_param = scalar_param(c10::Scalar(d.view.offset), ElementType::kS64);
}

int Scanner::storage_param(const at::Tensor& t) {
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
    if (!s_.spare_dims.empty()) {
      p.dims = std::move(s_.spare_dims.back());
      s_.spare_dims.pop_back();
    }
    device::handle_of(t.storage())->snapshot(&p.buffer, &p.dims, &p.dtype);
    if (!p.buffer) {
      // Never written: the program sees zeros (materialized only if the program reads it), and
      // a write gives it the buffer its size has (a size bucket, device/buckets.h).
      p.dtype = lowering::to_element_type(t.scalar_type());
      int64_t itemsize = static_cast<int64_t>(t.element_size());
      p.dims = device::buffer_dims({static_cast<int64_t>(t.storage().nbytes()) / itemsize});
    }
    s_.params.push_back(std::move(p));
  }
  return index;
}

void Scanner::scan(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                   size_t first) {
  const auto& args = schema.arguments();
  s_.reset_args(args.size());
  // The default dtype decides what a Python float promotes to (int tensor + 1.5), and with it
  // the program's output type; torch.set_default_dtype may change it between calls.
  put(s_.key, static_cast<char>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  // Deterministic algorithms and the float32 matmul precision change the program (numerics.h).
  s_.numerics = current_numerics();
  put(s_.key, s_.numerics.tag());
  // f64 anywhere makes Python floats f64 (they are doubles in PyTorch's CPU math too).
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = stack[first + i];
    if (v.isTensor() && v.toTensor().defined() &&
        (v.toTensor().scalar_type() == c10::kDouble ||
         v.toTensor().scalar_type() == c10::kComplexDouble)) {
      s_.any_f64 = true;
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = stack[first + i];
    ArgDesc& d = s_.args[i];
    if (v.isTensor()) {
      tensor(v.toTensor(), d);
    } else if (v.isTensorList() ||
               (v.isList() && args[i].type()->str().find("Tensor") != std::string::npos)) {
      // Tensor[] ('L') or Tensor?[] ('O', whose items may be None).
      d.kind = ArgDesc::Kind::kTensorList;
      auto list = v.toList();
      put(s_.key, v.isTensorList() ? 'L' : 'O');
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
    } else if ((v.isDouble() || v.isInt()) && is_runtime_number(schema, args[i])) {
      runtime_number(v.toScalar(), d);
    } else if (v.isIntList() && is_runtime_number(schema, args[i])) {
      // Its length is structure, its elements are values.
      d.kind = ArgDesc::Kind::kScalarList;
      auto list = v.toIntVector();
      put(s_.key, 'R');
      put(s_.key, static_cast<int64_t>(list.size()));
      d.items.resize(list.size());
      for (size_t j = 0; j < list.size(); ++j) runtime_number(c10::Scalar(list[j]), d.items[j]);
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
        d.param = scalar_param(sc, et);
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

void Scanner::runtime_number(const c10::Scalar& value, ArgDesc& d) {
  const ElementType dtype = scalar_element_type(value, s_.any_f64);
  d.kind = ArgDesc::Kind::kScalar;
  d.param = scalar_param(value, dtype);
  d.dtype = lowering::to_scalar_type(dtype);
  put(s_.key, 'r');
  put(s_.key, static_cast<int64_t>(dtype));
}

int Scanner::scalar_param(const c10::Scalar& value, ElementType dtype) {
  Param p;
  p.kind = Param::Kind::kScalar;
  p.scalar = value;
  p.dtype = dtype;
  s_.params.push_back(std::move(p));
  return static_cast<int>(s_.params.size()) - 1;
}

void Scanner::constant(const c10::IValue& v) {
  if (v.isInt()) {
    put(s_.key, 'i');
    put(s_.key, v.toInt());
  } else if (v.isDouble()) {
    put(s_.key, 'f');
    put_bits(s_.key, v.toDouble());
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
    put_bits(s_.key, s.toDouble());
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

namespace {

// Scalar arguments repeat (alpha=1, a learning rate, eps): their device buffers are immutable
// once uploaded (programs never donate them), so the same value reuses the same buffer instead
// of paying a host->device transfer on every op.
device::BufferPtr cached_scalar_upload(uint64_t bits, ElementType dtype, int device) {
  struct Key {
    uint64_t bits;
    int dtype;
    int device;
    bool operator==(const Key& o) const {
      return bits == o.bits && dtype == o.dtype && device == o.device;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(k.bits * 31 + static_cast<uint64_t>(k.dtype) * 7 +
                                   static_cast<uint64_t>(k.device));
    }
  };
  static std::mutex m;
  static std::unordered_map<Key, device::BufferPtr, KeyHash> cache;
  constexpr size_t kMaxEntries = 1024;  // values beyond it (a sweep of distinct floats) just upload
  Key key{bits, static_cast<int>(dtype), device};
  {
    std::lock_guard<std::mutex> g(m);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  device::BufferPtr buf = upload(&bits, {}, dtype, device);
  std::lock_guard<std::mutex> g(m);
  if (cache.size() < kMaxEntries) cache.emplace(key, buf);
  return buf;
}

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
    case ElementType::kPred:
      v.b = s.toBool();
      break;
    case ElementType::kF32:
      v.f = s.toFloat();
      break;
    case ElementType::kF64:
      v.d = s.toDouble();
      break;
    case ElementType::kS64:
      v.i = s.toLong();
      break;
    case ElementType::kC64: {
      c10::complex<float> c = s.toComplexFloat();
      return upload(&c, {}, p.dtype, device);
    }
    case ElementType::kC128: {
      c10::complex<double> c = s.toComplexDouble();
      return upload(&c, {}, p.dtype, device);
    }
    default: {
      // CPU 0-d tensors of other dtypes: upload their bytes as they are.
      at::Tensor c = p.cpu_tensor.contiguous();
      return upload(c.data_ptr(), {}, p.dtype, device);
    }
  }
  return cached_scalar_upload(v.u[0], p.dtype, device);
}

}  // namespace

std::vector<device::BufferPtr> launch_program(const runtime::Program& program,
                                              const std::vector<int>& used_params, CallState& state,
                                              const torch::jit::Stack& stack, uint64_t rng_numel,
                                              int dev, int launch_id) {
  runtime::Runtime& rt = runtime::get();
  const pjrt::Device& device = rt.device(dev);
  // Straight to PJRT when the program is compiled, no launch waits in the device's queue and no
  // input is pending; otherwise the launch queues (runtime/launch_queue.h) and returns at once.
  bool queue = !program.ready() || runtime::launch_queue_busy(dev);
  // On the stack for the usual handful of arguments: this runs once per eager op. Scalars and
  // generator states are uploaded now, whether queued or not: a queued launch sees the values
  // and the generator positions of its call.
  c10::SmallVector<device::BufferPtr, 8> keep;
  c10::SmallVector<const device::BufferPtr*, 8> bufs;
  keep.reserve(used_params.size());
  // A generator's (seed, offset) for this launch, which moves it past the draws.
  const auto generator_state = [&](std::optional<at::Generator> gen) {
    auto [seed, offset] =
        device::next_seed_offset(gen, static_cast<c10::DeviceIndex>(dev), rng_numel);
    uint64_t seed_offset[2] = {seed, offset};
    return upload(seed_offset, {2}, ElementType::kU64, dev);
  };
  for (int index : used_params) {
    device::BufferPtr buf;
    if (index < 0) {
      keep.push_back(generator_state(std::nullopt));
      bufs.push_back(&keep.back());
      continue;
    }
    Param& p = state.params[static_cast<size_t>(index)];
    switch (p.kind) {
      case Param::Kind::kStorage:
        // Never-written storages are folded into the program as zeros, never passed. The
        // state's snapshot keeps the buffer alive for the launch.
        TORCH_INTERNAL_ASSERT(p.buffer, "torchtpu: uninitialized storage passed to a program");
        queue = queue || !p.buffer->ready();
        bufs.push_back(&p.buffer);
        continue;
      case Param::Kind::kScalar:
      case Param::Kind::kCpuTensor:
        buf = scalar_buffer(p, dev);
        break;
      case Param::Kind::kInts:
        buf = upload(p.ints.data(), {static_cast<int64_t>(p.ints.size())}, ElementType::kS64, dev);
        break;
      case Param::Kind::kGenerator: {
        if (p.drawn) {
          buf = upload(p.seed_offset, {2}, ElementType::kU64, dev);
          break;
        }
        const c10::IValue& g = stack[p.arg_index];
        std::optional<at::Generator> gen;
        if (g.isGenerator()) gen = g.toGenerator();
        buf = generator_state(std::move(gen));
        break;
      }
    }
    keep.push_back(std::move(buf));
    bufs.push_back(&keep.back());
  }
  if (queue) {
    std::vector<device::BufferPtr> args;
    args.reserve(bufs.size());
    for (const device::BufferPtr* b : bufs) args.push_back(*b);
    return runtime::enqueue_launch(program.shared_from_this(), std::move(args), dev, launch_id);
  }
  c10::SmallVector<PJRT_Buffer*, 8> args;
  for (const device::BufferPtr* b : bufs) args.push_back((*b)->raw());
  pjrt::ExecuteResult result = program.execute(args.data(), args.size(), device, launch_id);
  runtime::metrics().executions++;
  if (runtime::launch_blocking()) {
    runtime::metrics().host_syncs++;
    try {
      result.done->await();
    } catch (const pjrt::Error& e) {
      TORCH_CHECK(false, "torchtpu: ", program.signature(), " failed: ", e.what());
    }
  } else {
    runtime::track_execution(dev, std::move(result.done));
  }
  return std::move(result.outputs);
}

}  // namespace torchtpu::exec
