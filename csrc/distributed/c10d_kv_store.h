// The PJRT plugin's key-value store (pjrt/kv_store.h) served by a c10d store, as JAX serves it
// with its coordination service: the processes' rendezvous store (TCPStore under torchrun)
// carries the plugin's topology exchange too.
#pragma once

#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "pjrt/kv_store.h"

namespace torchtpu::distributed {

class C10dKvStore final : public pjrt::KvStore {
 public:
  // The plugin's keys live under `prefix` + "/" (c10d::PrefixStore), apart from torch's and other
  // plugins'. The store is cloned, never shared with torch: a TCPStore client serialises its
  // calls, and a blocking get from the plugin must neither wait behind torch's calls nor hold
  // them up.
  C10dKvStore(const c10::intrusive_ptr<c10d::Store>& store, std::string prefix);

  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  void put(const std::string& key, const std::string& value) override;

 private:
  c10::intrusive_ptr<c10d::Store> base_;  // a clone of the rendezvous store, for more clones
  std::string prefix_;
  std::mutex mu_;  // guards shared_ (puts and try_gets: quick calls)
  c10::intrusive_ptr<c10d::Store> shared_;
};

}  // namespace torchtpu::distributed
