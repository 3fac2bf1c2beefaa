#include "distributed/c10d_kv_store.h"

#include <c10/util/Exception.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

namespace torchtpu::distributed {

C10dKvStore::C10dKvStore(const c10::intrusive_ptr<c10d::Store>& store, std::string prefix)
    : base_(store->clone()), prefix_(std::move(prefix)) {
  shared_ = c10::make_intrusive<c10d::PrefixStore>(prefix_, base_->clone());
}

std::string C10dKvStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  // A blocking wait of its own: a clone per call, so concurrent gets (the plugin calls from a
  // pool) and puts proceed while this one waits.
  c10d::PrefixStore store(prefix_, base_->clone());
  try {
    store.wait({key}, timeout);
  } catch (const c10::DistStoreError& e) {
    if (!store.check({key})) {
      throw pjrt::KvTimeout("torchtpu key-value store: no process put " + prefix_ + "/" + key +
                            " within " + std::to_string(timeout.count()) + " ms");
    }
  }
  const std::vector<uint8_t> v = store.get(key);
  return std::string(v.begin(), v.end());
}

std::optional<std::string> C10dKvStore::try_get(const std::string& key) {
  std::lock_guard<std::mutex> g(mu_);
  if (!shared_->check({key})) return std::nullopt;
  const std::vector<uint8_t> v = shared_->get(key);
  return std::string(v.begin(), v.end());
}

void C10dKvStore::put(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> g(mu_);
  shared_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

}  // namespace torchtpu::distributed
