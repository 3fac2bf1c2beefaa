// segment_reduce and _segment_reduce_backward (lengths or offsets; sum/mean/max/min/prod), as
// ATen's CPU kernels (SegmentReduce.cpp). The data is viewed as (outer, M, inner) around
// `axis`; segment s of row o covers [start[o, s], end[o, s]) along M. Each output starts from
// `initial` (or the identity: 0, 1, -inf, +inf) and folds in its segment; max/min propagate
// NaN; mean divides by the length when it is positive, and an empty segment without `initial`
// is NaN. Backward: sum and mean spread the gradient (mean / length); max/min give it to every
// element equal to the output (or NaN) and divide it by their count only where it is positive
// (as the CPU kernel does); prod gives grad * output / x, or grad * (initial * the product of
// the other elements) where x is 0 or NaN.
#include <c10/util/Exception.h>

#include <limits>
#include <string>

#include "lowering/common.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

struct Segments {
  int64_t outer = 1, m = 0, inner = 1, s = 0;
  Value lens;  // (outer, S) i64
  Value mask;  // (outer, S, M) i1
  Value seg;   // (outer, M) i64 segment id, -1 outside every segment
  std::vector<int64_t> out_shape;
};

Segments segments(LoweringContext& ctx, const std::vector<int64_t>& dshape, int64_t axis) {
  FunctionBuilder& b = ctx.b;
  Segments g;
  int64_t rank = static_cast<int64_t>(dshape.size());
  if (axis < 0) axis += rank;
  for (int64_t i = 0; i < axis; ++i) g.outer *= dshape[static_cast<size_t>(i)];
  g.m = dshape[static_cast<size_t>(axis)];
  for (int64_t i = axis + 1; i < rank; ++i) g.inner *= dshape[static_cast<size_t>(i)];
  size_t li = ctx.index_of("lengths"), oi = ctx.index_of("offsets");
  Value starts, ends;
  if (!ctx.is_none(li)) {
    Value lens = b.convert(ctx.tensor(li), ElementType::kS64);
    g.s = lens.shape().back();
    lens = b.reshape(lens, {g.outer, g.s});
    TensorType t3(ElementType::kS64, {g.outer, g.s, g.s});
    Value upto = b.compare(b.iota(t3, 2), b.iota(t3, 1), CompareDirection::kLE);
    Value l3 = b.broadcast_in_dim(lens, t3.shape, {0, 2});
    ends =
        b.reduce_simple(b.select(upto, l3, b.constant_int(0, t3)),
                        b.constant_int(0, TensorType(ElementType::kS64, {})), {2}, "stablehlo.add");
    starts = b.sub(ends, lens);
    g.lens = lens;
  } else {
    TORCH_CHECK(!ctx.is_none(oi), "segment_reduce: either lengths or offsets must be given");
    Value off = b.convert(ctx.tensor(oi), ElementType::kS64);
    g.s = off.shape().back() - 1;
    off = b.reshape(off, {g.outer, g.s + 1});
    starts = b.slice(off, {0, 0}, {g.outer, g.s}, {1, 1});
    ends = b.slice(off, {0, 1}, {g.outer, g.s + 1}, {1, 1});
    g.lens = b.sub(ends, starts);
  }
  TensorType mt(ElementType::kS64, {g.outer, g.s, g.m});
  Value pos = b.iota(mt, 2);
  Value st = b.broadcast_in_dim(starts, mt.shape, {0, 1});
  Value en = b.broadcast_in_dim(ends, mt.shape, {0, 1});
  g.mask = b.binary("stablehlo.and", b.compare(pos, st, CompareDirection::kGE),
                    b.compare(pos, en, CompareDirection::kLT));
  Value ids = b.select(g.mask, b.iota(mt, 1), b.constant_int(-1, mt));
  g.seg = b.reduce_simple(ids, b.constant_int(-1, TensorType(ElementType::kS64, {})), {1},
                          "stablehlo.maximum");
  g.out_shape.assign(dshape.begin(), dshape.begin() + axis);
  g.out_shape.push_back(g.s);
  g.out_shape.insert(g.out_shape.end(), dshape.begin() + axis + 1, dshape.end());
  return g;
}

double identity(const std::string& r) {
  if (r == "prod") return 1;
  if (r == "max") return -std::numeric_limits<double>::infinity();
  if (r == "min") return std::numeric_limits<double>::infinity();
  return 0;
}

