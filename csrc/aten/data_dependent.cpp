// Ops whose output shape depends on tensor data: nonzero, masked_select, unique,
// unique_consecutive, unique_dim, and aten::equal (a bool on the host). Meta inference cannot size
// their outputs, so they cannot be plain lowering-table entries. Each runs as
//   1. a count program (count_nonzero / torchtpu::unique_count / torchtpu::all_equal),
//   2. one sync: the host reads that 0-d result,
//   3. a static program that takes the count as a structural size (nonzero_static /
//      torchtpu::masked_select_static / torchtpu::unique_static).
// Both programs are ordinary lowered ops going through the dispatcher, so they are cached per
// signature like any other op (the static one per distinct size) and count in the metrics.
#include <ATen/ExpandUtils.h>
#include <ATen/ops/count_nonzero.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/nonzero_static.h>
#include <torch/library.h>

#include <tuple>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

using Tensor3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  m.def("masked_select_static(Tensor self, Tensor mask, int size) -> Tensor");
  m.def("unique_count(Tensor self, bool consecutive) -> Tensor");
  m.def(
      "unique_static(Tensor self, int size, bool consecutive, bool return_inverse, "
      "bool return_counts) -> (Tensor, Tensor, Tensor)");
  m.def("unique_dim_count(Tensor self, int dim, bool consecutive) -> Tensor");
  m.def(
      "unique_dim_static(Tensor self, int dim, int size, bool consecutive) -> "
      "(Tensor, Tensor, Tensor)");
  m.def("all_equal(Tensor self, Tensor other) -> Tensor");
  m.def("repeat_interleave_count(Tensor repeats) -> Tensor");
  m.def("repeat_interleave_static(Tensor repeats, int size) -> Tensor");
}

Tensor3 unique_dim_static_meta(const at::Tensor& self, int64_t dim, int64_t size, bool) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  auto sizes = self.sizes().vec();
  int64_t m = sizes[static_cast<size_t>(dim)];
  sizes[static_cast<size_t>(dim)] = size;
  auto idx = self.options().dtype(at::kLong);
  return {at::empty(sizes, self.options()), at::empty({m}, idx), at::empty({size}, idx)};
}

Tensor3 unique_static_meta(const at::Tensor& self, int64_t size, bool consecutive,
                           bool return_inverse, bool return_counts) {
  auto idx = self.options().dtype(at::kLong);
  return {at::empty({size}, self.options()),
          at::empty(return_inverse ? self.sizes() : c10::IntArrayRef{0}, idx),
          at::empty({return_counts ? size : 0}, idx)};
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) {
  m.impl("masked_select_static", [](const at::Tensor& self, const at::Tensor&, int64_t size) {
    return at::empty({size}, self.options());
  });
  m.impl("unique_count", [](const at::Tensor& self, bool) {
    return at::empty({}, self.options().dtype(at::kLong));
  });
  m.impl("unique_static", unique_static_meta);
  m.impl("unique_dim_count", [](const at::Tensor& self, int64_t, bool) {
    return at::empty({}, self.options().dtype(at::kLong));
  });
  m.impl("unique_dim_static", unique_dim_static_meta);
  m.impl("all_equal", [](const at::Tensor& self, const at::Tensor&) {
    return at::empty({}, self.options().dtype(at::kBool));
  });
  m.impl("repeat_interleave_count", [](const at::Tensor& repeats) {
    return at::empty({}, repeats.options().dtype(at::kLong));
  });
  m.impl("repeat_interleave_static", [](const at::Tensor& repeats, int64_t size) {
    return at::empty({size}, repeats.options());
  });
}

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  for (const char* name :
       {"masked_select_static", "unique_count", "unique_static", "unique_dim_count",
        "unique_dim_static", "all_equal", "repeat_interleave_count", "repeat_interleave_static"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
  }
}

c10::OperatorHandle torchtpu_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

// The one sync of each op: the host reads the count program's 0-d result.
int64_t read_count(const at::Tensor& count) { return count.item<int64_t>(); }

at::Tensor nonzero_kernel(const at::Tensor& self) {
  int64_t n = read_count(at::count_nonzero(self));
  return at::nonzero_static(self, n, -1);
}

at::Tensor& nonzero_out_kernel(const at::Tensor& self, at::Tensor& out) {
  at::Tensor r = nonzero_kernel(self);
  out.resize_(r.sizes());
  out.copy_(r);
  return out;
}

at::Tensor masked_select_kernel(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  // mask first, as the CPU's expand_outplace(mask, self): a shape mismatch names the same
  // tensor a and b in its error.
  auto shape = at::infer_size(mask.sizes(), self.sizes());
  int64_t n = read_count(at::count_nonzero(mask.expand(shape)));
  static auto op = torchtpu_op("torchtpu::masked_select_static")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>();
  return op.call(self, mask, n);
}

Tensor3 unique_impl_kernel(const at::Tensor& self, bool consecutive, bool return_inverse,
                           bool return_counts) {
  static auto count =
      torchtpu_op("torchtpu::unique_count").typed<at::Tensor(const at::Tensor&, bool)>();
  static auto run = torchtpu_op("torchtpu::unique_static")
                        .typed<Tensor3(const at::Tensor&, int64_t, bool, bool, bool)>();
  int64_t n = read_count(count.call(self, consecutive));
  return run.call(self, n, consecutive, return_inverse, return_counts);
}

