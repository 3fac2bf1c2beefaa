#include "stablehlo/builder.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>

#include "stablehlo/precision.h"
#include "stablehlo/user_module.h"

namespace torchtpu::shlo {
namespace {

std::string types_list(const std::vector<Value>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) s += ", ";
    s += values[i].type.str();
  }
  return s;
}

std::string names_list(const std::vector<Value>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) s += ", ";
    s += values[i].name();
  }
  return s;
}

std::string type_str_list(const std::vector<TensorType>& types) {
  std::string s;
  for (size_t i = 0; i < types.size(); ++i) {
    if (i) s += ", ";
    s += types[i].str();
  }
  return s;
}

const char* direction_name(CompareDirection d) {
  switch (d) {
    case CompareDirection::kEQ:
      return "EQ";
    case CompareDirection::kNE:
      return "NE";
    case CompareDirection::kLT:
      return "LT";
    case CompareDirection::kLE:
      return "LE";
    case CompareDirection::kGT:
      return "GT";
    case CompareDirection::kGE:
      return "GE";
  }
  return "EQ";
}

const char* compare_type(ElementType t) {
  if (is_float(t) || is_complex(t)) return "FLOAT";
  if (is_signed_int(t)) return "SIGNED";
  return "UNSIGNED";  // unsigned ints and i1
}

std::string dims_field(const char* name, const std::vector<int64_t>& v) {
  std::string s = name;
  s += " = [";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

// Hex bit pattern for non-finite floats, which MLIR cannot spell in decimal.
std::string float_bits_literal(double value, ElementType t) {
  char buf[32];
  if (t == ElementType::kF64) {
    uint64_t bits;
    std::memcpy(&bits, &value, 8);
    std::snprintf(buf, sizeof(buf), "0x%016llX", static_cast<unsigned long long>(bits));
    return buf;
  }
  float f = static_cast<float>(value);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (t == ElementType::kF32) {
    std::snprintf(buf, sizeof(buf), "0x%08X", bits);
    return buf;
  }
  if (t == ElementType::kBF16) {
    std::snprintf(buf, sizeof(buf), "0x%04X", bits >> 16);
    return buf;
  }
  if (is_float8(t)) {
    // PyTorch's conversions: e5m2 has infinities; e4m3fn saturates infinities to +-448 and spells
    // NaN 0x7F; the fnuz formats have one NaN (0x80) for NaN and infinities alike.
    uint8_t b8;
    if (t == ElementType::kF8E5M2) {
      b8 = std::isnan(value) ? 0x7F : (value > 0 ? 0x7C : 0xFC);
    } else if (t == ElementType::kF8E4M3FN) {
      b8 = std::isnan(value) ? 0x7F : (value > 0 ? 0x7E : 0xFE);
    } else {
      b8 = 0x80;
    }
    std::snprintf(buf, sizeof(buf), "0x%02X", b8);
    return buf;
  }
  // f16: inf and nan only reach here.
  uint16_t h = std::isnan(value) ? 0x7E00 : (value > 0 ? 0x7C00 : 0xFC00);
  std::snprintf(buf, sizeof(buf), "0x%04X", h);
  return buf;
}

// A float8 constant as PyTorch converts it, up to the final rounding (which MLIR's parser does,
// to nearest even): through float32, e4m3fn saturating at +-448, the others overflowing to inf
// (e5m2) or NaN (fnuz) from the first value that rounds past their largest, and no -0 in fnuz.
// An infinity itself, in the formats without one, is their largest finite value (as e4m3fn's
// saturation gives): lowerings ask for +-inf as the identity of max/min (reduction and pooling
// inits, masks), where the fnuz NaN would poison every result.
double float8_range(double value, ElementType t) {
  value = static_cast<float>(value);
  if (std::isnan(value)) return value;
  if (std::isinf(value) && t == ElementType::kF8E4M3FNUZ) return std::copysign(240.0, value);
  if (std::isinf(value) && t == ElementType::kF8E5M2FNUZ) return std::copysign(57344.0, value);
  double mag = std::fabs(value);
  switch (t) {
    case ElementType::kF8E4M3FN:
      return mag > 448.0 ? std::copysign(448.0, value) : value;
    case ElementType::kF8E5M2:
      return mag >= 61440.0 ? std::copysign(HUGE_VAL, value) : value;
    case ElementType::kF8E4M3FNUZ:
      return mag >= 248.0 ? NAN : (value == 0 ? 0.0 : value);
    case ElementType::kF8E5M2FNUZ:
      return mag >= 61440.0 ? NAN : (value == 0 ? 0.0 : value);
    default:
      return value;
  }
}

}  // namespace

