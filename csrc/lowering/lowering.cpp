#include "lowering/lowering.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace torchtpu::lowering {
namespace {

// Registration happens from static initializers before any lookup; lookups after load are
// read-only, but a lock keeps late registration (foreach lowerings, tests) safe. Node-based, so
// descriptor addresses stay valid as entries are added.
std::unordered_map<std::string, OpDescriptor>& table() {
  static std::unordered_map<std::string, OpDescriptor> t;
  return t;
}

std::mutex& table_mutex() {
  static std::mutex m;
  return m;
}

enum class Category { kBool = 0, kInt = 1, kFloat = 2, kComplex = 3 };

Category category(c10::ScalarType t) {
  if (t == c10::kBool) return Category::kBool;
  if (c10::isIntegralType(t, /*includeBool=*/false)) return Category::kInt;
  if (c10::isComplexType(t)) return Category::kComplex;
  return Category::kFloat;
}

}  // namespace

namespace {
// Names registered more than once: which entry wins would depend on static-initialization order
// across files, so a test asserts this stays empty.
std::vector<std::string>& duplicates() {
  static std::vector<std::string> d;
  return d;
}
}  // namespace

void register_lowering(const std::string& op_name, LoweringFn fn, uint32_t flags) {
  std::lock_guard<std::mutex> g(table_mutex());
  if (table().count(op_name)) duplicates().push_back(op_name);
  table()[op_name] = OpDescriptor{op_name, std::move(fn), flags};
}

std::vector<std::string> duplicate_lowerings() {
  std::lock_guard<std::mutex> g(table_mutex());
  return duplicates();
}

const OpDescriptor* find_op(const std::string& op_name) {
  std::lock_guard<std::mutex> g(table_mutex());
  auto it = table().find(op_name);
  return it == table().end() ? nullptr : &it->second;
}

const OpDescriptor* find_eager_op(const std::string& op_name) {
  const OpDescriptor* d = find_op(op_name);
  return d && !d->graph_only() ? d : nullptr;
}

const LoweringFn* find_lowering(const std::string& op_name) {
  const OpDescriptor* d = find_op(op_name);
  return d ? &d->fn : nullptr;
}

const LoweringFn* find_eager_lowering(const std::string& op_name) {
  const OpDescriptor* d = find_eager_op(op_name);
  return d ? &d->fn : nullptr;
}

std::vector<std::string> lowered_op_names() {
  std::lock_guard<std::mutex> g(table_mutex());
  std::vector<std::string> names;
  for (const auto& kv : table()) names.push_back(kv.first);
  return names;
}

std::vector<const OpDescriptor*> op_descriptors() {
  std::vector<const OpDescriptor*> out;
  {
    std::lock_guard<std::mutex> g(table_mutex());
    for (const auto& kv : table()) out.push_back(&kv.second);
  }
  std::sort(out.begin(), out.end(),
            [](const OpDescriptor* x, const OpDescriptor* y) { return x->name < y->name; });
  return out;
}

size_t LoweringContext::index_of(const std::string& name) const {
  const auto& a = schema_.arguments();
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name() == name) return i;
  }
  TORCH_CHECK(false, "torchtpu lowering: ", schema_.name(), " has no argument '", name, "'");
}

bool LoweringContext::is_none(size_t i) const {
  const LArg& a = arg(i);
  return a.kind == LArg::Kind::kNone || (a.kind == LArg::Kind::kConst && a.ivalue.isNone());
}

Value LoweringContext::tensor(size_t i) const {
  const LArg& a = arg(i);
  TORCH_CHECK(a.kind == LArg::Kind::kTensor || a.kind == LArg::Kind::kScalar,
              "torchtpu lowering: ", schema_.name(), " argument ", i, " is not a tensor");
  return a.value;
}

std::vector<Value> LoweringContext::tensor_list(size_t i) const {
  const LArg& a = arg(i);
  TORCH_CHECK(a.kind == LArg::Kind::kTensorList, "torchtpu lowering: ", schema_.name(),
              " argument ", i, " is not a tensor list");
  std::vector<Value> out;
  for (const auto& v : a.values) {
    if (v) out.push_back(*v);
  }
  return out;
}

int64_t LoweringContext::int_arg(size_t i) const { return arg(i).ivalue.toInt(); }

double LoweringContext::double_arg(size_t i) const {
  const c10::IValue& v = arg(i).ivalue;
  if (v.isInt()) return static_cast<double>(v.toInt());
  if (v.isBool()) return v.toBool() ? 1.0 : 0.0;
  return v.toDouble();
}