// torch.unique: the CPU leaves the order of sorted=False unspecified; sorted is a valid answer.
Tensor3 unique2_kernel(const at::Tensor& self, bool sorted, bool return_inverse,
                       bool return_counts) {
  return unique_impl_kernel(self, /*consecutive=*/false, return_inverse, return_counts);
}

std::tuple<at::Tensor, at::Tensor> unique_kernel(const at::Tensor& self, bool sorted,
                                                 bool return_inverse) {
  auto [values, inverse, counts] = unique_impl_kernel(self, false, return_inverse, false);
  return {values, inverse};
}

// Unique slices along `dim`: the sort compares slices lexicographically with one comparator
// term per slice element, so slices of more than this many elements (and empty inputs, whose
// errors are the CPU's to raise) take the counted CPU fallback instead.
constexpr int64_t kMaxUniqueSliceElements = 256;

bool unique_dim_lowered(const at::Tensor& self, int64_t dim) {
  if (self.numel() == 0) return false;
  dim = c10::maybe_wrap_dim(dim, self.dim());
  return self.numel() / self.size(dim) <= kMaxUniqueSliceElements;
}

// Unlike the flat form, the CPU returns inverse and counts here whether asked or not.
Tensor3 unique_dim_impl(const at::Tensor& self, int64_t dim, bool consecutive) {
  static auto count = torchtpu_op("torchtpu::unique_dim_count")
                          .typed<at::Tensor(const at::Tensor&, int64_t, bool)>();
  static auto run = torchtpu_op("torchtpu::unique_dim_static")
                        .typed<Tensor3(const at::Tensor&, int64_t, int64_t, bool)>();
  int64_t n = read_count(count.call(self, dim, consecutive));
  return run.call(self, dim, n, consecutive);
}

void push3(torch::jit::Stack* stack, size_t nargs, Tensor3 r) {
  torch::jit::drop(*stack, nargs);
  torch::jit::push(*stack, std::get<0>(r), std::get<1>(r), std::get<2>(r));
}

// unique_consecutive(self, return_inverse, return_counts, dim?)
void unique_consecutive_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 4);
  const at::Tensor self = args[0].toTensor();
  bool return_inverse = args[1].toBool();
  bool return_counts = args[2].toBool();
  if (args[3].isNone() || self.dim() <= 1) {
    return push3(stack, 4, unique_impl_kernel(self, true, return_inverse, return_counts));
  }
  int64_t dim = args[3].toInt();
  if (!unique_dim_lowered(self, dim)) return tpu_boxed_kernel(op, stack);
  push3(stack, 4, unique_dim_impl(self, dim, /*consecutive=*/true));
}

// unique_dim(self, dim, sorted, return_inverse, return_counts) and
// unique_dim_consecutive(self, dim, return_inverse, return_counts).
template <bool kConsecutive>
void unique_dim_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  size_t nargs = kConsecutive ? 4 : 5;
  auto args = torch::jit::last(*stack, nargs);
  const at::Tensor self = args[0].toTensor();
  int64_t dim = args[1].toInt();
  if (!unique_dim_lowered(self, dim)) return tpu_boxed_kernel(op, stack);
  push3(stack, nargs, unique_dim_impl(self, dim, kConsecutive));
}

bool equal_kernel(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(),
              "Cannot compare two tensors on different devices. Got: ", self.device(), " and ",
              other.device());
  if (self.sizes() != other.sizes()) return false;
  static auto op =
      torchtpu_op("torchtpu::all_equal").typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(self, other).item<bool>();
}

// repeat_interleave(repeats, *, output_size): the indices each repeated `repeats[i]` times. A
// given output_size needs no sync; otherwise the count program sums the repeats (-1 flags a
// negative one, the CPU's error).
at::Tensor repeat_interleave_kernel(const at::Tensor& repeats,
                                    std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
              "repeats has to be Long or Int tensor");
  int64_t n;
  if (output_size) {
    n = output_size->guard_int(__FILE__, __LINE__);
  } else {
    static auto count =
        torchtpu_op("torchtpu::repeat_interleave_count").typed<at::Tensor(const at::Tensor&)>();
    n = read_count(count.call(repeats));
    TORCH_CHECK(n >= 0, "repeats can not be negative");
  }
  static auto run = torchtpu_op("torchtpu::repeat_interleave_static")
                        .typed<at::Tensor(const at::Tensor&, int64_t)>();
  return run.call(repeats, n);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("repeat_interleave.Tensor", repeat_interleave_kernel);
  m.impl("nonzero", nonzero_kernel);
  m.impl("nonzero.out", nonzero_out_kernel);
  m.impl("masked_select", masked_select_kernel);
  m.impl("_unique2", unique2_kernel);
  m.impl("_unique", unique_kernel);
  m.impl("unique_consecutive",
         torch::CppFunction::makeFromBoxedFunction<&unique_consecutive_kernel>());
  m.impl("unique_dim", torch::CppFunction::makeFromBoxedFunction<&unique_dim_kernel<false>>());
  m.impl("unique_dim_consecutive",
         torch::CppFunction::makeFromBoxedFunction<&unique_dim_kernel<true>>());
  m.impl("equal", equal_kernel);
}

}  // namespace
}  // namespace torchtpu::aten
