// Convolution forward and backward (1d/2d/3d, strided, padded, dilated, grouped, transposed)
// on stablehlo.convolution. Every variant reduces to one primitive, `conv`, with PyTorch's
// NC<spatial> layout on both sides:
//   - transposed convolution = convolution of the stride-dilated input with the spatially
//     reversed, in/out-swapped kernel (lhs_dilation does the dilation without materializing it);
//   - grad_input of a convolution = transposed convolution of grad_output (and vice versa);
//   - grad_weight = convolution of input and grad_output with batch and feature roles swapped
//     (batch_group_count carries the groups), as XLA's own autodiff does it.
// Half-precision inputs accumulate in f32 (the convolution's result type) and round once.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <functional>
#include <optional>
#include <string>

#include "lowering/common.h"
#include "lowering/lowering.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {
namespace {

// Which operand dims play which role ("b"/"f" of lhs and out, "o"/"i" of rhs), the window and
// the groups: the builder's typed attributes.
using ConvSpec = shlo::ConvDims;

// out[d] = (lhs_dilated[d] + pad_lo + pad_hi - rhs_dilated[d]) / stride + 1 per spatial dim.
// Half-precision operands give an f32 result (the accumulator); callers round it once.
Value conv(FunctionBuilder& b, Value lhs, Value rhs, const ConvSpec& s,
           const std::vector<int64_t>& out_shape, ElementType dtype) {
  return shlo::convolution(b, lhs, rhs, s, TensorType(opmath_type(dtype), out_shape));
}

std::vector<int64_t> ones(size_t n) { return std::vector<int64_t>(n, 1); }

// Any element of v inf or NaN, as a tensor<i1>.
Value any_nonfinite(FunctionBuilder& b, Value v) {
  std::vector<int64_t> all;
  for (int64_t d = 0; d < v.rank(); ++d) all.push_back(d);
  Value finite =
      b.reduce_simple(shlo::is_finite(b, v), b.constant(1, TensorType(ElementType::kPred, {})), all,
                      "stablehlo.and");
  return b.unary("stablehlo.not", finite);
}

using ExactFn = std::function<Value(FunctionBuilder&, const std::vector<Value>&)>;

// `fast` unless `pending`; then `exact` of `state` (a while loop of at most one trip stands for
// a conditional, so the exact form costs nothing when no operand is inf or NaN; the loop state
// carries what the exact form reads).
Value unless_nonfinite(FunctionBuilder& b, Value pending, Value fast,
                       const std::vector<Value>& state, const ExactFn& exact) {
  std::vector<Value> init{pending, fast};
  init.insert(init.end(), state.begin(), state.end());
  std::vector<Value> st = b.while_loop(
      init, [](FunctionBuilder&, const std::vector<Value>& s) { return std::vector<Value>{s[0]}; },
      [&](FunctionBuilder& ib, const std::vector<Value>& s) {
        std::vector<Value> out(s.begin(), s.end());
        out[0] = ib.constant(0, s[0].type);
        out[1] = exact(ib, std::vector<Value>(s.begin() + 2, s.end()));
        return out;
      });
  return st[1];
}

// Per spatial dim parameters, each broadcast from a single value when given as one int.
struct Params {
  std::vector<int64_t> stride, padding, dilation, output_padding;
  int64_t groups = 1;
};

std::vector<int64_t> expand(std::vector<int64_t> v, size_t nd, int64_t dflt) {
  if (v.empty()) return std::vector<int64_t>(nd, dflt);
  if (v.size() == 1 && nd > 1) return std::vector<int64_t>(nd, v[0]);
  return v;
}

Params read_params(const LoweringContext& ctx, size_t nd) {
  Params p;
  p.stride = expand(ctx.int_list(ctx.index_of("stride")), nd, 1);
  p.padding = expand(ctx.int_list(ctx.index_of("padding")), nd, 0);
  p.dilation = expand(ctx.int_list(ctx.index_of("dilation")), nd, 1);
  p.output_padding = expand(ctx.int_list(ctx.index_of("output_padding")), nd, 0);
  p.groups = ctx.int_arg(ctx.index_of("groups"));
  TORCH_CHECK(p.stride.size() == nd && p.padding.size() == nd && p.dilation.size() == nd &&
                  p.output_padding.size() == nd,
              "torchtpu lowering: convolution: stride/padding/dilation/output_padding must have ",
              nd, " entries");
  return p;
}

// Regular convolution: x (N, Cin, *), w (Cout, Cin/g, *k) -> (N, Cout, *out). The high
// padding is derived from `out_shape`, so the same code serves grad_input of a transposed
// convolution, whose input may be shorter than a full convolution of grad_output (when
// output_padding >= stride, the last rows of grad_output feed no input element).
Value conv_forward(FunctionBuilder& b, Value x, Value w, const Params& p,
                   const std::vector<int64_t>& out_shape, ElementType out_dtype) {
  size_t nd = static_cast<size_t>(x.rank() - 2);
  ConvSpec s;
  s.window_strides = p.stride;
  s.lhs_dilation = ones(nd);
  s.rhs_dilation = p.dilation;
  for (size_t i = 0; i < nd; ++i) {
    int64_t span = p.dilation[i] * (w.shape()[i + 2] - 1) + 1;
    int64_t hi = (out_shape[i + 2] - 1) * p.stride[i] + span - x.shape()[i + 2] - p.padding[i];
    s.padding.push_back({p.padding[i], hi});
  }
  s.feature_group_count = p.groups;
  return conv(b, x, w, s, out_shape, out_dtype);
}

// Transposed convolution as the CPU computes it (gemm, then col2im/col2vol): every input element
// times every tap, each tap's products placed at i * stride + k * dil - pad by stablehlo.pad and
// summed. No weight ever meets the zeros of the dilation or the padding, so an inf or NaN weight
// reaches only the outputs its products reach (XLA's convolution multiplies them by those zeros:
// a NaN weight made its whole output channel NaN). x (N, Cin, *in), w (Cin, Cout/g, *k).
Value conv_transposed_scatter(FunctionBuilder& b, Value x, Value w, const Params& p,
                              const std::vector<int64_t>& out_shape, ElementType out_dtype) {
  size_t nd = static_cast<size_t>(x.rank() - 2);
  int64_t g = p.groups, n = x.shape()[0], cin = w.shape()[0], cout_g = w.shape()[1];
  int64_t in_numel = 1, taps = 1;
  for (size_t i = 0; i < nd; ++i) {
    in_numel *= x.shape()[i + 2];
    taps *= w.shape()[i + 2];
  }
  ElementType acc = opmath_type(out_dtype);
  // (g, N, S, Cout/g, K): batch g, contract Cin/g.
  Value xs = b.reshape(x, {n, g, cin / g, in_numel});
  Value ws = b.reshape(w, {g, cin / g, cout_g, taps});
  Value prod =
      b.dot_general(xs, ws, {1}, {0}, {2}, {1}, TensorType(acc, {g, n, in_numel, cout_g, taps}));
  std::vector<int64_t> in_shape{n, g * cout_g};
  for (size_t i = 0; i < nd; ++i) in_shape.push_back(x.shape()[i + 2]);
  Value zero = b.constant(0, TensorType(acc, {}));
  Value sum = b.broadcast_to(zero, out_shape);
  std::vector<int64_t> k(nd, 0);
  for (int64_t t = 0; t < taps; ++t) {
    // k: the tap's multi-index (last dim fastest, as the weight is laid out).
    for (int64_t r = t, i = static_cast<int64_t>(nd) - 1; i >= 0; --i) {
      int64_t ki = w.shape()[static_cast<size_t>(i) + 2];
      k[static_cast<size_t>(i)] = r % ki;
      r /= ki;
    }
    std::vector<int64_t> lo{0, 0}, hi{0, 0}, interior{0, 0};
    bool reaches = true;
    for (size_t i = 0; i < nd; ++i) {
      int64_t in = x.shape()[i + 2], span = (in - 1) * p.stride[i] + 1;
      int64_t l = k[i] * p.dilation[i] - p.padding[i];
      int64_t h = out_shape[i + 2] - l - span;
      reaches = reaches && l < out_shape[i + 2] && l + span > 0;
      lo.push_back(l);
      hi.push_back(h);
      interior.push_back(p.stride[i] - 1);
    }
    if (!reaches) continue;
    Value tap = b.slice(prod, {0, 0, 0, 0, t}, {g, n, in_numel, cout_g, t + 1}, {1, 1, 1, 1, 1});
    // (g, N, S, Cout/g) -> (N, g, Cout/g, S) -> (N, Cout, *in)
    tap = b.reshape(b.transpose(b.reshape(tap, {g, n, in_numel, cout_g}), {1, 0, 3, 2}), in_shape);
    sum = b.add(sum, b.pad(tap, zero, lo, hi, interior));
  }
  return sum;
}

// Transposed convolution: x (N, Cin, *), w (Cin, Cout/g, *k) -> (N, Cout, *out) with
// out = (in - 1) * stride - 2 * pad + dil * (k - 1) + output_padding + 1; `out_shape` decides
// the high padding, so the same code serves grad_input of a regular convolution. XLA's
// convolution runs unless a weight is inf or NaN; then the scatter form above does.
Value conv_transposed_xla(FunctionBuilder& b, Value x, Value w, const Params& p,
                          const std::vector<int64_t>& out_shape, ElementType out_dtype);

Value conv_transposed(FunctionBuilder& b, Value x, Value w, const Params& p,
                      const std::vector<int64_t>& out_shape, ElementType out_dtype) {
  Value fast = conv_transposed_xla(b, x, w, p, out_shape, out_dtype);
  if (!shlo::is_float(w.dtype())) return fast;
  return unless_nonfinite(b, any_nonfinite(b, w), fast, {x, w},
                          [&](FunctionBuilder& ib, const std::vector<Value>& s) {
                            return conv_transposed_scatter(ib, s[0], s[1], p, out_shape, out_dtype);
                          });
}

Value conv_transposed_xla(FunctionBuilder& b, Value x, Value w, const Params& p,
                          const std::vector<int64_t>& out_shape, ElementType out_dtype) {
  size_t nd = static_cast<size_t>(x.rank() - 2);
  int64_t g = p.groups;
  int64_t cin = w.shape()[0], cout_g = w.shape()[1];
  // (Cin, Cout/g, k) -> (g, Cin/g, Cout/g, k) -> (g, Cout/g, Cin/g, k) -> (Cout, Cin/g, k).
  std::vector<int64_t> split{g, cin / g, cout_g}, perm{0, 2, 1}, merged{g * cout_g, cin / g};
  std::vector<int64_t> rev;
  for (size_t i = 0; i < nd; ++i) {
    int64_t k = w.shape()[i + 2];
    split.push_back(k);
    merged.push_back(k);
    perm.push_back(static_cast<int64_t>(i) + 3);
    rev.push_back(static_cast<int64_t>(i) + 2);
  }
  Value wt = b.transpose(b.reshape(w, split), perm);
  wt = b.reshape(wt, merged);
  wt = shlo::reverse(b, wt, rev);
  ConvSpec s;
  s.window_strides = ones(nd);
  s.lhs_dilation = p.stride;
  s.rhs_dilation = p.dilation;
  for (size_t i = 0; i < nd; ++i) {
    int64_t k = w.shape()[i + 2];
    int64_t lo = p.dilation[i] * (k - 1) - p.padding[i];
    int64_t in = x.shape()[i + 2];
    int64_t dilated = (in - 1) * p.stride[i] + 1;
    // out = dilated + lo + hi - dil * (k - 1)
    int64_t hi = out_shape[i + 2] - dilated - lo + p.dilation[i] * (k - 1);
    s.padding.push_back({lo, hi});
  }
  s.feature_group_count = g;
  return conv(b, x, wt, s, out_shape, out_dtype);
}

// dL/dw of a regular convolution with input x (N, Cin, *) and upstream gradient dy
// (N, Cout, *out): (Cout, Cin/g, *k). Convolves x (batch and feature swapped) with dy as the
// kernel: the window stride is the forward dilation and the kernel dilation the forward stride.
Value conv_weight_grad_xla(FunctionBuilder& b, Value x, Value dy, const Params& p,
                           const std::vector<int64_t>& w_shape, ElementType out_dtype) {
  size_t nd = static_cast<size_t>(x.rank() - 2);
  ConvSpec s;
  // lhs x: dim 0 (N) is the contracted feature, dim 1 (Cin) the batch.
  s.lhs_b = "f";
  s.lhs_f = "b";
  // rhs dy: dim 0 (N) is the input feature, dim 1 (Cout) the output feature.
  s.rhs_o = "i";
  s.rhs_i = "o";
  // out: dim 0 (Cout) is the feature, dim 1 (Cin/g) the batch: the weight's own layout.
  s.out_b = "f";
  s.out_f = "b";
  s.window_strides = p.dilation;
  s.lhs_dilation = ones(nd);
  s.rhs_dilation = p.stride;
  for (size_t i = 0; i < nd; ++i) {
    int64_t k = w_shape[i + 2];
    int64_t in = x.shape()[i + 2], o = dy.shape()[i + 2];
    int64_t lo = p.padding[i];
    // Rows of the input past the last window are cut off (negative high padding).
    int64_t hi = (k - 1) * p.dilation[i] + p.stride[i] * (o - 1) + 1 - in - lo;
    s.padding.push_back({lo, hi});
  }
  s.batch_group_count = p.groups;
  return conv(b, x, dy, s, w_shape, out_dtype);
}

// Grouped weight gradient: XLA's batch_group_count form lets an inf or NaN of one group reach
// the other groups' gradients (inf * 0 = NaN; a transposed convolution's input with an inf
// made another group's weight gradient NaN). With a non-finite operand, the ungrouped gradient
// (every input channel against every output channel) is computed instead and its diagonal
// blocks are picked by select: the other groups' products are dropped, not multiplied by zero.
Value conv_weight_grad(FunctionBuilder& b, Value x, Value dy, const Params& p,
                       const std::vector<int64_t>& w_shape, ElementType out_dtype) {
  Value fast = conv_weight_grad_xla(b, x, dy, p, w_shape, out_dtype);
  const int64_t g = p.groups;
  if (g == 1 || !shlo::is_float(x.dtype()) || !shlo::is_float(dy.dtype())) return fast;
  Value pending = b.binary("stablehlo.or", any_nonfinite(b, x), any_nonfinite(b, dy));
  return unless_nonfinite(
      b, pending, fast, {x, dy}, [&](FunctionBuilder& ib, const std::vector<Value>& s) {
        Params p1 = p;
        p1.groups = 1;
        int64_t rows = w_shape[0], cols = w_shape[1], taps = 1;
        for (size_t i = 2; i < w_shape.size(); ++i) taps *= w_shape[i];
        std::vector<int64_t> full = w_shape;
        full[1] = cols * g;
        Value r = conv_weight_grad_xla(ib, s[0], s[1], p1, full, out_dtype);
        r = ib.reshape(r, {g, rows / g, g, cols, taps});
        TensorType grid(ElementType::kS64, r.shape());
        Value diag = ib.compare(ib.iota(grid, 0), ib.iota(grid, 2), shlo::CompareDirection::kEQ);
        Value zero = ib.constant(0, TensorType(r.dtype(), {}));
        r = ib.select(diag, r, ib.broadcast_to(zero, r.shape()));
        return ib.reshape(ib.reduce_simple(r, zero, {2}, "stablehlo.add"), w_shape);
      });
}

// Adds a leading batch dim to unbatched inputs (weight rank == input rank + 1).
Value batched(FunctionBuilder& b, Value x, const Value& w) {
  if (x.rank() == w.rank()) return x;
  std::vector<int64_t> shape{1};
  shape.insert(shape.end(), x.shape().begin(), x.shape().end());
  return b.reshape(x, shape);
}

std::vector<int64_t> batched_shape(std::vector<int64_t> shape, const Value& w) {
  if (static_cast<int64_t>(shape.size()) != w.rank()) shape.insert(shape.begin(), 1);
  return shape;
}

// The channel checks of the CPU's check_shape_forward (aten::convolution reaches the lowering
// without at::_convolution's checks, and a mismatch failed in XLA's compiler instead).
void check_channels(const Value& x, const Value& w, int64_t groups, bool transposed) {
  const int64_t cin = x.shape()[1];
  if (transposed) {
    TORCH_CHECK(cin == w.shape()[0], "Given transposed=1, weight of size ",
                c10::IntArrayRef(w.shape()), ", expected input", c10::IntArrayRef(x.shape()),
                " to have ", w.shape()[0], " channels, but got ", cin, " channels instead");
    return;
  }
  TORCH_CHECK(w.shape()[0] % groups == 0, "Given groups=", groups,
              ", expected weight to be divisible by ", groups,
              " at dimension 0, but got weight of size [", c10::IntArrayRef(w.shape()),
              "] instead");
  TORCH_CHECK(cin == w.shape()[1] * groups, "Given groups=", groups, ", weight of size ",
              c10::IntArrayRef(w.shape()), ", expected input", c10::IntArrayRef(x.shape()),
              " to have ", w.shape()[1] * groups, " channels, but got ", cin, " channels instead");
}

std::vector<Value> lower_convolution(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value w = ctx.tensor(1);
  Value x = batched(b, ctx.tensor(0), w);
  TORCH_CHECK(w.rank() >= 3, "torchtpu lowering: convolution: weight must have 3 to 5 dims");
  size_t nd = static_cast<size_t>(w.rank() - 2);
  Params p = read_params(ctx, nd);
  bool transposed = ctx.bool_arg(ctx.index_of("transposed"));
  check_channels(x, w, p.groups, transposed);
  std::vector<int64_t> out_shape = batched_shape(out.shape, w);
  Value w_c = b.convert(w, x.dtype());
  Value y;
  if (out.numel() == 0) {
    y = b.broadcast_to(b.constant(0, TensorType(out.dtype, {})), out_shape);
  } else if (transposed) {
    y = conv_transposed(b, x, w_c, p, out_shape, out.dtype);
  } else {
    y = conv_forward(b, x, w_c, p, out_shape, out.dtype);
  }
  // The bias joins the f32 accumulator of half types, so the result rounds once.
  size_t bi = ctx.index_of("bias");
  if (!ctx.is_none(bi)) {
    Value bias = b.convert(ctx.tensor(bi), y.dtype());
    y = b.add(y, b.broadcast_in_dim(bias, out_shape, {1}));
  }
  return {coerce(b, b.reshape(y, out.shape), out)};
}

// convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
//                      transposed, output_padding, groups, output_mask)
std::vector<Value> lower_convolution_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value w = ctx.tensor(2);
  Value dy = batched(b, ctx.tensor(0), w);
  Value x = batched(b, ctx.tensor(1), w);
  size_t nd = static_cast<size_t>(w.rank() - 2);
  Params p = read_params(ctx, nd);
  bool transposed = ctx.bool_arg(ctx.index_of("transposed"));
  c10::List<bool> mask = ctx.arg(ctx.index_of("output_mask")).ivalue.toBoolList();
  bool empty = dy.type.numel() == 0 || x.type.numel() == 0;
  ElementType dt = x.dtype();
  dy = b.convert(dy, dt);
  Value wc = b.convert(w, dt);
  std::vector<std::optional<Value>> r(3);
  if (mask.get(0)) {
    r[0] = empty        ? zeros(b, x.type)
           : transposed ? conv_forward(b, dy, wc, p, x.shape(), dt)
                        : conv_transposed(b, dy, wc, p, x.shape(), dt);
  }
  // grad_weight: for a transposed convolution the roles of input and grad_output swap.
  if (mask.get(1)) {
    r[1] = empty        ? zeros(b, w.type.with_dtype(dt))
           : transposed ? conv_weight_grad(b, dy, x, p, w.shape(), dt)
                        : conv_weight_grad(b, x, dy, p, w.shape(), dt);
  }
  // grad_bias: sum over everything but the channel dim.
  if (mask.get(2)) {
    std::vector<int64_t> dims{0};
    for (int64_t d = 2; d < dy.rank(); ++d) dims.push_back(d);
    ElementType acc = opmath_type(dt);
    r[2] = b.reduce_simple(b.convert(dy, acc), b.constant(0, TensorType(acc, {})), dims,
                           "stablehlo.add");
  }
  return masked_results(ctx, r);
}

TORCHTPU_LOWERING("aten::convolution", lower_convolution);
// PyTorch's convolution entry for out-of-tree devices: aten::_convolution called directly (not
// through aten::convolution, which tpu lowers itself) runs the CPU's argument checks and then
// dispatches here; without an entry it raised "convolution_overrideable not implemented".
TORCHTPU_LOWERING("aten::convolution_overrideable", lower_convolution);
TORCHTPU_LOWERING("aten::convolution_backward", lower_convolution_backward);

}  // namespace
}  // namespace torchtpu::lowering