bool LoweringContext::bool_arg(size_t i) const { return arg(i).ivalue.toBool(); }

std::vector<int64_t> LoweringContext::int_list(size_t i) const {
  const c10::IValue& v = arg(i).ivalue;
  if (v.isInt()) return {v.toInt()};
  if (v.isNone()) return {};
  return v.toIntVector();
}

std::optional<int64_t> LoweringContext::optional_int(size_t i) const {
  if (is_none(i)) return std::nullopt;
  return arg(i).ivalue.toInt();
}

std::optional<c10::ScalarType> LoweringContext::optional_dtype(size_t i) const {
  if (is_none(i)) return std::nullopt;
  return static_cast<c10::ScalarType>(arg(i).ivalue.toInt());
}

const shlo::ReplicaGroups& LoweringContext::replica_groups(const std::string& group_name) const {
  TORCH_CHECK_NOT_IMPLEMENTED(collective_source_, "torchtpu: ", schema_.name(), " over group '",
                              group_name, "' needs a program with collectives inside");
  return collective_source_(group_name);
}

Value LoweringContext::rng_state() {
  TORCH_CHECK(rng_source_, "torchtpu lowering: ", schema_.name(),
              " needs random state but this program has no generator");
  return rng_source_();
}

Value LoweringContext::operand(size_t i, ElementType dtype) const {
  return b.convert(tensor(i), dtype);
}

c10::ScalarType LoweringContext::promoted_type(const std::vector<size_t>& indices) const {
  // Mirrors at::native::ResultTypeState: three tiers, then the higher tier wins unless a
  // lower tier brings a higher category.
  c10::ScalarType dim_t = c10::ScalarType::Undefined, zero_t = dim_t, wrapped_t = dim_t;
  auto merge = [](c10::ScalarType acc, c10::ScalarType t) {
    return acc == c10::ScalarType::Undefined ? t : c10::promoteTypes(acc, t);
  };
  for (size_t i : indices) {
    const LArg& a = arg(i);
    if (a.kind == LArg::Kind::kScalar) {
      const c10::IValue& s = a.ivalue;
      // A complex Python scalar promotes a real tensor to complex (x == 1+2j compares in
      // complex64); taking it for an int would drop its imaginary part.
      c10::ScalarType t =
          s.isDouble() ? c10::typeMetaToScalarType(c10::get_default_dtype())
          : s.isComplexDouble()
              ? c10::toComplexType(c10::typeMetaToScalarType(c10::get_default_dtype()))
          : s.isBool() ? c10::kBool
                       : c10::kLong;
      wrapped_t = merge(wrapped_t, t);
    } else if (a.kind == LArg::Kind::kTensor) {
      c10::ScalarType t = to_scalar_type(a.value.dtype());
      if (a.value.rank() == 0) {
        zero_t = merge(zero_t, t);
      } else {
        dim_t = merge(dim_t, t);
      }
    }
  }
  auto combine = [](c10::ScalarType higher, c10::ScalarType lower) {
    if (higher == c10::ScalarType::Undefined) return lower;
    if (lower == c10::ScalarType::Undefined) return higher;
    if (category(lower) > category(higher)) {
      // As at::native combine_categories: a complex lower tier keeps a float higher tier's
      // precision (f32 tensor == 1+2j compares in complex64).
      if (category(lower) == Category::kComplex && category(higher) == Category::kFloat) {
        return c10::toComplexType(higher);
      }
      // A float Python scalar with int tensors gives the default dtype, not double.
      return lower;
    }
    return higher;
  };
  return combine(combine(dim_t, zero_t), wrapped_t);
}

LoweringFn reject_bool_result(const char* what, LoweringFn fn) {
  return [what, fn = std::move(fn)](LoweringContext& ctx) -> std::vector<Value> {
    TORCH_CHECK(ctx.out_types().empty() || ctx.out_type().dtype != ElementType::kPred, "\"", what,
                "\" not implemented for 'Bool'");
    return fn(ctx);
  };
}

LoweringFn reject_bool_operands(const char* message, LoweringFn fn) {
  return [message, fn = std::move(fn)](LoweringContext& ctx) -> std::vector<Value> {
    for (size_t i = 0; i < ctx.num_args(); ++i) {
      const LArg& a = ctx.arg(i);
      if (ctx.schema().arguments()[i].name() == "alpha") continue;
      bool is_bool = (a.kind == LArg::Kind::kTensor && a.value.dtype() == ElementType::kPred) ||
                     (a.kind == LArg::Kind::kScalar && a.ivalue.isBool());
      TORCH_CHECK(!is_bool, message);
    }
    return fn(ctx);
  };
}

