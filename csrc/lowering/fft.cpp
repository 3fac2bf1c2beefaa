// Complex-number ops and the FFT family (aten::_fft_c2c/_fft_r2c/_fft_c2r, which every
// torch.fft function decomposes into) on stablehlo.fft. Each transformed dim is moved last and
// transformed in 1-D (the transform is separable), so any dims list works. Inverse complex
// transforms are unnormalized like pocketfft: conj(FFT(conj(x))) for c2c, and XLA's IRFFT
// (which divides by n) scaled back by n for c2r; then ATen's normalization (0 none,
// 1 by 1/sqrt(n), 2 by 1/n) is applied once.
#include <cmath>

#include "lowering/elementwise_util.h"
#include "lowering/lowering.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {
namespace {

Value fft_1d(FunctionBuilder& b, Value x, int64_t dim, shlo::FftType kind, int64_t length) {
  const int64_t rank = x.rank();
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < rank; ++i) {
    if (i != dim) perm.push_back(i);
  }
  perm.push_back(dim);
  std::vector<int64_t> inv(rank);
  for (int64_t i = 0; i < rank; ++i) inv[perm[i]] = i;
  Value t = b.transpose(x, perm);
  return b.transpose(shlo::fft(b, t, kind, length), inv);
}

using ew::conj;

Value c2c(FunctionBuilder& b, Value x, const std::vector<int64_t>& dims, bool forward) {
  if (!forward) x = conj(b, x);
  for (int64_t d : dims) x = fft_1d(b, x, d, shlo::FftType::kFft, x.shape()[d]);
  return forward ? x : conj(b, x);
}

Value normalize(FunctionBuilder& b, Value x, int64_t mode, double n) {
  if (mode == 0) return x;
  double scale = mode == 1 ? 1.0 / std::sqrt(n) : 1.0 / n;
  if (!shlo::is_complex(x.dtype())) return b.mul(x, b.constant(scale, x.type));
  // Each part scaled by a real number, as pocketfft does: a complex product with scale + 0j
  // would turn (NaN, 0) into (NaN, NaN) (NaN * 0 in the imaginary part).
  Value re = shlo::real(b, x), im = shlo::imag(b, x);
  Value c = b.constant(scale, re.type);
  return shlo::complex(b, b.mul(re, c), b.mul(im, c));
}

std::vector<int64_t> wrapped_dims(const LoweringContext& ctx, size_t i, int64_t rank) {
  std::vector<int64_t> dims = ctx.int_list(i);
  for (int64_t& d : dims) d = wrap_dim(d, rank);
  return dims;
}

std::vector<Value> lower_c2c(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value x = b.convert(ctx.tensor(0), out.dtype);
  std::vector<int64_t> dims = wrapped_dims(ctx, 1, x.rank());
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(x.shape()[d]);
  Value r = c2c(b, x, dims, ctx.bool_arg(3));
  return {coerce(b, normalize(b, r, ctx.int_arg(2), n), out)};
}

// Along `dim`, index i -> (n - i) mod n: element 0 stays, the rest reverse.
Value negate_index(FunctionBuilder& b, Value x, int64_t dim) {
  int64_t n = x.shape()[dim];
  if (n <= 1) return x;
  std::vector<int64_t> start(x.rank(), 0), limit = x.shape(), step(x.rank(), 1);
  limit[dim] = 1;
  Value head = b.slice(x, start, limit, step);
  start[dim] = 1;
  limit[dim] = n;
  Value rest = shlo::reverse(b, b.slice(x, start, limit, step), {dim});
  return b.concatenate({head, rest}, dim);
}

std::vector<Value> lower_r2c(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value x = b.convert(ctx.tensor(0), shlo::complex_component(out.dtype));
  std::vector<int64_t> dims = wrapped_dims(ctx, 1, x.rank());
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(x.shape()[d]);
  int64_t last = dims.back();
  const int64_t n_last = x.shape()[last];
  Value r = fft_1d(b, x, last, shlo::FftType::kRfft, n_last);
  std::vector<int64_t> rest(dims.begin(), dims.end() - 1);
  r = c2c(b, r, rest, true);
  if (!ctx.bool_arg(3)) {
    // The full spectrum as the CPU builds it (_fft_fill_with_conjugate_symmetry_): the one-sided
    // transform, then out[k] = conj(out[-k]) for the missing half. A complex transform of the
    // real input instead gave other parts NaN (an imaginary part the CPU leaves 0 came out NaN
    // beside a NaN input).
    int64_t half = r.shape()[last], missing = n_last - half;
    if (missing > 0) {
      std::vector<int64_t> start(r.rank(), 0), limit = r.shape(), step(r.rank(), 1);
      start[last] = 1;
      limit[last] = missing + 1;
      Value tail = shlo::reverse(b, b.slice(r, start, limit, step), {last});
      for (int64_t d : rest) tail = negate_index(b, tail, d);
      r = b.concatenate({r, conj(b, tail)}, last);
    }
  }
  return {coerce(b, normalize(b, r, ctx.int_arg(2), n), out)};
}