std::string dims_list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string i64_array(const std::vector<int64_t>& v) {
  if (v.empty()) return "array<i64>";
  std::string s = "array<i64: ";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + ">";
}

std::string scalar_literal(double value, ElementType t) {
  if (t == ElementType::kPred) return value != 0 ? "true" : "false";
  if (is_complex(t)) {
    ElementType c = complex_component(t);
    return "(" + scalar_literal(value, c) + ", " + scalar_literal(0.0, c) + ")";
  }
  if (is_integer(t)) return scalar_literal_int(static_cast<int64_t>(value), t);
  if (is_float8(t)) value = float8_range(value, t);
  if (!std::isfinite(value)) return float_bits_literal(value, t);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17e", value);
  return buf;
}

std::string scalar_literal_int(int64_t value, ElementType t) {
  if (t == ElementType::kPred) return value != 0 ? "true" : "false";
  if (is_float(t) || is_complex(t)) return scalar_literal(static_cast<double>(value), t);
  if (is_unsigned_int(t)) return std::to_string(static_cast<uint64_t>(value));
  return std::to_string(value);
}

FunctionBuilder::FunctionBuilder(std::shared_ptr<int> counter, int indent)
    : counter_(std::move(counter)), indent_(indent) {}

void FunctionBuilder::line(const std::string& s) {
  body_.append(static_cast<size_t>(indent_), ' ');
  body_ += s;
  body_ += '\n';
}

Value FunctionBuilder::op(const std::string& name, const std::vector<Value>& operands,
                          const TensorType& result, const std::string& attrs) {
  return op_multi(name, operands, {result}, attrs)[0];
}

std::string FunctionBuilder::region_text(const std::vector<TensorType>& arg_types,
                                         const RegionFn& fn) {
  FunctionBuilder inner(counter_, indent_ + 4);
  std::vector<Value> block_args;
  std::string header = "^bb0(";
  for (size_t i = 0; i < arg_types.size(); ++i) {
    Value v{next_id(), arg_types[i]};
    block_args.push_back(v);
    if (i) header += ", ";
    header += v.name() + ": " + v.type.str();
  }
  header += "):";
  std::vector<Value> yielded = fn(inner, block_args);
  inner.emit_return(yielded, "stablehlo.return");
  std::string text = "({\n";
  text.append(static_cast<size_t>(indent_ + 2), ' ');
  text += header + "\n" + inner.body();
  text.append(static_cast<size_t>(indent_), ' ');
  text += "})";
  return text;
}

std::vector<Value> FunctionBuilder::op_multi(
    const std::string& name, const std::vector<Value>& operands,
    const std::vector<TensorType>& results, const std::string& attrs,
    const std::vector<std::pair<std::vector<TensorType>, RegionFn>>& regions) {
  const int id = next_id();
  std::vector<Value> out;
  out.reserve(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    out.push_back(Value{id, results[i], results.size() == 1 ? -1 : static_cast<int>(i)});
  }
  std::string regions_str;
  // Generic form: all regions inside one pair of parentheses, comma separated.
  for (const auto& [types, fn] : regions) {
    std::string r = region_text(types, fn);  // "({...})"
    regions_str += (regions_str.empty() ? " (" : ", ") + r.substr(1, r.size() - 2);
  }
  if (!regions_str.empty()) regions_str += ")";
  std::string s;
  if (results.size() == 1) s = "%v" + std::to_string(id) + " = ";
  if (results.size() > 1)
    s = "%v" + std::to_string(id) + ":" + std::to_string(results.size()) + " = ";
  s += "\"" + name + "\"(" + names_list(operands) + ")" + regions_str;
  if (!attrs.empty()) s += " {" + attrs + "}";
  s += " : (" + types_list(operands) + ") -> ";
  s += results.size() == 1 ? results[0].str() : "(" + type_str_list(results) + ")";
  line(s);
  return out;
}

