#include "lowering/strided.h"

#include <algorithm>
#include <numeric>

#include "lowering/common.h"
#include "stablehlo/ops.h"
#include "util/strides.h"

namespace torchtpu::lowering {
namespace {

using shlo::ElementType;
using shlo::FunctionBuilder;
using shlo::TensorType;
using shlo::Value;
using util::is_contiguous;

ElementType index_type_for(int64_t n) {
  return n < (int64_t{1} << 31) ? ElementType::kS32 : ElementType::kS64;
}

// The view's offset as a 0-d value of type `t`.
Value offset_as(FunctionBuilder& b, const StridedView& view, ElementType t) {
  if (view.offset_value) return b.convert(*view.offset_value, t);
  return b.constant_int(view.offset, TensorType(t, {}));
}

// flat[offset, offset + size). A runtime offset takes a dynamic slice: the view lies inside
// the storage (callers pad `flat` where a span reaches past it), so XLA's clamping of the
// start never moves it.
Value slice_at(FunctionBuilder& b, Value flat, const StridedView& view, int64_t size) {
  if (!view.offset_value) return b.slice(flat, {view.offset}, {view.offset + size}, {1});
  Value start = offset_as(b, view, index_type_for(flat.shape()[0]));
  return shlo::dynamic_slice(b, flat, {start}, {size});
}

// `flat` with flat[offset, offset + numel(update)) replaced by the 1-D `update`.
Value update_at(FunctionBuilder& b, Value flat, const StridedView& view, Value update) {
  const int64_t n = flat.shape()[0];
  const int64_t count = update.shape()[0];
  if (view.offset_value) {
    return b.dynamic_update_slice(flat, update, {offset_as(b, view, index_type_for(n))});
  }
  std::vector<Value> parts;
  if (view.offset > 0) parts.push_back(b.slice(flat, {0}, {view.offset}, {1}));
  parts.push_back(update);
  if (view.offset + count < n) parts.push_back(b.slice(flat, {view.offset + count}, {n}, {1}));
  return b.concatenate(parts, 0);
}

// Flat element index of every view position: offset + sum_i iota_i * stride_i, shape [n, 1].
Value flat_indices(FunctionBuilder& b, const StridedView& view, ElementType index_type) {
  TensorType t(index_type, view.sizes);
  Value acc = view.offset_value ? b.broadcast_in_dim(offset_as(b, view, index_type), view.sizes, {})
                                : b.constant_int(view.offset, t);
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    if (view.sizes[d] == 1 || view.strides[d] == 0) continue;
    Value i = b.iota(t, static_cast<int64_t>(d));
    acc = b.add(acc, b.mul(i, b.constant_int(view.strides[d], t)));
  }
  return b.reshape(acc, {numel_of(view.sizes), 1});
}

// A view whose strides nest (each a multiple of the next, no overlap) is a box at the origin
// of its span [offset, offset + span) reshaped to [size0, s0/s1, s1/s2, ..., s_last]: reads and
// writes become slices and reshapes, which XLA turns into cheap copies.
struct Nested {
  std::vector<int64_t> dims;   // view dims that move through memory, outermost first
  int64_t span = 0;            // the box's span in elements
  int64_t extent = 0;          // elements from the view's first to past its last
  std::vector<int64_t> shape;  // the span reshaped
  std::vector<int64_t> box;    // the view's extent in `shape`, from the origin
};

bool nested_layout(const StridedView& view, Nested* out) {
  std::vector<int64_t>& dims = out->dims;
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    if (view.sizes[d] != 1 && view.strides[d] != 0) dims.push_back(static_cast<int64_t>(d));
  }
  std::sort(dims.begin(), dims.end(),
            [&](int64_t x, int64_t y) { return view.strides[x] > view.strides[y]; });
  for (size_t k = 0; k + 1 < dims.size(); ++k) {
    int64_t s = view.strides[dims[k]], inner = view.strides[dims[k + 1]];
    if (s % inner != 0 || s < inner * view.sizes[dims[k + 1]]) return false;
  }
  if (dims.empty()) return true;
  out->span = view.sizes[dims[0]] * view.strides[dims[0]];
  out->extent = 1;
  for (int64_t d : dims) out->extent += (view.sizes[d] - 1) * view.strides[d];
  out->shape = {view.sizes[dims[0]]};
  for (size_t k = 1; k < dims.size(); ++k) {
    out->shape.push_back(view.strides[dims[k - 1]] / view.strides[dims[k]]);
  }
  out->shape.push_back(view.strides[dims.back()]);
  for (int64_t d : dims) out->box.push_back(view.sizes[d]);
  out->box.push_back(1);
  return true;
}