std::vector<Value> lower_c2r(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  Value x = b.convert(ctx.tensor(0), shlo::complex_of(out.dtype));
  std::vector<int64_t> dims = wrapped_dims(ctx, 1, x.rank());
  int64_t last = dims.back();
  int64_t last_size = ctx.int_arg(3);
  std::vector<int64_t> rest(dims.begin(), dims.end() - 1);
  double n = static_cast<double>(last_size);
  for (int64_t d : rest) n *= static_cast<double>(x.shape()[d]);
  x = c2c(b, x, rest, false);
  // IRFFT reads fft_length/2 + 1 inputs along the last dim: pad or trim to that.
  int64_t need = last_size / 2 + 1, have = x.shape()[last];
  if (have > need) {
    std::vector<int64_t> start(x.rank(), 0), limit = x.shape(), step(x.rank(), 1);
    limit[last] = need;
    x = b.slice(x, start, limit, step);
  } else if (have < need) {
    std::vector<int64_t> shape = x.shape();
    shape[last] = need - have;
    x = b.concatenate({x, b.constant(0, TensorType(x.dtype(), shape))}, last);
  }
  Value r = fft_1d(b, x, last, shlo::FftType::kIrfft, last_size);
  // XLA's IRFFT divides by the last dim's length; pocketfft's c2r does not.
  r = b.mul(r, b.constant(static_cast<double>(last_size), r.type));
  return {coerce(b, normalize(b, r, ctx.int_arg(2), n), out)};
}

std::vector<Value> lower_complex(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  TensorType part = out.with_dtype(shlo::complex_component(out.dtype));
  Value re = coerce(b, ctx.tensor(0), part), im = coerce(b, ctx.tensor(1), part);
  return {coerce(b, shlo::complex(b, re, im), out)};
}

std::vector<Value> lower_polar(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  const TensorType& out = ctx.out_type();
  TensorType part = out.with_dtype(shlo::complex_component(out.dtype));
  Value r = coerce(b, ctx.tensor(0), part), th = coerce(b, ctx.tensor(1), part);
  Value re = b.mul(r, b.unary("stablehlo.cosine", th));
  Value im = b.mul(r, b.unary("stablehlo.sine", th));
  return {coerce(b, shlo::complex(b, re, im), out)};
}

std::vector<Value> lower_conj_physical(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  if (!shlo::is_complex(x.dtype())) return {coerce(ctx.b, x, ctx.out_type())};
  return {coerce(ctx.b, conj(ctx.b, x), ctx.out_type())};
}

// view_as_real / view_as_complex inside compiled graphs, where views are values (eager mode
// keeps them as aliasing metadata): the parts stacked along a new last dim of size 2, and back.
std::vector<Value> lower_view_as_real(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value z = ctx.tensor(0);
  std::vector<int64_t> shape = z.shape();
  shape.push_back(1);
  Value re = b.reshape(ew::real_part(b, z), shape), im = b.reshape(ew::imag_part(b, z), shape);
  return {coerce(b, b.concatenate({re, im}, z.rank()), ctx.out_type())};
}

std::vector<Value> lower_view_as_complex(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = ctx.tensor(0);
  const int64_t last = x.rank() - 1;
  std::vector<int64_t> shape = x.shape();
  shape.pop_back();
  auto part = [&](int64_t i) {
    std::vector<int64_t> start(static_cast<size_t>(x.rank()), 0),
        limit = x.shape(), strides(static_cast<size_t>(x.rank()), 1);
    start[static_cast<size_t>(last)] = i;
    limit[static_cast<size_t>(last)] = i + 1;
    return b.reshape(b.slice(x, start, limit, strides), shape);
  };
  return {ew::make_complex(b, part(0), part(1), ctx.out_type().dtype)};
}

// The conjugate and negative views of a compiled graph (x.mH, x.conj()) are values there: the
// conjugate (identity on real data) and the negation.
std::vector<Value> lower_conj_view(LoweringContext& ctx) { return lower_conj_physical(ctx); }

std::vector<Value> lower_neg_view(LoweringContext& ctx) { return {ctx.b.neg(ctx.tensor(0))}; }

}  // namespace

TORCHTPU_LOWERING("aten::_conj", lower_conj_view, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::_neg_view", lower_neg_view, kGraphOnly | kComplex);
// AOTAutograd's decompositions of complex backward ops (tanh_backward, sigmoid_backward) emit
// _conj_physical; eager calls reach conj_physical's out= form instead.
TORCHTPU_LOWERING("aten::_conj_physical", lower_conj_physical, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::view_as_real", lower_view_as_real, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::view_as_complex", lower_view_as_complex, kGraphOnly | kComplex);
TORCHTPU_LOWERING("aten::_fft_c2c", lower_c2c, kComplex);
TORCHTPU_LOWERING("aten::_fft_r2c", lower_r2c, kComplex);
TORCHTPU_LOWERING("aten::_fft_c2r", lower_c2r, kComplex);
TORCHTPU_LOWERING("aten::complex", lower_complex, kComplex);
TORCHTPU_LOWERING("aten::polar", lower_polar, kComplex);
TORCHTPU_LOWERING("aten::conj_physical", lower_conj_physical, kComplex);

}  // namespace torchtpu::lowering