const char* body_op(const std::string& r) {
  if (r == "prod") return "stablehlo.multiply";
  if (r == "max") return "stablehlo.maximum";
  if (r == "min") return "stablehlo.minimum";
  return "stablehlo.add";
}

Value fold(FunctionBuilder& b, const std::string& r, Value a, Value c) {
  return b.binary(body_op(r), a, c);
}

// (outer, S, inner) values at each element's segment: (outer, M, inner), 0 outside segments.
Value spread(FunctionBuilder& b, const Segments& g, Value t) {
  std::vector<int64_t> s4 = {g.outer, g.s, g.m, g.inner};
  Value t4 = b.broadcast_in_dim(t, s4, {0, 1, 3});
  Value m4 = b.broadcast_in_dim(g.mask, s4, {0, 1, 2});
  Value z = b.constant(0, t4.type);
  return b.reduce_simple(b.select(m4, t4, z), b.constant(0, TensorType(t.dtype(), {})), {1},
                         "stablehlo.add");
}

std::string reduce_arg(LoweringContext& ctx) {
  std::string r = ctx.arg(ctx.index_of("reduce")).ivalue.toStringRef();
  TORCH_CHECK(r == "sum" || r == "mean" || r == "max" || r == "min" || r == "prod",
              "segment_reduce: unsupported reduction ", r);
  return r;
}

// segment_reduce(data, reduce, *, lengths, indices, offsets, axis, unsafe, initial)
std::vector<Value> lower_segment_reduce(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = ctx.tensor(0);
  std::string r = reduce_arg(ctx);
  TORCH_CHECK(ctx.is_none(ctx.index_of("indices")),
              "segment_reduce: indices are not supported (as on CPU)");
  const TensorType& out = ctx.out_type();
  ElementType ct = opmath_type(x.dtype());
  Segments g = segments(ctx, x.shape(), ctx.int_arg(ctx.index_of("axis")));
  size_t ii = ctx.index_of("initial");
  bool has_init = !ctx.is_none(ii);
  TensorType st(ct, {});
  Value init = has_init ? b.convert(ctx.operand(ii, x.dtype()), ct) : b.constant(identity(r), st);
  std::vector<int64_t> s4 = {g.outer, g.s, g.m, g.inner};
  std::vector<int64_t> s3 = {g.outer, g.s, g.inner};
  if (out.numel() == 0) return {coerce(b, b.constant(0, st), out)};
  Value xd = b.convert(b.reshape(x, {g.outer, g.m, g.inner}), ct);
  Value x4 = b.broadcast_in_dim(xd, s4, {0, 2, 3});
  Value m4 = b.broadcast_in_dim(g.mask, s4, {0, 1, 2});
  Value id = b.constant(identity(r), st);
  Value red = b.reduce_simple(b.select(m4, x4, b.broadcast_to(id, s4)), id, {2}, body_op(r));
  Value acc = fold(b, r, b.broadcast_to(init, s3), red);
  if (r == "max" || r == "min") {
    // NaN propagates (the CPU kernel keeps a NaN element, and std::max/min keep a NaN
    // accumulator); XLA's maximum/minimum need not.
    Value nan4 = b.binary("stablehlo.and", m4, b.compare(x4, x4, CompareDirection::kNE));
    Value any_nan = b.reduce_simple(nan4, b.constant(0, TensorType(ElementType::kPred, {})), {2},
                                    "stablehlo.or");
    Value init3 = b.broadcast_to(init, s3);
    any_nan = b.binary("stablehlo.or", any_nan, b.compare(init3, init3, CompareDirection::kNE));
    acc = b.select(any_nan, b.constant(std::numeric_limits<double>::quiet_NaN(), acc.type), acc);
  }
  if (r == "mean") {
    Value len = b.broadcast_in_dim(g.lens, s3, {0, 1});
    Value pos = b.compare(len, b.constant_int(0, len.type), CompareDirection::kGT);
    Value empty = has_init ? acc : b.constant(std::numeric_limits<double>::quiet_NaN(), acc.type);
    acc = b.select(pos, b.div(acc, b.convert(len, ct)), empty);
  }
  return {coerce(b, b.reshape(acc, g.out_shape), out)};
}

