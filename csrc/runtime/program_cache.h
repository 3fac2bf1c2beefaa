// The in-memory program caches (eager ops; each compiled graph): an LRU bounded in entries, so a
// workload of ever new shapes does not grow the process without end, in which threads racing on
// one new signature share one build (the others wait for it) instead of compiling it each.
#pragma once

#include <cstddef>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "runtime/metrics.h"

namespace torchtpu::runtime {

// TORCHTPU_PROGRAM_CACHE_MAX_ENTRIES (a positive integer; default 4096), read once. A bad value
// raises an error naming the variable.
size_t program_cache_max_entries();

// Runs `wait`, which blocks until another thread has made progress, without holding what that
// thread may need: a build runs PyTorch's meta kernels, some of them Python, so a thread that
// waits for another's build while holding the GIL deadlocks with it (ops called from Python with
// the GIL held, thread ranks). The Python bindings install the GIL release
// (set_blocking_wait_hook); without a hook `wait` just runs.
void blocking_wait(const std::function<void()>& wait);
void set_blocking_wait_hook(void (*hook)(const std::function<void()>& wait));

template <typename V>
class ProgramCache {
 public:
  using Ptr = std::shared_ptr<V>;

  ProgramCache() : max_entries_(program_cache_max_entries()) {}

  // The entry of `key`: cached (`*hit` true), or built now by `build`, once even when threads
  // race (they wait for it and count as hits). A build that throws or returns null caches
  // nothing: its thread sees the exception or null, and each waiter then builds for itself
  // (the failure may be specific to the first thread's call).
  template <typename Build>
  Ptr get_or_build(const std::string& key, Build&& build, bool* hit) {
    for (;;) {
      std::shared_future<Ptr> pending;
      // Made only on a miss: a promise allocates its shared state, and a hit (every steady-state
      // eager op) should cost a lock and one lookup, nothing more.
      std::optional<std::promise<Ptr>> promise;
      {
        std::lock_guard<std::mutex> g(mutex_);
        auto it = entries_.find(key);
        if (it != entries_.end()) {
          lru_.splice(lru_.begin(), lru_, it->second.second);
          *hit = true;
          return it->second.first;
        }
        auto b = building_.find(key);
        if (b != building_.end()) {
          pending = b->second;
        } else {
          promise.emplace();
          building_.emplace(key, promise->get_future().share());
        }
      }
      if (pending.valid()) {
        Ptr built;
        blocking_wait([&] { built = pending.get(); });
        if (built) {
          *hit = true;
          return built;
        }
        continue;
      }
      Ptr built;
      try {
        built = build();
      } catch (...) {
        finish(key, *promise, nullptr);
        throw;
      }
      finish(key, *promise, built);
      *hit = false;
      return built;
    }
  }

  // Drops the entry of `key` if it is still `entry` (another thread may have replaced it).
  void erase(const std::string& key, const Ptr& entry) {
    std::lock_guard<std::mutex> g(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.first != entry) return;
    lru_.erase(it->second.second);
    entries_.erase(it);
  }

  size_t size() const {
    std::lock_guard<std::mutex> g(mutex_);
    return entries_.size();
  }

  size_t max_entries() const { return max_entries_; }

 private:
  void finish(const std::string& key, std::promise<Ptr>& promise, Ptr built) {
    {
      std::lock_guard<std::mutex> g(mutex_);
      building_.erase(key);
      if (built) {
        lru_.push_front(key);
        entries_[key] = {built, lru_.begin()};
        while (entries_.size() > max_entries_) {
          // Launches in flight hold their own reference: evicting never frees a running program.
          entries_.erase(lru_.back());
          lru_.pop_back();
          metrics().program_cache_evictions++;
        }
      }
    }
    promise.set_value(std::move(built));
  }

  const size_t max_entries_;
  mutable std::mutex mutex_;
  std::list<std::string> lru_;  // most recently used first
  std::unordered_map<std::string, std::pair<Ptr, std::list<std::string>::iterator>> entries_;
  std::unordered_map<std::string, std::shared_future<Ptr>> building_;
};

}  // namespace torchtpu::runtime
