// multinomial's value checks. The CPU checks the probabilities' values (negative, inf/NaN, rows
// summing to zero), which a lowering cannot raise on: the tpu kernel runs a small reduction
// program, torchtpu::multinomial_check (lowered in lowering/multinomial.cpp), reads its 0-d code
// (one sync per call, as CUDA's kernel makes one when drawing without replacement) and raises
// the CPU's errors; then the lowered aten::multinomial draws.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

TORCH_LIBRARY_FRAGMENT(torchtpu, m) {
  m.def("multinomial_check(Tensor self, bool fast) -> Tensor");
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) {
  m.impl("multinomial_check", [](const at::Tensor& self, bool) {
    return at::empty({}, self.options().dtype(at::kLong));
  });
}

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  m.impl("multinomial_check", torch::CppFunction::makeFromBoxedFunction<&tpu_boxed_kernel>());
}

// multinomial(self, num_samples, replacement, *, generator) and its out= form: the CPU's checks
// in its order (shapes and dtype first, then the values, only for a non-empty result), then the
// lowered op. The messages are the CPU's, prefixed with the op's name.
void multinomial_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, op.schema().arguments().size());
  const at::Tensor self = args[0].toTensor();
  int64_t k = args[1].isInt() ? args[1].toInt() : args[1].toSymInt().guard_int(__FILE__, __LINE__);
  bool replacement = args[2].toBool();
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "multinomial: prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "multinomial: multinomial only supports floating-point dtypes for input, got: ",
              self.scalar_type());
  // The out= form writes int64 indices only (tpu wrote them into a float out as floats).
  if (op.schema().overload_name() == "out") {
    const at::Tensor out = args[args.size() - 1].toTensor();
    TORCH_CHECK(out.scalar_type() == at::kLong,
                "multinomial expects Long tensor out, got: ", out.scalar_type());
  }
  TORCH_CHECK(k > 0, "multinomial: cannot sample n_sample <= 0 samples");
  int64_t n = self.size(-1);
  TORCH_CHECK(replacement || k <= n,
              "multinomial: cannot sample n_sample > prob_dist.size(-1) samples without "
              "replacement");
  TORCH_CHECK(n <= (int64_t{1} << 24), "multinomial: number of categories cannot exceed 2^24");
  if (n > 0 && (self.dim() == 1 || self.size(0) > 0)) {
    static auto check = c10::Dispatcher::singleton()
                            .findSchemaOrThrow("torchtpu::multinomial_check", "")
                            .typed<at::Tensor(const at::Tensor&, bool)>();
    int64_t code = check.call(self, !replacement || k == 1).item<int64_t>();  // the one sync
    TORCH_CHECK(code != 1,
                "multinomial: probability tensor contains either `inf`, `nan` or element < 0");
    TORCH_CHECK(code != 2,
                "multinomial: invalid multinomial distribution (sum of probabilities <= 0)");
    TORCH_CHECK(
        code != 3,
        "multinomial: invalid multinomial distribution (encountering probability entry < 0)");
    TORCH_CHECK(code != 4,
                "multinomial: invalid multinomial distribution (encountering probability entry = "
                "infinity or NaN)");
  }
  tpu_boxed_kernel(op, stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("multinomial", torch::CppFunction::makeFromBoxedFunction<&multinomial_kernel>());
  m.impl("multinomial.out", torch::CppFunction::makeFromBoxedFunction<&multinomial_kernel>());
}

}  // namespace
}  // namespace torchtpu::aten
