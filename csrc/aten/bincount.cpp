// torch.bincount on tpu. Its output length is max(input) + 1 (at least minlength), so it follows
// the data-dependent pattern of aten/data_dependent.cpp:
//   1. a count program, torchtpu::bincount_max: the input's max, or -1 when any value is negative,
//   2. one sync: the host reads that 0-d result and makes the CPU's checks with it,
//   3. a static program, torchtpu::bincount_static, taking the length as a structural int.
// Both are lowered in lowering/histogram.cpp and cached per signature like any op.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <limits>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  m.def("bincount_max(Tensor self) -> Tensor");
  m.def("bincount_static(Tensor self, Tensor? weights, int size) -> Tensor");
}

// The CPU's result dtype: int64 counts; float weights sum in float, any other weights in double.
c10::ScalarType result_dtype(const std::optional<at::Tensor>& weights) {
  if (!weights || !weights->defined()) return at::kLong;
  return weights->scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) {
  m.impl("bincount_max",
         [](const at::Tensor& self) { return at::empty({}, self.options().dtype(at::kLong)); });
  m.impl("bincount_static",
         [](const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t size) {
           return at::empty({size}, self.options().dtype(result_dtype(weights)));
         });
}

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  for (const char* name : {"bincount_max", "bincount_static"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
  }
}

// The CPU kernel's checks, in its order (dtype, minlength, empty input, rank and sign, overflow,
// weights).
at::Tensor bincount_kernel(const at::Tensor& self, const std::optional<at::Tensor>& weights,
                           int64_t minlength) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isIntegralType(self.scalar_type(), /*includeBool=*/false),
                              "\"bincount\" not implemented for '",
                              c10::toString(self.scalar_type()), "'");
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  if (self.dim() == 1 && self.numel() == 0) {
    return at::zeros({minlength}, self.options().dtype(at::kLong));
  }
  TORCH_CHECK(self.dim() == 1, "bincount only supports 1-d non-negative integral inputs.");
  static auto count = c10::Dispatcher::singleton()
                          .findSchemaOrThrow("torchtpu::bincount_max", "")
                          .typed<at::Tensor(const at::Tensor&)>();
  int64_t max_val = count.call(self).item<int64_t>();  // the one sync
  TORCH_CHECK(max_val >= 0, "bincount only supports 1-d non-negative integral inputs.");
  TORCH_CHECK(max_val < std::numeric_limits<int64_t>::max(),
              "maximum value of input overflowed, it should be < ",
              std::numeric_limits<int64_t>::max(), " but got ", max_val);
  bool has_weights = weights && weights->defined();
  TORCH_CHECK(!has_weights || (weights->dim() == 1 && weights->size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  static auto run =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("torchtpu::bincount_static", "")
          .typed<at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&, int64_t)>();
  return run.call(self, has_weights ? weights : std::nullopt, std::max(max_val + 1, minlength));
}

at::Tensor& bincount_out_kernel(const at::Tensor& self, const std::optional<at::Tensor>& weights,
                                int64_t minlength, at::Tensor& out) {
  at::Tensor r = bincount_kernel(self, weights, minlength);
  out.resize_(r.sizes());
  out.copy_(r);
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("bincount", bincount_kernel);
  m.impl("bincount.out", bincount_out_kernel);
}

}  // namespace
}  // namespace torchtpu::aten
