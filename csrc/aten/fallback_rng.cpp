#include "aten/fallback_rng.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

#include <optional>

#include "device/current_device.h"
#include "device/generator.h"
#include "exec/call_state.h"

namespace torchtpu::aten {
namespace {

// splitmix64's finalizer: neighbouring (seed, offset) pairs give unrelated CPU seeds.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The tpu device the op runs on: its first tpu tensor, else its `device=` argument, else the
// current device.
c10::DeviceIndex op_device(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                           size_t first) {
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = stack[first + i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_privateuseone()) {
      return v.toTensor().device().index();
    }
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) {
        if (t.defined() && t.is_privateuseone()) return t.device().index();
      }
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = stack[first + i];
    if (v.isDevice() && v.toDevice().is_privateuseone() && v.toDevice().has_index()) {
      return v.toDevice().index();
    }
  }
  return static_cast<c10::DeviceIndex>(device::current_device());
}

// Draws the tpu generator consumes for this call: the elements of the op's tensors (at least
// one), so a fallback op moves the offset about as far as a native op of that size would.
uint64_t draws(const torch::jit::Stack& stack, size_t first) {
  uint64_t n = 0;
  for (size_t i = first; i < stack.size(); ++i) {
    if (stack[i].isTensor() && stack[i].toTensor().defined()) {
      n += static_cast<uint64_t>(stack[i].toTensor().numel());
    }
  }
  return n > 0 ? n : 1;
}

}  // namespace

void use_cpu_generators(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& args = schema.arguments();
  const size_t first = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    if (!exec::is_generator_type(args[i].type())) continue;
    c10::IValue& v = (*stack)[first + i];
    std::optional<at::Generator> gen;
    if (v.isGenerator()) {
      gen = v.toGenerator();
      // A CPU generator handed to a tpu op is used as given (the CPU kernel accepts it).
      if (gen->device().type() == c10::DeviceType::CPU) continue;
    }
    auto [seed, offset] =
        device::next_seed_offset(gen, op_device(schema, *stack, first), draws(*stack, first));
    v = c10::IValue(at::detail::createCPUGenerator(mix(seed ^ mix(offset))));
  }
}

}  // namespace torchtpu::aten
