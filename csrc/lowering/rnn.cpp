// The fused LSTM/GRU cells nn.LSTM/nn.GRU use on accelerators (at::native's RNN.cpp calls them
// for privateuse1 like for cuda) and their backward ops, after PyTorch's CUDA kernels
// (aten/src/ATen/native/cuda/RNN.cu): gate math in float32 for half types, gates in the
// order (i, f, g, o) for LSTM and (r, z, n) for GRU, the workspace holding activated gates.
#include "lowering/common.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

// Columns [k*h, (k+1)*h) of a [batch, n*h] matrix.
Value chunk(FunctionBuilder& b, Value x, int64_t k, int64_t h) {
  return b.slice(x, {0, k * h}, {x.shape()[0], (k + 1) * h}, {1, 1});
}

Value sigmoid(FunctionBuilder& b, Value x) { return b.unary("stablehlo.logistic", x); }
Value tanh_(FunctionBuilder& b, Value x) { return b.unary("stablehlo.tanh", x); }
Value one_like(FunctionBuilder& b, Value x) { return full_like_type(b, 1.0, x.type); }
// (1 - s) * s: the derivative of a sigmoid output s.
Value dsig(FunctionBuilder& b, Value s) { return b.mul(b.sub(one_like(b, s), s), s); }
// 1 - t*t: the derivative of a tanh output t.
Value dtanh(FunctionBuilder& b, Value t) { return b.sub(one_like(b, t), b.mul(t, t)); }

// gates_in + gates_hidden (+ biases), in acc, as a [batch, n*h] matrix.
Value gate_sum(LoweringContext& ctx, Value ig, Value hg, ElementType acc) {
  auto& b = ctx.b;
  Value s = b.add(b.convert(ig, acc), b.convert(hg, acc));
  for (size_t i : {size_t(3), size_t(4)}) {
    if (ctx.is_none(i)) continue;
    s = b.add(s, b.broadcast_to(b.convert(ctx.tensor(i), acc), s.shape()));
  }
  return s;
}

void check_2d(const Value& v, const char* op, const char* what) {
  TORCH_CHECK(v.rank() == 2, "torchtpu: ", op, ": ", what, " must be 2-D");
}

// (input_gates, hidden_gates, cx, input_bias?, hidden_bias?) -> (hy, cy, workspace)
std::vector<Value> lower_lstm_cell(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value ig = ctx.tensor(0), hg = ctx.tensor(1), cx = ctx.tensor(2);
  check_2d(ig, "_thnn_fused_lstm_cell", "input_gates");
  const int64_t h = cx.shape().back();
  ElementType acc = f32_or_f64(ig.dtype());
  Value g = gate_sum(ctx, ig, hg, acc);
  Value i = sigmoid(b, chunk(b, g, 0, h));
  Value f = sigmoid(b, chunk(b, g, 1, h));
  Value c = tanh_(b, chunk(b, g, 2, h));
  Value o = sigmoid(b, chunk(b, g, 3, h));
  Value cy = b.add(b.mul(f, b.convert(cx, acc)), b.mul(i, c));
  Value hy = b.mul(o, tanh_(b, cy));
  Value ws = b.concatenate({i, f, c, o}, 1);
  return {coerce(b, hy, ctx.out_type(0)), coerce(b, cy, ctx.out_type(1)),
          coerce(b, ws, ctx.out_type(2))};
}

// (grad_hy?, grad_cy?, cx, cy, workspace, bool has_bias) -> (grad_gates, grad_cx, grad_bias)
std::vector<Value> lower_lstm_cell_backward(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value cx = ctx.tensor(2), cy = ctx.tensor(3), ws = ctx.tensor(4);
  bool has_bias = ctx.bool_arg(5);
  TORCH_CHECK_NOT_IMPLEMENTED(ctx.out_types().size() == 3,
                              "_thnn_fused_lstm_cell_backward_impl without gradients");
  const int64_t h = cx.shape().back();
  ElementType acc = f32_or_f64(ws.dtype());
  Value w = b.convert(ws, acc);
  Value i = chunk(b, w, 0, h), f = chunk(b, w, 1, h), c = chunk(b, w, 2, h), o = chunk(b, w, 3, h);
  Value cxa = b.convert(cx, acc);
  Value zero = full_like_type(b, 0.0, cxa.type);
  Value ghy = ctx.is_none(0) ? zero : b.convert(ctx.tensor(0), acc);
  Value gcy = ctx.is_none(1) ? zero : b.convert(ctx.tensor(1), acc);
  Value tcy = tanh_(b, b.convert(cy, acc));
  Value gog = b.mul(ghy, tcy);
  Value gcx = b.add(b.mul(b.mul(ghy, o), dtanh(b, tcy)), gcy);
  Value gig = b.mul(b.mul(gcx, c), dsig(b, i));
  Value gfg = b.mul(b.mul(gcx, cxa), dsig(b, f));
  Value gcg = b.mul(b.mul(gcx, i), dtanh(b, c));
  gog = b.mul(gog, dsig(b, o));
  Value gates = b.concatenate({gig, gfg, gcg, gog}, 1);
  std::vector<Value> out = {coerce(b, gates, ctx.out_type(0)),
                            coerce(b, b.mul(gcx, f), ctx.out_type(1))};
  TORCH_CHECK_NOT_IMPLEMENTED(has_bias, "_thnn_fused_lstm_cell_backward_impl without bias");
  out.push_back(
      coerce(b, b.reduce_simple(gates, b.constant(0, TensorType(acc, {})), {0}, "stablehlo.add"),
             ctx.out_type(2)));
  return out;
}

