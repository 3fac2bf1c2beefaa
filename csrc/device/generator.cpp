#include "device/generator.h"

#include <ATen/Utils.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceType.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "runtime/runtime.h"

namespace torchtpu::device {
namespace {
constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // PyTorch's default_rng_seed_val
}

TpuGeneratorImpl::TpuGeneratorImpl(c10::DeviceIndex index)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(kDefaultSeed) {}

void TpuGeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t TpuGeneratorImpl::seed() {
  uint64_t s = c10::detail::getNonDeterministicRandom(false);
  set_current_seed(s);
  return s;
}

void TpuGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(new_state.numel() == 16 && new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
              "torchtpu: RNG state must be a uint8 tensor of 16 bytes (seed, offset)");
  const auto* data = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, data, 8);
  std::memcpy(&offset_, data + 8, 8);
}

c10::intrusive_ptr<c10::TensorImpl> TpuGeneratorImpl::get_state() const {
  auto state = at::detail::empty_cpu({16}, at::kByte, std::nullopt, std::nullopt, std::nullopt,
                                     std::nullopt);
  auto* data = static_cast<uint8_t*>(state.data_ptr());
  std::memcpy(data, &seed_, 8);
  std::memcpy(data + 8, &offset_, 8);
  return state.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> TpuGeneratorImpl::reserve(uint64_t numel) {
  uint64_t off = offset_;
  offset_ += numel;
  return {seed_, off};
}

TpuGeneratorImpl* TpuGeneratorImpl::clone_impl() const {
  auto* g = new TpuGeneratorImpl(device().index());
  g->seed_ = seed_;
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::mutex m;
  static std::deque<at::Generator> generators;  // deque: references stay valid as it grows
  std::lock_guard<std::mutex> g(m);
  if (index < 0) index = 0;
  while (generators.size() <= static_cast<size_t>(index)) {
    generators.push_back(
        at::make_generator<TpuGeneratorImpl>(static_cast<c10::DeviceIndex>(generators.size())));
  }
  return generators[static_cast<size_t>(index)];
}

std::pair<uint64_t, uint64_t> next_seed_offset(const std::optional<at::Generator>& gen,
                                               c10::DeviceIndex index, uint64_t numel) {
  at::Generator g = gen.has_value() && gen->defined() ? *gen : default_generator(index);
  auto* impl = at::check_generator<TpuGeneratorImpl>(g);
  std::lock_guard<std::mutex> lock(g.mutex());
  return impl->reserve(numel);
}

}  // namespace torchtpu::device
