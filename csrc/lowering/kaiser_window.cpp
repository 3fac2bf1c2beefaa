// kaiser_window.beta_out (window_length, periodic, beta, *, out) and, in compiled graphs, the
// functional kaiser_window.beta: w[n] = I0(beta * sqrt(|1 - ((n - a) / a)^2|)) / I0(beta) with
// a = (L - 1) / 2 and L = window_length (+1 when periodic, the extra point then dropped),
// computed as the CPU kernel computes it: n from an arange in the window's dtype, the rest in
// its opmath type, I0 by the same Cephes series as torch.i0 (the aten::i0 lowering). The
// window's length, periodicity and beta are structural; the eager factory is
// aten/kaiser_window.cpp.
#include <ATen/core/dispatch/Dispatcher.h>

#include "lowering/common.h"

namespace torchtpu::lowering {
namespace {

// I0 through the aten::i0 lowering itself, so both follow Cephes the same way.
Value i0_of(LoweringContext& ctx, FunctionBuilder& b, Value x) {
  static const c10::FunctionSchema& schema =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::i0", "").schema();
  const LoweringFn* fn = find_lowering("aten::i0");
  TORCH_CHECK(fn != nullptr, "torchtpu: kaiser_window needs the aten::i0 lowering");
  LArg arg;
  arg.kind = LArg::Kind::kTensor;
  arg.value = x;
  LoweringContext inner(b, schema, {arg}, {x.type}, ctx.platform());
  return (*fn)(inner).at(0);
}

std::vector<Value> lower_kaiser_window(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  int64_t n = ctx.int_arg(ctx.index_of("window_length"));
  bool periodic = ctx.bool_arg(ctx.index_of("periodic"));
  double beta = ctx.double_arg(ctx.index_of("beta"));
  TORCH_CHECK(is_float(out.dtype), "torchtpu: kaiser_window needs a floating point result");
  if (n <= 1) return {b.constant(1.0, out)};  // n == 0: an empty tensor
  int64_t length = periodic ? n + 1 : n;
  ElementType ct = opmath_type(out.dtype);
  TensorType t(ct, out.shape);
  // The CPU's arange runs in the window's dtype (bfloat16 rounds 257 to 256), then widens.
  Value pos = b.convert(b.iota(out, 0), ct);
  Value alpha = b.constant(static_cast<double>(length - 1) / 2.0, t);
  Value one = b.constant(1.0, t);
  Value r = b.div(b.sub(pos, alpha), alpha);
  Value arg = b.mul(b.constant(beta, t),
                    b.unary("stablehlo.sqrt", b.unary("stablehlo.abs", b.sub(one, b.mul(r, r)))));
  TensorType scalar(ct, {});
  Value den = b.broadcast_to(i0_of(ctx, b, b.constant(beta, scalar)), out.shape);
  return {b.convert(b.div(i0_of(ctx, b, arg), den), out.dtype)};
}

}  // namespace

TORCHTPU_LOWERING("aten::kaiser_window.beta_out", lower_kaiser_window);
TORCHTPU_GRAPH_LOWERING("aten::kaiser_window.beta", lower_kaiser_window);

}  // namespace torchtpu::lowering