Value FunctionBuilder::constant(double value, const TensorType& type) {
  return op("stablehlo.constant", {}, type,
            "value = dense<" + scalar_literal(value, type.dtype) + "> : " + type.str());
}

Value FunctionBuilder::constant_int(int64_t value, const TensorType& type) {
  return op("stablehlo.constant", {}, type,
            "value = dense<" + scalar_literal_int(value, type.dtype) + "> : " + type.str());
}

Value FunctionBuilder::iota(const TensorType& type, int64_t dim) {
  return op("stablehlo.iota", {}, type, "iota_dimension = " + std::to_string(dim) + " : i64");
}

Value FunctionBuilder::unary(const std::string& name, Value a) { return op(name, {a}, a.type); }

Value FunctionBuilder::binary(const std::string& name, Value a, Value b) {
  if (a.type != b.type) {
    throw std::invalid_argument(name + ": operand types differ: " + a.type.str() + " vs " +
                                b.type.str());
  }
  return op(name, {a, b}, a.type);
}

Value FunctionBuilder::compare(Value a, Value b, CompareDirection dir) {
  if (a.type != b.type) {
    throw std::invalid_argument("stablehlo.compare: operand types differ: " + a.type.str() +
                                " vs " + b.type.str());
  }
  std::string attrs = std::string("comparison_direction = #stablehlo<comparison_direction ") +
                      direction_name(dir) + ">, compare_type = #stablehlo<comparison_type " +
                      compare_type(a.dtype()) + ">";
  return op("stablehlo.compare", {a, b}, a.type.with_dtype(ElementType::kPred), attrs);
}

Value FunctionBuilder::select(Value pred, Value on_true, Value on_false) {
  return op("stablehlo.select", {pred, on_true, on_false}, on_true.type);
}

Value FunctionBuilder::clamp(Value lo, Value x, Value hi) {
  return op("stablehlo.clamp", {lo, x, hi}, x.type);
}

Value FunctionBuilder::convert(Value a, ElementType to) {
  if (a.dtype() == to) return a;
  if (to == ElementType::kPred) {
    // convert to i1 is "!= 0", spelled explicitly so NaN and negative zero follow PyTorch.
    Value zero = constant(0, a.type);
    return compare(a, zero, CompareDirection::kNE);
  }
  if (is_complex(a.dtype()) && !is_complex(to)) {
    // XLA converts complex to real only through the real part (PyTorch's cast drops imag too).
    a = op("stablehlo.real", {a}, a.type.with_dtype(complex_component(a.dtype())));
    if (a.dtype() == to) return a;
  }
  if (is_float8(to)) {
    // PyTorch's float8 conversions (c10's Float8_* constructors) take a float: other sources
    // are rounded to float32 first, and float8_e4m3fn saturates (1000 and inf give 448, NaN
    // stays NaN) where XLA's convert overflows to NaN. e5m2 and the fnuz formats overflow as
    // XLA does (to inf, to NaN).
    a = convert(a, ElementType::kF32);
    if (to == ElementType::kF8E4M3FN) {
      Value hi = constant(448.0, a.type), lo = constant(-448.0, a.type);
      a = select(compare(a, hi, CompareDirection::kGT), hi, a);  // NaN compares false: kept
      a = select(compare(a, lo, CompareDirection::kLT), lo, a);
    }
    return op("stablehlo.convert", {a}, a.type.with_dtype(to));
  }
  if (is_float(a.dtype()) && (to == ElementType::kS8 || to == ElementType::kS16 ||
                              to == ElementType::kU8 || to == ElementType::kU16)) {
    // PyTorch's CPU kernels cast floats to narrow integers through a 32-bit integer, so values
    // outside the narrow range wrap (300.0 -> int8 44); XLA's direct convert saturates.
    a = op("stablehlo.convert", {a}, a.type.with_dtype(ElementType::kS32));
  }
  return op("stablehlo.convert", {a}, a.type.with_dtype(to));
}

Value FunctionBuilder::bitcast_convert(Value a, ElementType to) {
  if (a.dtype() == to) return a;
  return op("stablehlo.bitcast_convert", {a}, a.type.with_dtype(to));
}