// (input_gates, hidden_gates, hx, input_bias?, hidden_bias?) -> (hy, workspace)
std::vector<Value> lower_gru_cell(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value ig = ctx.tensor(0), hg = ctx.tensor(1), hx = ctx.tensor(2);
  check_2d(ig, "_thnn_fused_gru_cell", "input_gates");
  const int64_t h = hx.shape().back();
  ElementType acc = f32_or_f64(ig.dtype());
  Value iga = b.convert(ig, acc), hga = b.convert(hg, acc);
  auto bias = [&](size_t idx, int64_t k) -> std::optional<Value> {
    if (ctx.is_none(idx)) return std::nullopt;
    Value v = b.convert(ctx.tensor(idx), acc);
    v = b.slice(v, {k * h}, {(k + 1) * h}, {1});
    return b.broadcast_in_dim(v, {iga.shape()[0], h}, {1});
  };
  auto with = [&](Value x, std::optional<Value> bv) { return bv ? b.add(x, *bv) : x; };
  Value r = sigmoid(
      b, with(with(b.add(chunk(b, iga, 0, h), chunk(b, hga, 0, h)), bias(3, 0)), bias(4, 0)));
  Value z = sigmoid(
      b, with(with(b.add(chunk(b, iga, 1, h), chunk(b, hga, 1, h)), bias(3, 1)), bias(4, 1)));
  Value hn = with(chunk(b, hga, 2, h), bias(4, 2));
  Value n = tanh_(b, b.add(with(chunk(b, iga, 2, h), bias(3, 2)), b.mul(r, hn)));
  Value hxa = b.convert(hx, acc);
  Value hy = b.add(n, b.mul(z, b.sub(hxa, n)));
  Value ws = b.concatenate({r, z, n, hn, hxa}, 1);
  return {coerce(b, hy, ctx.out_type(0)), coerce(b, ws, ctx.out_type(1))};
}

// (grad_hy, workspace, bool has_bias) -> (grad_input_gates, grad_hidden_gates, grad_hx,
//                                         grad_input_bias, grad_hidden_bias)
std::vector<Value> lower_gru_cell_backward(LoweringContext& ctx) {
  auto& b = ctx.b;
  Value ghy = ctx.tensor(0), ws = ctx.tensor(1);
  bool has_bias = ctx.bool_arg(2);
  const int64_t h = ghy.shape().back();
  ElementType acc = f32_or_f64(ws.dtype());
  Value w = b.convert(ws, acc);
  Value r = chunk(b, w, 0, h), z = chunk(b, w, 1, h), n = chunk(b, w, 2, h), hn = chunk(b, w, 3, h),
        hx = chunk(b, w, 4, h);
  Value go = b.convert(ghy, acc);
  Value gz = b.mul(b.mul(go, b.sub(hx, n)), dsig(b, z));
  Value ghx = b.mul(go, z);
  Value gn = b.mul(b.mul(go, b.sub(one_like(b, z), z)), dtanh(b, n));
  Value ghn = b.mul(gn, r);
  Value gr = b.mul(b.mul(gn, hn), dsig(b, r));
  Value gi = b.concatenate({gr, gz, gn}, 1);
  Value gh = b.concatenate({gr, gz, ghn}, 1);
  std::vector<Value> out = {coerce(b, gi, ctx.out_type(0)), coerce(b, gh, ctx.out_type(1)),
                            coerce(b, ghx, ctx.out_type(2))};
  Value zero = b.constant(0, TensorType(acc, {}));
  for (size_t k = 0; k < 2; ++k) {
    const TensorType& t = ctx.out_type(3 + k);
    if (has_bias) {
      out.push_back(coerce(b, b.reduce_simple(k == 0 ? gi : gh, zero, {0}, "stablehlo.add"), t));
    } else {
      out.push_back(full_like_type(b, 0.0, t));  // the Meta kernel's empty placeholder
    }
  }
  return out;
}

TORCHTPU_LOWERING("aten::_thnn_fused_lstm_cell", lower_lstm_cell);
TORCHTPU_LOWERING("aten::_thnn_fused_lstm_cell_backward_impl", lower_lstm_cell_backward);
TORCHTPU_LOWERING("aten::_thnn_fused_gru_cell", lower_gru_cell);
TORCHTPU_LOWERING("aten::_thnn_fused_gru_cell_backward", lower_gru_cell_backward);

}  // namespace
}  // namespace torchtpu::lowering
