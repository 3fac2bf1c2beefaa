#include "exec/warmup.h"

#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "device/storage.h"
#include "exec/executor.h"
#include "exec/host_transfer.h"
#include "exec/op_plan.h"
#include "lowering/strided.h"
#include "runtime/compile.h"

namespace torchtpu::exec {
namespace {

// Record format version: a file written by another version is refused as a whole.
constexpr int64_t kRecordVersion = 1;
// A service's distinct signatures number in the thousands; beyond this, new ones are not kept.
constexpr size_t kMaxRecords = 1 << 16;

enum Tag : int64_t {
  kNone = 0,
  kUndefinedTensor,
  kTpuTensor,
  kCpuTensor,
  kInt,
  kDouble,
  kBool,
  kIntList,
  kString,
  kTensorList,
  kOptionalTensorList,
  kDevice,
  kDoubleList,
  kBoolList,
  kGenerator,
};

struct Records {
  std::mutex mutex;
  std::unordered_set<std::string> keys;
  std::vector<std::string> records;
};

Records& records() {
  static Records* r = new Records();
  return *r;
}

// Writes one tensor; false when replay could not rebuild it.
bool put_tensor(runtime::RecipeWriter& w, const at::Tensor& t,
                std::unordered_map<const c10::StorageImpl*, int64_t>& storages) {
  if (!t.defined()) {
    w.i64(kUndefinedTensor);
    return true;
  }
  if (!t.is_privateuseone()) {
    // Only CPU 0-d tensors join tpu ops (as runtime scalars); their value is not structure.
    if (!t.device().is_cpu() || t.dim() != 0) return false;
    w.i64(kCpuTensor);
    w.i64(static_cast<int64_t>(t.scalar_type()));
    return true;
  }
  w.i64(kTpuTensor);
  w.i64(t.device().index());
  w.i64(static_cast<int64_t>(t.scalar_type()));
  w.ints(t.sizes().vec());
  w.ints(t.strides().vec());
  w.i64(t.storage_offset());
  const c10::StorageImpl* st = t.storage().unsafeGetStorageImpl();
  auto it = storages.find(st);
  if (it != storages.end()) {
    w.i64(it->second);  // shares an earlier argument's storage
    return true;
  }
  int64_t id = static_cast<int64_t>(storages.size());
  storages.emplace(st, id);
  w.i64(id);
  w.i64(static_cast<int64_t>(t.storage().nbytes()));
  device::BufferPtr buffer;
  std::vector<int64_t> dims;
  shlo::ElementType et = shlo::ElementType::kU8;
  device::handle_of(t.storage())->snapshot(&buffer, &dims, &et);
  w.i64(buffer ? 1 : 0);
  w.ints(dims);
  w.i64(static_cast<int64_t>(et));
  return true;
}

bool put_value(runtime::RecipeWriter& w, const c10::IValue& v,
               std::unordered_map<const c10::StorageImpl*, int64_t>& storages) {
  if (v.isNone()) {
    w.i64(kNone);
  } else if (v.isTensor()) {
    return put_tensor(w, v.toTensor(), storages);
  } else if (v.isTensorList()) {
    auto list = v.toTensorVector();
    w.i64(kTensorList);
    w.i64(static_cast<int64_t>(list.size()));
    for (const at::Tensor& t : list) {
      if (!put_tensor(w, t, storages)) return false;
    }
  } else if (v.isInt()) {
    w.i64(kInt);
    w.i64(v.toInt());
  } else if (v.isDouble()) {
    double x = v.toDouble();
    int64_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    w.i64(kDouble);
    w.i64(bits);
  } else if (v.isBool()) {
    w.i64(kBool);
    w.i64(v.toBool() ? 1 : 0);
  } else if (v.isIntList()) {
    w.i64(kIntList);
    w.ints(v.toIntVector());
  } else if (v.isDoubleList()) {
    w.i64(kDoubleList);
    std::vector<int64_t> bits;
    for (double x : v.toDoubleVector()) {
      int64_t b;
      std::memcpy(&b, &x, sizeof(b));
      bits.push_back(b);
    }
    w.ints(bits);
  } else if (v.isBoolList()) {
    w.i64(kBoolList);
    std::vector<int64_t> bits;
    for (bool b : v.toBoolList()) bits.push_back(b ? 1 : 0);
    w.ints(bits);
  } else if (v.isString()) {
    w.i64(kString);
    w.str(v.toStringRef());
  } else if (v.isDevice()) {
    w.i64(kDevice);
    w.i64(static_cast<int64_t>(v.toDevice().type()));
    w.i64(v.toDevice().index());
  } else if (v.isGenerator()) {
    w.i64(kGenerator);  // replayed with the default generator (the program is the same)
  } else if (v.isList()) {
    // Tensor?[] (index's indices).
    auto list = v.toList();
    w.i64(kOptionalTensorList);
    w.i64(static_cast<int64_t>(list.size()));
    for (const c10::IValue& item : list) {
      if (item.isNone()) {
        w.i64(kNone);
      } else if (!item.isTensor() || !put_tensor(w, item.toTensor(), storages)) {
        return false;
      }
    }
  } else {
    return false;  // complex numbers, objects: not replayable
  }
  return true;
}

// ---- replay ---------------------------------------------------------------------------------

struct Rebuilt {
  std::vector<c10::Storage> storages;
};

at::Tensor zeros_like_record(runtime::RecipeReader& r, Rebuilt& built) {
  int dev = static_cast<int>(r.i64());
  auto dtype = static_cast<c10::ScalarType>(r.i64());
  std::vector<int64_t> sizes = r.ints();
  std::vector<int64_t> strides = r.ints();
  int64_t offset = r.i64();
  int64_t id = r.i64();
  TORCH_CHECK(strides.size() == sizes.size() && offset >= 0 && id >= 0 &&
                  dtype < c10::ScalarType::NumOptions && static_cast<int>(dtype) >= 0,
              "torchtpu.warmup: malformed tensor in a signature record");
  if (id == static_cast<int64_t>(built.storages.size())) {
    int64_t nbytes = r.i64();
    bool has_buffer = r.i64() != 0;
    std::vector<int64_t> dims = r.ints();
    auto et = static_cast<shlo::ElementType>(r.i64());
    TORCH_CHECK(nbytes >= 0, "torchtpu.warmup: malformed storage in a signature record");
    device::BufferPtr buffer;
    if (has_buffer) {
      // Zeros: replay decides programs, not values.
      int64_t bytes = lowering::numel_of(dims) * std::max(1, shlo::bit_width(et) / 8);
      TORCH_CHECK(bytes >= 0 && bytes <= (int64_t{1} << 34),
                  "torchtpu.warmup: malformed buffer in a signature record");
      std::vector<char> zeros(static_cast<size_t>(bytes), 0);
      buffer = upload(zeros.data(), dims, et, dev);
    }
    built.storages.push_back(
        device::make_storage(static_cast<size_t>(nbytes), dev, std::move(buffer), dims, et));
  }
  TORCH_CHECK(id < static_cast<int64_t>(built.storages.size()),
              "torchtpu.warmup: malformed storage reference in a signature record");
  auto t = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(built.storages[static_cast<size_t>(id)]),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), caffe2::TypeMeta::fromScalarType(dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  return t;
}

at::Tensor read_tensor(runtime::RecipeReader& r, int64_t tag, Rebuilt& built) {
  switch (tag) {
    case kUndefinedTensor:
      return at::Tensor();
    case kCpuTensor:
      return at::zeros({}, at::TensorOptions().dtype(static_cast<c10::ScalarType>(r.i64())));
    case kTpuTensor:
      return zeros_like_record(r, built);
    default:
      TORCH_CHECK(false, "torchtpu.warmup: malformed tensor tag in a signature record");
  }
}

c10::IValue read_value(runtime::RecipeReader& r, Rebuilt& built) {
  int64_t tag = r.i64();
  switch (tag) {
    case kNone:
    case kGenerator:
      return c10::IValue();
    case kUndefinedTensor:
    case kCpuTensor:
    case kTpuTensor:
      return read_tensor(r, tag, built);
    case kTensorList: {
      int64_t n = r.i64();
      std::vector<at::Tensor> ts;
      for (int64_t i = 0; i < n; ++i) ts.push_back(read_tensor(r, r.i64(), built));
      return c10::IValue(ts);
    }
    case kOptionalTensorList: {
      int64_t n = r.i64();
      c10::List<std::optional<at::Tensor>> list;
      for (int64_t i = 0; i < n; ++i) {
        int64_t item = r.i64();
        if (item == kNone) {
          list.push_back(std::nullopt);
        } else {
          list.push_back(read_tensor(r, item, built));
        }
      }
      return c10::IValue(list);
    }
    case kInt:
      return c10::IValue(r.i64());
    case kDouble: {
      int64_t bits = r.i64();
      double x;
      std::memcpy(&x, &bits, sizeof(x));
      return c10::IValue(x);
    }
    case kBool:
      return c10::IValue(r.i64() != 0);
    case kIntList:
      return c10::IValue(r.ints());
    case kDoubleList: {
      std::vector<double> xs;
      for (int64_t bits : r.ints()) {
        double x;
        std::memcpy(&x, &bits, sizeof(x));
        xs.push_back(x);
      }
      return c10::IValue(xs);
    }
    case kBoolList: {
      c10::List<bool> bs;
      for (int64_t b : r.ints()) bs.push_back(b != 0);
      return c10::IValue(bs);
    }
    case kString:
      return c10::IValue(r.str());
    case kDevice: {
      auto type = static_cast<c10::DeviceType>(r.i64());
      auto index = static_cast<c10::DeviceIndex>(r.i64());
      return c10::IValue(c10::Device(type, index));
    }
    default:
      TORCH_CHECK(false, "torchtpu.warmup: malformed value tag ", tag, " in a signature record");
  }
}

}  // namespace

void record_signature(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first,
                      const std::string& key) {
  Records& recs = records();
  {
    std::lock_guard<std::mutex> g(recs.mutex);
    if (recs.records.size() >= kMaxRecords || recs.keys.count(key)) return;
  }
  runtime::RecipeWriter w;
  w.i64(kRecordVersion);
  const c10::OperatorName& name = op.schema().operator_name();
  w.str(name.name);
  w.str(name.overload_name);
  w.i64(static_cast<int64_t>(stack.size() - first));
  std::unordered_map<const c10::StorageImpl*, int64_t> storages;
  for (size_t i = first; i < stack.size(); ++i) {
    if (!put_value(w, stack[i], storages)) return;
  }
  std::lock_guard<std::mutex> g(recs.mutex);
  if (recs.records.size() >= kMaxRecords || !recs.keys.insert(key).second) return;
  recs.records.push_back(w.bytes());
}

std::vector<std::string> recorded_signatures() {
  Records& recs = records();
  std::lock_guard<std::mutex> g(recs.mutex);
  return recs.records;
}

void replay_signature(const std::string& record) {
  runtime::RecipeReader r(record);
  torch::jit::Stack stack;
  std::optional<c10::OperatorHandle> op;
  try {
    TORCH_CHECK(r.i64() == kRecordVersion,
                "torchtpu.warmup: a signature record of another torchtpu version");
    std::string name = r.str();
    std::string overload = r.str();
    op = c10::Dispatcher::singleton().findOp({name, overload});
    TORCH_CHECK(op.has_value(), "torchtpu.warmup: unknown operator ", name, ".", overload);
    int64_t nargs = r.i64();
    TORCH_CHECK(nargs == static_cast<int64_t>(op->schema().arguments().size()),
                "torchtpu.warmup: the record of ", name, " has ", nargs, " arguments, the op ",
                op->schema().arguments().size());
    Rebuilt built;
    for (int64_t i = 0; i < nargs; ++i) stack.push_back(read_value(r, built));
    TORCH_CHECK(r.at_end(), "torchtpu.warmup: trailing bytes in a signature record");
  } catch (const std::runtime_error&) {
    TORCH_CHECK(false, "torchtpu.warmup: truncated signature record");
  }
  TORCH_CHECK(plan_for(*op).lowering, "torchtpu.warmup: ", full_name(op->schema().operator_name()),
              " has no lowering");
  // A record is taken only of calls that ran natively; one this build's lowering declines has
  // nothing to compile (the CPU fallback would merely run it), so its reason is dropped.
  (void)run_native(plan_for(*op), *op, &stack);
}

}  // namespace torchtpu::exec