Value FunctionBuilder::reshape(Value a, const std::vector<int64_t>& shape) {
  if (a.shape() == shape) return a;
  return op("stablehlo.reshape", {a}, a.type.with_shape(shape));
}

Value FunctionBuilder::broadcast_in_dim(Value a, const std::vector<int64_t>& shape,
                                        const std::vector<int64_t>& dims) {
  return op("stablehlo.broadcast_in_dim", {a}, a.type.with_shape(shape),
            "broadcast_dimensions = " + i64_array(dims));
}

Value FunctionBuilder::broadcast_to(Value a, const std::vector<int64_t>& shape) {
  if (a.shape() == shape) return a;
  int64_t lead = static_cast<int64_t>(shape.size()) - a.rank();
  if (lead < 0) {
    throw std::invalid_argument("broadcast_to: " + a.type.str() + " has more dims than target");
  }
  // Size-1 dims that must grow are reshaped away first, so broadcast_in_dim only adds dims.
  std::vector<int64_t> kept_shape, dims;
  for (int64_t i = 0; i < a.rank(); ++i) {
    int64_t target = shape[static_cast<size_t>(i + lead)];
    int64_t have = a.shape()[static_cast<size_t>(i)];
    if (have == target) {
      kept_shape.push_back(have);
      dims.push_back(i + lead);
    } else if (have != 1) {
      throw std::invalid_argument("broadcast_to: cannot broadcast " + a.type.str());
    }
  }
  Value squeezed = reshape(a, kept_shape);
  return broadcast_in_dim(squeezed, shape, dims);
}

Value FunctionBuilder::transpose(Value a, const std::vector<int64_t>& perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (identity) return a;
  std::vector<int64_t> shape;
  for (int64_t p : perm) shape.push_back(a.shape()[static_cast<size_t>(p)]);
  return op("stablehlo.transpose", {a}, a.type.with_shape(shape),
            "permutation = " + i64_array(perm));
}

Value FunctionBuilder::slice(Value a, const std::vector<int64_t>& start,
                             const std::vector<int64_t>& limit,
                             const std::vector<int64_t>& strides) {
  std::vector<int64_t> shape;
  bool identity = true;
  for (size_t i = 0; i < start.size(); ++i) {
    int64_t n = (limit[i] - start[i] + strides[i] - 1) / strides[i];
    shape.push_back(n < 0 ? 0 : n);
    identity &= start[i] == 0 && limit[i] == a.shape()[i] && strides[i] == 1;
  }
  if (identity) return a;
  return op("stablehlo.slice", {a}, a.type.with_shape(shape),
            "start_indices = " + i64_array(start) + ", limit_indices = " + i64_array(limit) +
                ", strides = " + i64_array(strides));
}

Value FunctionBuilder::pad(Value a, Value pad_value, const std::vector<int64_t>& low,
                           const std::vector<int64_t>& high, const std::vector<int64_t>& interior) {
  std::vector<int64_t> shape;
  for (size_t i = 0; i < low.size(); ++i) {
    int64_t d = a.shape()[i];
    shape.push_back(low[i] + high[i] + d + (d > 0 ? (d - 1) * interior[i] : 0));
  }
  return op("stablehlo.pad", {a, pad_value}, a.type.with_shape(shape),
            "edge_padding_low = " + i64_array(low) + ", edge_padding_high = " + i64_array(high) +
                ", interior_padding = " + i64_array(interior));
}

Value FunctionBuilder::concatenate(const std::vector<Value>& values, int64_t dim) {
  if (values.size() == 1) return values[0];
  std::vector<int64_t> shape = values.at(0).shape();
  shape[static_cast<size_t>(dim)] = 0;
  for (const Value& v : values) shape[static_cast<size_t>(dim)] += v.shape()[dim];
  return op("stablehlo.concatenate", values, values[0].type.with_shape(shape),
            "dimension = " + std::to_string(dim) + " : i64");
}

Value FunctionBuilder::dynamic_update_slice(Value operand, Value update,
                                            const std::vector<Value>& start) {
  std::vector<Value> operands{operand, update};
  operands.insert(operands.end(), start.begin(), start.end());
  return op("stablehlo.dynamic_update_slice", operands, operand.type);
}

