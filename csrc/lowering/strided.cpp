#include "lowering/strided.h"

#include <algorithm>
#include <numeric>

namespace torchtpu::lowering {
namespace {

using shlo::ElementType;
using shlo::FunctionBuilder;
using shlo::TensorType;
using shlo::Value;

// Flat element index of every view position: offset + sum_i iota_i * stride_i, shape [n, 1].
Value flat_indices(FunctionBuilder& b, const StridedView& view, ElementType index_type) {
  TensorType t(index_type, view.sizes);
  Value acc = b.constant_int(view.offset, t);
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    if (view.sizes[d] == 1 || view.strides[d] == 0) continue;
    Value i = b.iota(t, static_cast<int64_t>(d));
    acc = b.add(acc, b.mul(i, b.constant_int(view.strides[d], t)));
  }
  return b.reshape(acc, {numel_of(view.sizes), 1});
}

ElementType index_type_for(int64_t n) {
  return n < (int64_t{1} << 31) ? ElementType::kS32 : ElementType::kS64;
}

// Strided views whose strides nest (each a multiple of the next, no overlap) become
// pad + reshape + slice + transpose, which XLA turns into cheap copies.
bool try_structured_read(FunctionBuilder& b, Value flat, const StridedView& view, Value* out) {
  const int64_t n = flat.shape()[0];
  std::vector<int64_t> dims;  // view dims that move through memory
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    if (view.sizes[d] != 1 && view.strides[d] != 0) dims.push_back(static_cast<int64_t>(d));
  }
  std::sort(dims.begin(), dims.end(),
            [&](int64_t x, int64_t y) { return view.strides[x] > view.strides[y]; });
  for (size_t k = 0; k + 1 < dims.size(); ++k) {
    int64_t s = view.strides[dims[k]], inner = view.strides[dims[k + 1]];
    if (s % inner != 0 || s < inner * view.sizes[dims[k + 1]]) return false;
  }
  Value moved;
  if (dims.empty()) {
    moved = b.reshape(b.slice(flat, {view.offset}, {view.offset + 1}, {1}), {});
  } else {
    int64_t outer = view.strides[dims[0]];
    int64_t span = view.sizes[dims[0]] * outer;
    Value piece = flat;
    if (view.offset + span > n) {
      Value zero = b.constant(0, TensorType(flat.dtype(), {}));
      piece = b.pad(flat, zero, {0}, {view.offset + span - n}, {0});
    }
    piece = b.slice(piece, {view.offset}, {view.offset + span}, {1});
    // Shape [size0, s0/s1, s1/s2, ..., s_last]: every view dim becomes a prefix slice.
    std::vector<int64_t> shape{view.sizes[dims[0]]};
    for (size_t k = 1; k < dims.size(); ++k) {
      shape.push_back(view.strides[dims[k - 1]] / view.strides[dims[k]]);
    }
    shape.push_back(view.strides[dims.back()]);
    piece = b.reshape(piece, shape);
    std::vector<int64_t> limit;
    for (size_t k = 0; k < dims.size(); ++k) limit.push_back(view.sizes[dims[k]]);
    limit.push_back(1);
    piece = b.slice(piece, std::vector<int64_t>(shape.size(), 0), limit,
                    std::vector<int64_t>(shape.size(), 1));
    limit.pop_back();
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

}  // namespace

bool is_contiguous(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

int64_t numel_of(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool covers_buffer(const StridedView& view, const std::vector<int64_t>& buffer_dims) {
  return view.offset == 0 && numel_of(view.sizes) == numel_of(buffer_dims) &&
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
    Value re = b.reshape(b.op("stablehlo.real", {base}, ct), pair_shape);
    Value im = b.reshape(b.op("stablehlo.imag", {base}, ct), pair_shape);
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
    return b.op("stablehlo.complex", {re, im}, TensorType(want, {n}));
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
    out = b.op("stablehlo.bitcast_convert", {grouped}, TensorType(target, {n / r}));
  } else {
    int64_t r = have_bits / want_bits;
    Value split = b.op("stablehlo.bitcast_convert", {flat}, TensorType(target, {n, r}));
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
    return b.reshape(b.slice(flat, {view.offset}, {view.offset + count}, {1}), view.sizes);
  }
  Value out;
  if (try_structured_read(b, flat, view, &out)) return out;
  ElementType it = index_type_for(n);
  Value idx = flat_indices(b, view, it);
  Value gathered = b.op("stablehlo.gather", {flat, idx}, TensorType(base.dtype(), {count}),
                        "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], "
                        "start_index_map = [0], index_vector_dim = 1>, slice_sizes = " +
                            shlo::i64_array({1}) + ", indices_are_sorted = false");
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
    std::vector<Value> parts;
    if (view.offset > 0) parts.push_back(b.slice(flat, {0}, {view.offset}, {1}));
    parts.push_back(upd);
    if (view.offset + count < n) parts.push_back(b.slice(flat, {view.offset + count}, {n}, {1}));
    result = b.concatenate(parts, 0);
  } else {
    ElementType it = index_type_for(n);
    Value idx = flat_indices(b, view, it);
    TensorType scalar(base.dtype(), {});
    result = b.op_multi(
        "stablehlo.scatter", {flat, idx, upd}, {flat.type},
        "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], "
        "scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, indices_are_sorted = false, "
        "unique_indices = false",
        {{{scalar, scalar},
          [](FunctionBuilder&, const std::vector<Value>& args) -> std::vector<Value> {
            return {args[1]};
          }}})[0];
  }
  return b.reshape(result, base.shape());
}

Value write_storage(FunctionBuilder& b, std::optional<Value> base, const std::vector<int64_t>& dims,
                    ElementType dtype, const StridedView& view, Value update) {
  auto bytes = [](ElementType t) { return std::max(1, shlo::bit_width(t) / 8); };
  int64_t storage_bytes = numel_of(dims) * bytes(dtype);
  int64_t view_bytes = numel_of(view.sizes) * bytes(update.dtype());
  if (view.offset == 0 && is_contiguous(view.sizes, view.strides) && view_bytes == storage_bytes) {
    return update;
  }
  Value current = base ? *base : b.constant(0, TensorType(dtype, dims));
  return write_view(b, reinterpret(b, current, update.dtype()), view, update);
}

}  // namespace torchtpu::lowering