// `flat` padded so that the span at the view's offset never reaches past its end.
Value pad_for_span(FunctionBuilder& b, Value flat, const StridedView& view, const Nested& l) {
  const int64_t n = flat.shape()[0];
  // A runtime offset is at most n - extent (the view lies inside the storage).
  int64_t missing = view.offset_value ? l.span - l.extent : view.offset + l.span - n;
  if (missing <= 0) return flat;
  Value zero = b.constant(0, TensorType(flat.dtype(), {}));
  return b.pad(flat, zero, {0}, {missing}, {0});
}

bool try_structured_read(FunctionBuilder& b, Value flat, const StridedView& view, Value* out) {
  Nested l;
  if (!nested_layout(view, &l)) return false;
  const std::vector<int64_t>& dims = l.dims;
  Value moved;
  if (dims.empty()) {
    moved = b.reshape(slice_at(b, flat, view, 1), {});
  } else {
    Value piece = b.reshape(slice_at(b, pad_for_span(b, flat, view, l), view, l.span), l.shape);
    piece = b.slice(piece, std::vector<int64_t>(l.shape.size(), 0), l.box,
                    std::vector<int64_t>(l.shape.size(), 1));
    std::vector<int64_t> limit(l.box.begin(), l.box.end() - 1);
    piece = b.reshape(piece, limit);
    // Back to the view's dim order, then broadcast size-1 and stride-0 dims.
    std::vector<int64_t> order(dims.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return dims[x] < dims[y]; });
    moved = b.transpose(piece, order);
  }
  std::vector<int64_t> sorted_dims = dims;
  std::sort(sorted_dims.begin(), sorted_dims.end());
  *out = moved.shape() == view.sizes ? moved : b.broadcast_in_dim(moved, view.sizes, sorted_dims);
  return true;
}

// The write counterpart: the span is sliced out, the box at its origin replaced, and the span
// put back, so a strided write (a KV-cache column, a slice_scatter) needs no scatter.
bool try_structured_write(FunctionBuilder& b, Value flat, const StridedView& view, Value update,
                          Value* out) {
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    if (view.sizes[d] > 1 && view.strides[d] == 0) return false;  // overlapping: scatter's order
  }
  Nested l;
  if (!nested_layout(view, &l) || l.dims.empty()) return false;
  const std::vector<int64_t>& dims = l.dims;
  std::vector<int64_t> sorted_dims = dims;
  std::sort(sorted_dims.begin(), sorted_dims.end());
  std::vector<int64_t> moving_sizes;
  for (int64_t d : sorted_dims) moving_sizes.push_back(view.sizes[d]);
  // From the view's dim order to the box's (outermost stride first).
  std::vector<int64_t> perm;
  for (int64_t d : dims) {
    perm.push_back(std::find(sorted_dims.begin(), sorted_dims.end(), d) - sorted_dims.begin());
  }
  Value box = b.reshape(b.transpose(b.reshape(update, moving_sizes), perm), l.box);
  const int64_t n = flat.shape()[0];
  Value padded = pad_for_span(b, flat, view, l);
  Value piece = b.reshape(slice_at(b, padded, view, l.span), l.shape);
  ElementType it = index_type_for(l.span);
  std::vector<Value> origin(l.shape.size(), b.constant_int(0, TensorType(it, {})));
  piece = b.reshape(b.dynamic_update_slice(piece, box, origin), {l.span});
  Value result = update_at(b, padded, view, piece);
  *out = result.shape()[0] == n ? result : b.slice(result, {0}, {n}, {1});
  return true;
}

}  // namespace

