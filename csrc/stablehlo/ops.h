// Typed emission of the structured StableHLO ops beyond FunctionBuilder's core
// (windows, convolution, FFT, linear algebra, random bits, complex parts): each
// takes its attributes as a struct or plain values and prints them, so no
// lowering writes attribute text by hand (scripts/check_layering.sh rejects a
// raw op("stablehlo.…") in csrc/lowering/). Free functions over a
// FunctionBuilder, kept apart from builder.h so that adding one rebuilds only
// its users.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "stablehlo/builder.h"
#include "stablehlo/types.h"

namespace torchtpu::shlo {

// stablehlo.convolution's dimension numbers and window. The layouts use
// StableHLO's short form: each operand's first two dims are labelled ("b"/"f"
// for the input and result, "o"/"i" for the kernel, in either order: a weight
// gradient swaps them) and its spatial dims follow in order.
struct ConvDims {
  const char *lhs_b = "b";
  const char *lhs_f = "f";
  const char *rhs_o = "o";
  const char *rhs_i = "i";
  const char *out_b = "b";
  const char *out_f = "f";
  std::vector<int64_t> window_strides, lhs_dilation, rhs_dilation;
  // One (low, high) pair per spatial dim; negative entries crop.
  std::vector<std::pair<int64_t, int64_t>> padding;
  int64_t feature_group_count = 1;
  int64_t batch_group_count = 1;
};

// stablehlo.reduce_window's window. Empty lists are left out (StableHLO's
// defaults: strides and dilations 1, no padding).
struct Window {
  std::vector<int64_t> dimensions;
  std::vector<int64_t> strides;
  std::vector<int64_t> base_dilations;
  std::vector<int64_t> window_dilations;
  std::vector<std::pair<int64_t, int64_t>> padding;  // (low, high) per dim
};

enum class FftType { kFft, kIfft, kRfft, kIrfft };

// stablehlo.triangular_solve's attributes: solves op(a) x = b (left_side) or x
// op(a) = b.
struct TriangularSolve {
  bool left_side = true;
  bool lower = true;
  bool unit_diagonal = false;
  bool transpose_a = false;
};

// "dense<[[0, 1], [2, 0]]> : tensor<2x2xi64>": a padding attribute.
std::string padding_attr(const std::vector<std::pair<int64_t, int64_t>> &padding);

// |a|; for a complex operand its modulus, a real value.
Value abs(FunctionBuilder &b, Value a);
Value is_finite(FunctionBuilder &b, Value a);  // i1 of a's shape
// Complex parts and construction: real/imag give the component dtype, complex
// the complex dtype of its (same-typed) parts.
Value real(FunctionBuilder &b, Value z);
Value imag(FunctionBuilder &b, Value z);
Value complex(FunctionBuilder &b, Value re, Value im);
// A bitcast between widths: the last dim splits (to a narrower type) or joins
// (to a wider).
Value bitcast_convert(FunctionBuilder &b, Value a, const TensorType &result);
// operand[start : start + sizes] with 0-d integer starts (XLA clamps them into
// range).
Value dynamic_slice(FunctionBuilder &b, Value operand, const std::vector<Value> &start,
                    const std::vector<int64_t> &sizes);
Value reverse(FunctionBuilder &b, Value a, const std::vector<int64_t> &dims);
// stablehlo.reduce_window of `inputs` (same shape) with one init each; `body`
// gets 2*N scalar block args. The result shape follows from the window (padding
// and dilations included).
std::vector<Value> reduce_window(FunctionBuilder &b, const std::vector<Value> &inputs,
                                 const std::vector<Value> &inits, const Window &window,
                                 const RegionFn &body);
Value convolution(FunctionBuilder &b, Value lhs, Value rhs, const ConvDims &dims,
                  const TensorType &result);
// FFT over the last dim of `a` (length `length`); the result type is derived:
// complex of the same width for FFT/IFFT/RFFT, real for IRFFT; RFFT keeps
// length / 2 + 1 entries.
Value fft(FunctionBuilder &b, Value a, FftType type, int64_t length);
Value triangular_solve(FunctionBuilder &b, Value a, Value rhs, const TriangularSolve &attrs);
Value cholesky(FunctionBuilder &b, Value a, bool lower);
// ThreeFry bits: (new state, bits of type `result`) from a tensor<2xui64>
// state.
std::pair<Value, Value> rng_bit_generator(FunctionBuilder &b, Value state,
                                          const TensorType &result);
// Values XLA must not fold or move across (e.g. a constant divisor kept a true
// division).
std::vector<Value> optimization_barrier(FunctionBuilder &b, const std::vector<Value> &values);
// A constant of `type` holding `values` in row-major order (integers for
// integer types).
Value constant_values(FunctionBuilder &b, const std::vector<double> &values,
                      const TensorType &type);

}  // namespace torchtpu::shlo
