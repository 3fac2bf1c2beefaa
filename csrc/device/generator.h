// Counter-based generator: (seed, offset) are handed to programs as a runtime tensor<2xui64>,
// so random ops never recompile when the seed or the offset changes.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <utility>

namespace torchtpu::device {

class TpuGeneratorImpl : public c10::GeneratorImpl {
 public:
  explicit TpuGeneratorImpl(c10::DeviceIndex index);
  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }
  // Returns (seed, offset) for one random op and advances the offset past its `numel` draws.
  std::pair<uint64_t, uint64_t> reserve(uint64_t numel);

 private:
  TpuGeneratorImpl* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex index);
// Locks the generator (as CUDA does) and reserves `numel` draws.
std::pair<uint64_t, uint64_t> next_seed_offset(const std::optional<at::Generator>& gen,
                                               c10::DeviceIndex index, uint64_t numel);

}  // namespace torchtpu::device