ElementType to_element_type(c10::ScalarType t) {
  switch (t) {
    case c10::kBool:
      return ElementType::kPred;
    case c10::kByte:
      return ElementType::kU8;
    case c10::kChar:
      return ElementType::kS8;
    case c10::kShort:
      return ElementType::kS16;
    case c10::kInt:
      return ElementType::kS32;
    case c10::kLong:
      return ElementType::kS64;
    case c10::kHalf:
      return ElementType::kF16;
    case c10::kBFloat16:
      return ElementType::kBF16;
    case c10::kFloat:
      return ElementType::kF32;
    case c10::kDouble:
      return ElementType::kF64;
    case c10::kComplexFloat:
      return ElementType::kC64;
    case c10::kComplexDouble:
      return ElementType::kC128;
    case c10::kUInt16:
      return ElementType::kU16;
    case c10::kUInt32:
      return ElementType::kU32;
    case c10::kUInt64:
      return ElementType::kU64;
    case c10::kFloat8_e4m3fn:
      return ElementType::kF8E4M3FN;
    case c10::kFloat8_e5m2:
      return ElementType::kF8E5M2;
    case c10::kFloat8_e4m3fnuz:
      return ElementType::kF8E4M3FNUZ;
    case c10::kFloat8_e5m2fnuz:
      return ElementType::kF8E5M2FNUZ;
    default:
      break;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "torchtpu: dtype ", t, " is not supported on tpu");
}

c10::ScalarType to_scalar_type(ElementType t) {
  switch (t) {
    case ElementType::kPred:
      return c10::kBool;
    case ElementType::kU8:
      return c10::kByte;
    case ElementType::kS8:
      return c10::kChar;
    case ElementType::kS16:
      return c10::kShort;
    case ElementType::kS32:
      return c10::kInt;
    case ElementType::kS64:
      return c10::kLong;
    case ElementType::kF16:
      return c10::kHalf;
    case ElementType::kBF16:
      return c10::kBFloat16;
    case ElementType::kF32:
      return c10::kFloat;
    case ElementType::kF64:
      return c10::kDouble;
    case ElementType::kC64:
      return c10::kComplexFloat;
    case ElementType::kC128:
      return c10::kComplexDouble;
    case ElementType::kU16:
      return c10::kUInt16;
    case ElementType::kU32:
      return c10::kUInt32;
    case ElementType::kU64:
      return c10::kUInt64;
    case ElementType::kF8E4M3FN:
      return c10::kFloat8_e4m3fn;
    case ElementType::kF8E5M2:
      return c10::kFloat8_e5m2;
    case ElementType::kF8E4M3FNUZ:
      return c10::kFloat8_e4m3fnuz;
    case ElementType::kF8E5M2FNUZ:
      return c10::kFloat8_e5m2fnuz;
  }
  return c10::kFloat;
}

TensorType tensor_type(c10::ScalarType t, c10::IntArrayRef sizes) {
  return TensorType(to_element_type(t), sizes.vec());
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  int64_t r = rank == 0 ? 1 : rank;
  TORCH_CHECK_INDEX(dim >= -r && dim < r, "Dimension out of range (expected to be in range of [",
                    -r, ", ", r - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + r : dim;
}

Value full_like_type(FunctionBuilder& b, double value, const TensorType& type) {
  return b.constant(value, type);
}

Value coerce(FunctionBuilder& b, Value v, const TensorType& type) {
  return b.broadcast_to(b.convert(v, type.dtype), type.shape);
}

Value zeros(FunctionBuilder& b, const TensorType& type) {
  return b.broadcast_to(b.constant(0, TensorType(type.dtype, {})), type.shape);
}

std::vector<Value> masked_results(LoweringContext& ctx,
                                  const std::vector<std::optional<Value>>& values) {
  FunctionBuilder& b = ctx.b;
  const std::vector<TensorType>& outs = ctx.out_types();
  bool all = outs.size() == values.size();
  std::vector<Value> r;
  for (size_t i = 0; i < values.size(); ++i) {
    if (all && !values[i]) r.push_back(zeros(b, outs[i]));
    if (!values[i]) continue;
    TORCH_CHECK(r.size() < outs.size(), "torchtpu lowering: ", ctx.schema().name(),
                ": more requested outputs than output types");
    const TensorType& t = outs[r.size()];
    Value v = *values[i];
    if (v.type.numel() == t.numel()) v = b.reshape(v, t.shape);
    r.push_back(coerce(b, v, t));
  }
  return r;
}

}  // namespace torchtpu::lowering
