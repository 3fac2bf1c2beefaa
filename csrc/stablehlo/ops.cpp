// Typed structured ops (ops.h): the attribute text for each is printed here,
// once.
#include "stablehlo/ops.h"

#include <string>
#include <utility>
#include <vector>

#include "stablehlo/precision.h"

namespace torchtpu::shlo {

Value bitcast_convert(FunctionBuilder &b, Value a, const TensorType &result) {
  return b.op("stablehlo.bitcast_convert", {a}, result);
}

Value abs(FunctionBuilder &b, Value a) {
  ElementType t = is_complex(a.dtype()) ? complex_component(a.dtype()) : a.dtype();
  return b.op("stablehlo.abs", {a}, a.type.with_dtype(t));
}

Value is_finite(FunctionBuilder &b, Value a) {
  return b.op("stablehlo.is_finite", {a}, a.type.with_dtype(ElementType::kPred));
}

Value real(FunctionBuilder &b, Value z) {
  return b.op("stablehlo.real", {z}, z.type.with_dtype(complex_component(z.dtype())));
}

Value imag(FunctionBuilder &b, Value z) {
  return b.op("stablehlo.imag", {z}, z.type.with_dtype(complex_component(z.dtype())));
}

Value complex(FunctionBuilder &b, Value re, Value im) {
  return b.op("stablehlo.complex", {re, im}, re.type.with_dtype(complex_of(re.dtype())));
}

std::string padding_attr(const std::vector<std::pair<int64_t, int64_t>> &padding) {
  std::string s = "dense<[";
  for (size_t i = 0; i < padding.size(); ++i) {
    if (i) s += ", ";
    s += "[" + std::to_string(padding[i].first) + ", " + std::to_string(padding[i].second) + "]";
  }
  return s + "]> : tensor<" + std::to_string(padding.size()) + "x2xi64>";
}

Value dynamic_slice(FunctionBuilder &b, Value operand, const std::vector<Value> &start,
                    const std::vector<int64_t> &sizes) {
  std::vector<Value> operands{operand};
  operands.insert(operands.end(), start.begin(), start.end());
  return b.op("stablehlo.dynamic_slice", operands, operand.type.with_shape(sizes),
              "slice_sizes = " + i64_array(sizes));
}

Value reverse(FunctionBuilder &b, Value a, const std::vector<int64_t> &dims) {
  return b.op("stablehlo.reverse", {a}, a.type, "dimensions = " + i64_array(dims));
}

std::vector<Value> reduce_window(FunctionBuilder &b, const std::vector<Value> &inputs,
                                 const std::vector<Value> &inits, const Window &w,
                                 const RegionFn &body) {
  const std::vector<int64_t> &in = inputs.at(0).shape();
  auto at = [](const std::vector<int64_t> &v, size_t i, int64_t dflt) {
    return v.empty() ? dflt : v[i];
  };
  std::vector<int64_t> shape;
  for (size_t i = 0; i < in.size(); ++i) {
    int64_t padded = in[i] == 0 ? 0 : (in[i] - 1) * at(w.base_dilations, i, 1) + 1;
    if (!w.padding.empty()) padded += w.padding[i].first + w.padding[i].second;
    int64_t span = at(w.window_dilations, i, 1) * (w.dimensions[i] - 1) + 1;
    shape.push_back(padded < span ? 0 : (padded - span) / at(w.strides, i, 1) + 1);
  }
  std::vector<TensorType> results, block;
  for (const Value &v : inputs) results.push_back(v.type.with_shape(shape));
  for (int pass = 0; pass < 2; ++pass) {
    for (const Value &v : inputs) block.push_back(TensorType(v.dtype(), {}));
  }
  std::vector<Value> operands = inputs;
  operands.insert(operands.end(), inits.begin(), inits.end());
  std::string attrs = "window_dimensions = " + i64_array(w.dimensions);
  if (!w.strides.empty()) attrs += ", window_strides = " + i64_array(w.strides);
  if (!w.base_dilations.empty()) attrs += ", base_dilations = " + i64_array(w.base_dilations);
  if (!w.window_dilations.empty()) {
    attrs += ", window_dilations = " + i64_array(w.window_dilations);
  }
  if (!w.padding.empty()) attrs += ", padding = " + padding_attr(w.padding);
  return b.op_multi("stablehlo.reduce_window", operands, results, attrs, {{block, body}});
}

namespace {

std::string conv_layout(const char *a, const char *b, size_t nd) {
  std::string s = std::string("[") + a + ", " + b;
  for (size_t i = 0; i < nd; ++i) s += ", " + std::to_string(i);
  return s + "]";
}

}  // namespace

Value convolution(FunctionBuilder &b, Value lhs, Value rhs, const ConvDims &d,
                  const TensorType &result) {
  size_t nd = d.window_strides.size();
  std::string attrs =
      "batch_group_count = " + std::to_string(d.batch_group_count) +
      " : i64, dimension_numbers = #stablehlo.conv<" + conv_layout(d.lhs_b, d.lhs_f, nd) + "x" +
      conv_layout(d.rhs_o, d.rhs_i, nd) + "->" + conv_layout(d.out_b, d.out_f, nd) +
      ">, feature_group_count = " + std::to_string(d.feature_group_count) +
      " : i64, lhs_dilation = " + i64_array(d.lhs_dilation) +
      ", padding = " + padding_attr(d.padding) + ", rhs_dilation = " + i64_array(d.rhs_dilation) +
      ", window_strides = " + i64_array(d.window_strides) + f32_precision_attr(lhs, rhs);
  return b.op("stablehlo.convolution", {lhs, rhs}, result, attrs);
}

Value fft(FunctionBuilder &b, Value a, FftType type, int64_t length) {
  static const char *const kNames[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
  std::vector<int64_t> shape = a.shape();
  ElementType dtype = a.dtype();
  if (type == FftType::kRfft) {
    shape.back() = length / 2 + 1;
    dtype = complex_of(dtype);
  } else if (type == FftType::kIrfft) {
    shape.back() = length;
    dtype = complex_component(dtype);
  }
  return b.op("stablehlo.fft", {a}, TensorType(dtype, shape),
              std::string("fft_type = #stablehlo<fft_type ") + kNames[static_cast<int>(type)] +
                  ">, fft_length = " + i64_array({length}));
}

Value triangular_solve(FunctionBuilder &b, Value a, Value rhs, const TriangularSolve &t) {
  auto flag = [](bool v) { return v ? "true" : "false"; };
  std::string attrs = std::string("left_side = ") + flag(t.left_side) +
                      ", lower = " + flag(t.lower) + ", unit_diagonal = " + flag(t.unit_diagonal) +
                      ", transpose_a = #stablehlo<transpose " +
                      (t.transpose_a ? "TRANSPOSE" : "NO_TRANSPOSE") + ">";
  return b.op("stablehlo.triangular_solve", {a, rhs}, rhs.type, attrs);
}

Value cholesky(FunctionBuilder &b, Value a, bool lower) {
  return b.op("stablehlo.cholesky", {a}, a.type, lower ? "lower = true" : "lower = false");
}

std::pair<Value, Value> rng_bit_generator(FunctionBuilder &b, Value state,
                                          const TensorType &result) {
  std::vector<Value> r = b.op_multi("stablehlo.rng_bit_generator", {state}, {state.type, result},
                                    "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>");
  return {r[0], r[1]};
}

std::vector<Value> optimization_barrier(FunctionBuilder &b, const std::vector<Value> &values) {
  std::vector<TensorType> types;
  for (const Value &v : values) types.push_back(v.type);
  return b.op_multi("stablehlo.optimization_barrier", values, types);
}

Value constant_values(FunctionBuilder &b, const std::vector<double> &values,
                      const TensorType &type) {
  TensorType flat(type.dtype, {static_cast<int64_t>(values.size())});
  bool fp = is_float(type.dtype);
  std::string s = "value = dense<[";
  for (size_t i = 0; i < values.size(); ++i) {
    s += (i ? ", " : "") + (fp ? scalar_literal(values[i], type.dtype)
                               : scalar_literal_int(static_cast<int64_t>(values[i]), type.dtype));
  }
  return b.reshape(b.op("stablehlo.constant", {}, flat, s + "]> : " + flat.str()), type.shape);
}

}  // namespace torchtpu::shlo