int64_t numel_of(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool covers_buffer(const StridedView& view, const std::vector<int64_t>& buffer_dims) {
  return !view.offset_value && view.offset == 0 && numel_of(view.sizes) == numel_of(buffer_dims) &&
         is_contiguous(view.sizes, view.strides);
}

Value reinterpret(FunctionBuilder& b, Value base, ElementType want) {
  if (base.dtype() == want) return base;
  // XLA bitcasts no complex type: a complex element's bytes are its (real, imag) components.
  if (shlo::is_complex(base.dtype())) {
    ElementType c = shlo::complex_component(base.dtype());
    TensorType ct = base.type.with_dtype(c);
    std::vector<int64_t> pair_shape = base.shape();
    pair_shape.push_back(1);
    Value re = b.reshape(shlo::real(b, base), pair_shape);
    Value im = b.reshape(shlo::imag(b, base), pair_shape);
    Value pairs = b.concatenate({re, im}, static_cast<int64_t>(pair_shape.size()) - 1);
    return reinterpret(b, b.reshape(pairs, {numel_of(pairs.shape())}), want);
  }
  if (shlo::is_complex(want)) {
    ElementType c = shlo::complex_component(want);
    Value parts = reinterpret(b, base, c);
    int64_t n = numel_of(parts.shape()) / 2;
    Value pairs = b.reshape(parts, {n, 2});
    Value re = b.reshape(b.slice(pairs, {0, 0}, {n, 1}, {1, 1}), {n});
    Value im = b.reshape(b.slice(pairs, {0, 1}, {n, 2}, {1, 1}), {n});
    return shlo::complex(b, re, im);
  }
  const int have_bits = shlo::bit_width(base.dtype()) == 1 ? 8 : shlo::bit_width(base.dtype());
  const int want_bits = shlo::bit_width(want) == 1 ? 8 : shlo::bit_width(want);
  const int64_t n = numel_of(base.shape());
  Value flat = b.reshape(base, {n});
  if (base.dtype() == ElementType::kPred) flat = b.convert(flat, ElementType::kU8);
  ElementType target = want == ElementType::kPred ? ElementType::kU8 : want;
  Value out;
  if (have_bits == want_bits) {
    out = b.bitcast_convert(flat, target);
  } else if (have_bits < want_bits) {
    // Several small elements form one large one: [n] -> [n/r, r] -> [n/r].
    int64_t r = want_bits / have_bits;
    Value grouped = b.reshape(flat, {n / r, r});
    out = shlo::bitcast_convert(b, grouped, TensorType(target, {n / r}));
  } else {
    int64_t r = have_bits / want_bits;
    Value split = shlo::bitcast_convert(b, flat, TensorType(target, {n, r}));
    out = b.reshape(split, {n * r});
  }
  return want == ElementType::kPred ? b.convert(out, ElementType::kPred) : out;
}

Value read_view(FunctionBuilder& b, Value base, const StridedView& view) {
  if (covers_buffer(view, base.shape())) return b.reshape(base, view.sizes);
  const int64_t n = numel_of(base.shape());
  const int64_t count = numel_of(view.sizes);
  Value flat = b.reshape(base, {n});
  if (count == 0) return b.constant(0, TensorType(base.dtype(), view.sizes));
  if (is_contiguous(view.sizes, view.strides)) {
    return b.reshape(slice_at(b, flat, view, count), view.sizes);
  }
  Value out;
  if (try_structured_read(b, flat, view, &out)) return out;
  ElementType it = index_type_for(n);
  Value idx = flat_indices(b, view, it);
  Value gathered = b.gather(flat, idx, {{}, {0}, {0}, 1}, {1}, TensorType(base.dtype(), {count}));
  return b.reshape(gathered, view.sizes);
}

Value write_view(FunctionBuilder& b, Value base, const StridedView& view, Value update) {
  if (covers_buffer(view, base.shape())) return b.reshape(update, base.shape());
  const int64_t n = numel_of(base.shape());
  const int64_t count = numel_of(view.sizes);
  if (count == 0) return base;
  Value flat = b.reshape(base, {n});
  Value upd = b.reshape(update, {count});
  Value result;
  if (is_contiguous(view.sizes, view.strides)) {
    result = update_at(b, flat, view, upd);
  } else if (!try_structured_write(b, flat, view, update, &result)) {
    ElementType it = index_type_for(n);
    Value idx = flat_indices(b, view, it);
    result = b.scatter(flat, idx, upd, {{}, {0}, {0}, 1}, replace_region);
  }
  return b.reshape(result, base.shape());
}

bool covers_storage(const std::vector<int64_t>& dims, ElementType dtype, const StridedView& view,
                    ElementType update_dtype) {
  auto bytes = [](ElementType t) { return std::max(1, shlo::bit_width(t) / 8); };
  int64_t storage_bytes = numel_of(dims) * bytes(dtype);
  int64_t view_bytes = numel_of(view.sizes) * bytes(update_dtype);
  return !view.offset_value && view.offset == 0 && is_contiguous(view.sizes, view.strides) &&
         view_bytes == storage_bytes;
}

Value write_storage(FunctionBuilder& b, std::optional<Value> base, const std::vector<int64_t>& dims,
                    ElementType dtype, const StridedView& view, Value update) {
  if (covers_storage(dims, dtype, view, update.dtype())) return update;
  Value current = base ? *base : b.constant(0, TensorType(dtype, dims));
  return write_view(b, reinterpret(b, current, update.dtype()), view, update);
}

GenericSpace::GenericSpace(FunctionBuilder& b, Value geometry, int64_t rank, int64_t count,
                           ElementType index_type)
    : b_(b), geometry_(geometry), rank_(rank), count_(count), index_type_(index_type) {}

Value GenericSpace::entry(int64_t i) {
  Value v = b_.reshape(b_.slice(geometry_, {i}, {i + 1}, {1}), {});
  return b_.broadcast_in_dim(b_.convert(v, index_type_), {count_}, {});
}

const std::vector<Value>& GenericSpace::coords() {
  if (coords_.empty()) {
    Value j = b_.iota(TensorType(index_type_, {count_}), 0);
    for (int64_t d = 0; d < rank_; ++d) {
      Value c = b_.div(j, entry(1 + d));
      coords_.push_back(b_.binary("stablehlo.remainder", c, entry(1 + rank_ + d)));
    }
  }
  return coords_;
}

Value GenericSpace::flat_indices(int64_t at) {
  Value idx = entry(at);
  for (int64_t d = 0; d < rank_; ++d) idx = b_.add(idx, b_.mul(coords()[d], entry(at + 1 + d)));
  return b_.reshape(idx, {count_, 1});
}

Value GenericSpace::read(Value flat, int64_t at) {
  return b_.gather(flat, flat_indices(at), {{}, {0}, {0}, 1}, {1},
                   TensorType(flat.dtype(), {count_}));
}

Value GenericSpace::write(Value flat, int64_t at, Value update) {
  // Padding positions wrap onto real elements: they scatter past the end, which XLA skips.
  Value j = b_.reshape(b_.iota(TensorType(index_type_, {count_}), 0), {count_, 1});
  Value n = b_.reshape(entry(0), {count_, 1});
  Value past = b_.constant_int(flat.shape()[0], TensorType(index_type_, {count_, 1}));
  Value idx = b_.select(b_.compare(j, n, shlo::CompareDirection::kLT), flat_indices(at), past);
  return b_.scatter(flat, idx, update, {{}, {0}, {0}, 1}, replace_region);
}

}  // namespace torchtpu::lowering