std::vector<Value> FunctionBuilder::reduce(const std::vector<Value>& inputs,
                                           const std::vector<Value>& inits,
                                           const std::vector<int64_t>& dims, const RegionFn& body) {
  std::vector<TensorType> results, block_types;
  for (const Value& v : inputs) {
    std::vector<int64_t> shape;
    for (int64_t i = 0; i < v.rank(); ++i) {
      bool reduced = false;
      for (int64_t d : dims) reduced |= d == i;
      if (!reduced) shape.push_back(v.shape()[static_cast<size_t>(i)]);
    }
    results.push_back(v.type.with_shape(shape));
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (const Value& v : inputs) block_types.push_back(TensorType(v.dtype(), {}));
  }
  std::vector<Value> operands = inputs;
  operands.insert(operands.end(), inits.begin(), inits.end());
  return op_multi("stablehlo.reduce", operands, results, "dimensions = " + i64_array(dims),
                  {{block_types, body}});
}

std::vector<Value> FunctionBuilder::sort(const std::vector<Value>& operands, int64_t dim,
                                         bool is_stable, const RegionFn& comparator) {
  std::vector<TensorType> results, block_types;
  for (const Value& v : operands) {
    if (v.shape() != operands.at(0).shape()) {
      throw std::invalid_argument("stablehlo.sort: operand shapes differ: " + v.type.str() +
                                  " vs " + operands[0].type.str());
    }
    results.push_back(v.type);
    block_types.push_back(TensorType(v.dtype(), {}));
    block_types.push_back(TensorType(v.dtype(), {}));
  }
  return op_multi("stablehlo.sort", operands, results,
                  "dimension = " + std::to_string(dim) +
                      " : i64, is_stable = " + (is_stable ? "true" : "false"),
                  {{block_types, comparator}});
}

std::vector<Value> FunctionBuilder::while_loop(const std::vector<Value>& init, const RegionFn& cond,
                                               const RegionFn& body) {
  std::vector<TensorType> types;
  for (const Value& v : init) types.push_back(v.type);
  // A region yielding the wrong types would only fail later, in the plugin's parser, with a
  // message far from the lowering that built it.
  RegionFn checked_cond = [&](FunctionBuilder& b, const std::vector<Value>& args) {
    std::vector<Value> out = cond(b, args);
    if (out.size() != 1 || out[0].type != TensorType(ElementType::kPred, {})) {
      throw std::invalid_argument("stablehlo.while: condition must yield one tensor<i1>, got (" +
                                  types_list(out) + ")");
    }
    return out;
  };
  RegionFn checked_body = [&](FunctionBuilder& b, const std::vector<Value>& args) {
    std::vector<Value> out = body(b, args);
    bool ok = out.size() == types.size();
    for (size_t i = 0; ok && i < out.size(); ++i) ok = out[i].type == types[i];
    if (!ok) {
      throw std::invalid_argument("stablehlo.while: body must yield (" + type_str_list(types) +
                                  "), got (" + types_list(out) + ")");
    }
    return out;
  };
  return op_multi("stablehlo.while", init, types, "",
                  {{types, checked_cond}, {types, checked_body}});
}

Value FunctionBuilder::reduce_simple(Value input, Value init, const std::vector<int64_t>& dims,
                                     const std::string& body_op) {
  return reduce({input}, {init}, dims,
                [&](FunctionBuilder& b, const std::vector<Value>& args) -> std::vector<Value> {
                  return {b.binary(body_op, args[0], args[1])};
                })[0];
}

Value FunctionBuilder::dot_general(Value lhs, Value rhs, const std::vector<int64_t>& lhs_batch,
                                   const std::vector<int64_t>& rhs_batch,
                                   const std::vector<int64_t>& lhs_contract,
                                   const std::vector<int64_t>& rhs_contract,
                                   const TensorType& result) {
  std::vector<std::string> fields;
  if (!lhs_batch.empty()) {
    fields.push_back(dims_field("lhs_batching_dimensions", lhs_batch));
    fields.push_back(dims_field("rhs_batching_dimensions", rhs_batch));
  }
  fields.push_back(dims_field("lhs_contracting_dimensions", lhs_contract));
  fields.push_back(dims_field("rhs_contracting_dimensions", rhs_contract));
  std::string dn = "dot_dimension_numbers = #stablehlo.dot<";
  for (size_t i = 0; i < fields.size(); ++i) dn += (i ? ", " : "") + fields[i];
  dn += ">" + f32_precision_attr(lhs, rhs);
  return op("stablehlo.dot_general", {lhs, rhs}, result, dn);
}