// _segment_reduce_backward(grad, output, data, reduce, *, lengths, offsets, axis, initial)
std::vector<Value> lower_segment_reduce_backward(LoweringContext& ctx) {
  FunctionBuilder& b = ctx.b;
  Value x = ctx.tensor(2);
  std::string r = reduce_arg(ctx);
  const TensorType& out = ctx.out_type();
  ElementType ct = opmath_type(x.dtype());
  TensorType st(ct, {});
  if (out.numel() == 0) return {coerce(b, b.constant(0, st), out)};
  Segments g = segments(ctx, x.shape(), ctx.int_arg(ctx.index_of("axis")));
  std::vector<int64_t> s3 = {g.outer, g.s, g.inner};
  std::vector<int64_t> e3 = {g.outer, g.m, g.inner};
  Value grad = b.convert(b.reshape(ctx.tensor(0), s3), ct);
  Value outv = b.convert(b.reshape(ctx.tensor(1), s3), ct);
  Value xd = b.convert(b.reshape(x, e3), ct);
  Value in_seg = b.broadcast_in_dim(
      b.compare(g.seg, b.constant_int(0, g.seg.type), CompareDirection::kGE), e3, {0, 1});
  Value zero = b.constant(0, TensorType(ct, e3));
  Value res;
  if (r == "sum") {
    res = spread(b, g, grad);
  } else if (r == "mean") {
    Value len = b.convert(b.broadcast_in_dim(g.lens, s3, {0, 1}), ct);
    res = spread(b, g, b.div(grad, b.max(len, b.constant(1, len.type))));
  } else if (r == "max" || r == "min") {
    Value g_e = spread(b, g, grad), o_e = spread(b, g, outv);
    Value eq = b.binary("stablehlo.or", b.compare(xd, xd, CompareDirection::kNE),
                        b.compare(xd, o_e, CompareDirection::kEQ));
    eq = b.binary("stablehlo.and", eq, in_seg);
    Value val = b.select(eq, g_e, zero);
    // Count of such elements per segment, spread back.
    std::vector<int64_t> s4 = {g.outer, g.s, g.m, g.inner};
    Value eq4 = b.broadcast_in_dim(b.convert(eq, ct), s4, {0, 2, 3});
    Value m4 = b.broadcast_in_dim(g.mask, s4, {0, 1, 2});
    Value cnt = b.reduce_simple(b.select(m4, eq4, b.constant(0, eq4.type)), b.constant(0, st), {2},
                                "stablehlo.add");
    Value c_e = spread(b, g, cnt);
    Value divide =
        b.binary("stablehlo.and", b.compare(c_e, b.constant(2, c_e.type), CompareDirection::kGE),
                 b.compare(val, zero, CompareDirection::kGT));
    res = b.select(divide, b.div(val, c_e), val);
  } else {  // prod
    Value g_e = spread(b, g, grad), o_e = spread(b, g, outv);
    Value normal = b.div(b.mul(g_e, o_e), xd);
    size_t ii = ctx.index_of("initial");
    Value init = ctx.is_none(ii) ? b.constant(1, st) : b.convert(ctx.operand(ii, x.dtype()), ct);
    // Product of the other elements of the same segment: (outer, j, k, inner) over k != j.
    std::vector<int64_t> p4 = {g.outer, g.m, g.m, g.inner};
    TensorType it(ElementType::kS64, {g.outer, g.m, g.m});
    Value sj = b.broadcast_in_dim(g.seg, it.shape, {0, 1});
    Value sk = b.broadcast_in_dim(g.seg, it.shape, {0, 2});
    Value same = b.binary("stablehlo.and", b.compare(sj, sk, CompareDirection::kEQ),
                          b.compare(b.iota(it, 1), b.iota(it, 2), CompareDirection::kNE));
    Value same4 = b.broadcast_in_dim(same, p4, {0, 1, 2});
    Value xk = b.broadcast_in_dim(xd, p4, {0, 2, 3});
    Value excl = b.reduce_simple(b.select(same4, xk, b.constant(1, xk.type)), b.constant(1, st),
                                 {2}, "stablehlo.multiply");
    excl = b.mul(b.broadcast_to(init, e3), excl);
    Value special = b.binary("stablehlo.or", b.compare(xd, xd, CompareDirection::kNE),
                             b.compare(xd, zero, CompareDirection::kEQ));
    res = b.select(special, b.mul(g_e, excl), normal);
  }
  res = b.select(in_seg, res, zero);
  return {coerce(b, b.reshape(res, out.shape), out)};
}

TORCHTPU_LOWERING("aten::segment_reduce", lower_segment_reduce);
TORCHTPU_LOWERING("aten::_segment_reduce_backward", lower_segment_reduce_backward);

}  // namespace
}  // namespace torchtpu::lowering