Value FunctionBuilder::add_argument(const TensorType& type, const std::string& attrs) {
  Value v{next_id(), type};
  args_.push_back(v);
  arg_attrs_.push_back(attrs);
  return v;
}

std::string FunctionBuilder::arg_list() const {
  std::string s;
  for (size_t i = 0; i < args_.size(); ++i) {
    if (i) s += ", ";
    s += args_[i].name() + ": " + args_[i].type.str();
    if (!arg_attrs_[i].empty()) s += " {" + arg_attrs_[i] + "}";
  }
  return s;
}

void FunctionBuilder::emit_return(const std::vector<Value>& values, const char* op) {
  line(std::string("\"") + op + "\"(" + names_list(values) + ") : (" + types_list(values) +
       ") -> ()");
}

namespace {
// Functions the module being built on this thread defines besides @main (user modules that
// @main calls, lowering/stablehlo_call.cpp), by key. Building a module is sequential on its
// thread, from the ModuleBuilder's construction to its str(); the set lives here rather than
// in ModuleBuilder so a lowering, which sees only its FunctionBuilder, can add to it.
thread_local std::map<std::string, std::string> module_functions;
}  // namespace

void add_module_functions(const std::string& key, const std::string& text) {
  module_functions.emplace(key, text);
}

ModuleBuilder::ModuleBuilder() : counter_(std::make_shared<int>(0)), main_(counter_, 4) {
  module_functions.clear();
}

void ModuleBuilder::finish(const std::vector<Value>& results) {
  if (finished_) throw std::logic_error("ModuleBuilder::finish called twice");
  finished_ = true;
  for (const Value& v : results) result_types_.push_back(v.type);
  main_.emit_return(results);
}

std::string ModuleBuilder::str() const {
  std::string s = "module @torchtpu";
  if (num_replicas_ > 0) {
    s += " attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = " +
         std::to_string(num_replicas_) + " : i32}";
  }
  s += " {\n  func.func public @main(" + main_.arg_list() + ") -> (" +
       type_str_list(result_types_) + ") {\n";
  s += main_.body();
  s += "  }\n";
  for (const auto& [key, text] : module_functions) s += text;
  s += "}\n";
  return s;
}

// ---- gather / scatter ----------------------------------------------------------------------

Value FunctionBuilder::gather(Value operand, Value indices, const GatherDims& dims,
                              const std::vector<int64_t>& slice_sizes, const TensorType& result) {
  std::string dn = "dimension_numbers = #stablehlo.gather<";
  if (!dims.offset_dims.empty()) dn += "offset_dims = " + dims_list(dims.offset_dims) + ", ";
  if (!dims.collapsed_slice_dims.empty()) {
    dn += "collapsed_slice_dims = " + dims_list(dims.collapsed_slice_dims) + ", ";
  }
  dn += "start_index_map = " + dims_list(dims.start_index_map) +
        ", index_vector_dim = " + std::to_string(dims.index_vector_dim) +
        ">, indices_are_sorted = false, slice_sizes = " + i64_array(slice_sizes);
  return op("stablehlo.gather", {operand, indices}, result, dn);
}

Value FunctionBuilder::scatter(Value operand, Value indices, Value updates, const ScatterDims& dims,
                               const RegionFn& combine) {
  std::string dn = "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<";
  if (!dims.update_window_dims.empty()) {
    dn += "update_window_dims = " + dims_list(dims.update_window_dims) + ", ";
  }
  if (!dims.inserted_window_dims.empty()) {
    dn += "inserted_window_dims = " + dims_list(dims.inserted_window_dims) + ", ";
  }
  dn += "scatter_dims_to_operand_dims = " + dims_list(dims.scatter_dims_to_operand_dims) +
        ", index_vector_dim = " + std::to_string(dims.index_vector_dim) +
        ">, unique_indices = false";
  TensorType s(operand.dtype(), {});
  return op_multi("stablehlo.scatter", {operand, indices, updates}, {operand.type}, dn,
                  {{{s, s}, combine}})[0];
}

}  // namespace torchtpu::shlo
