#include "runtime/collective_world.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <sstream>

#include "runtime/runtime.h"

namespace torchtpu::runtime {
namespace {

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

struct Registry {
  std::mutex mu;
  std::map<std::pair<int, std::string>, GroupLayout> groups;
  std::map<int, std::vector<int64_t>> world_devices;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: groups may outlive static teardown
  return *r;
}

// Replica `replica` of `world`, as a device id for messages.
std::string device_of(const ReplicaWorld& world, size_t replica) {
  return "replica " + std::to_string(replica) + " (device " +
         std::to_string(world.devices.at(replica)) + ")";
}

// The in-process meeting point of the replicas of one world: the n-th meeting of a tag on a
// world collects every replica's payload, then hands all of them to each.
class Meetings {
 public:
  std::vector<std::string> meet(const ReplicaWorld& world, int64_t replica, const std::string& tag,
                                std::string payload, const std::string& what,
                                std::chrono::milliseconds timeout) {
    const std::string world_key = tag + "|" + world.key + "|" + join(world.devices);
    std::unique_lock<std::mutex> lk(mu_);
    const uint64_t seq = counters_[{replica, world_key}]++;
    const std::string key = world_key + "#" + std::to_string(seq);
    Slot& slot = slots_[key];
    if (slot.payloads.empty()) slot.payloads.resize(world.devices.size());
    TORCH_CHECK(!slot.payloads.at(static_cast<size_t>(replica)).has_value(), "torchtpu: ", what,
                ": two ranks run as ", device_of(world, replica));
    if (!slot.failure.empty()) {
      // The others gave up waiting: this rank comes too late.
      std::string failure = slot.failure;
      leave(key, slot);
      TORCH_CHECK(false, failure);
    }
    slot.payloads[static_cast<size_t>(replica)] = std::move(payload);
    ++slot.arrived;
    cv_.notify_all();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const size_t n = world.devices.size();
    if (!cv_.wait_until(lk, deadline, [&] { return slot.arrived == n; })) {
      std::string missing;
      for (size_t r = 0; r < n; ++r) {
        if (!slot.payloads[r]) missing += (missing.empty() ? "" : ", ") + device_of(world, r);
      }
      slot.failure = "torchtpu: " + what + ": the ranks on " + missing +
                     " did not reach it within " + std::to_string(timeout.count()) +
                     " ms (a rank skipped a collective, issued collectives in another order, or "
                     "died); nothing was launched";
      std::string failure = slot.failure;
      leave(key, slot);
      TORCH_CHECK(false, failure);
    }
    std::vector<std::string> all;
    for (auto& p : slot.payloads) all.push_back(*p);
    leave(key, slot);
    return all;
  }

 private:
  struct Slot {
    std::vector<std::optional<std::string>> payloads;
    size_t arrived = 0;
    size_t left = 0;
    std::string failure;
  };
  // The last replica to leave (arrived or late) removes the slot.
  void leave(const std::string& key, Slot& slot) {
    if (++slot.left == slot.payloads.size()) slots_.erase(key);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int64_t, std::string>, uint64_t> counters_;  // (replica, world) -> count
  std::map<std::string, Slot> slots_;
};

Meetings& meetings() {
  static Meetings* m = new Meetings();
  return *m;
}

// Launch counters of multi-process worlds (no meeting), per (this rank's replica, world).
std::mutex launch_mu;
std::map<std::pair<int64_t, std::string>, uint64_t>& launch_counters() {
  static auto* m = new std::map<std::pair<int64_t, std::string>, uint64_t>();
  return *m;
}

// A launch id in [1, 2^31 - 1] from the world and the launch's number on it: launches of
// different worlds in flight together get different ids, whatever their counts.
int launch_id_of(const std::string& world_key, uint64_t seq) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (char c : world_key) mix(static_cast<unsigned char>(c));
  mix(seq);
  const auto id = static_cast<int>((h ^ (h >> 31)) & 0x7fffffff);
  return id == 0 ? 1 : id;
}

[[noreturn]] void not_implemented(const std::string& why) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "torchtpu: ", why);
  __builtin_unreachable();
}

// The translates of `global_ranks` (k ranks, a fixed stride) that tile ranks 0..n-1, in
// replica ids = global ranks; nullopt when they do not tile.
std::optional<ReplicaGroupList> translates(const std::vector<int64_t>& global_ranks, int64_t n) {
  const auto k = static_cast<int64_t>(global_ranks.size());
  ReplicaGroupList out;
  if (k == 1) {
    for (int64_t r = 0; r < n; ++r) out.push_back({r});
    return out;
  }
  const int64_t stride = global_ranks[1] - global_ranks[0];
  if (stride <= 0 || n % (k * stride) != 0) return std::nullopt;
  for (int64_t i = 1; i < k; ++i) {
    if (global_ranks[static_cast<size_t>(i)] - global_ranks[static_cast<size_t>(i - 1)] != stride) {
      return std::nullopt;
    }
  }
  if ((global_ranks[0] / stride) % k != 0) return std::nullopt;
  for (int64_t base = 0; base < n; ++base) {
    if ((base / stride) % k != 0) continue;
    std::vector<int64_t> g;
    for (int64_t i = 0; i < k; ++i) g.push_back(base + i * stride);
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace

void register_group(int device_index, const std::string& name, GroupLayout layout) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  if (layout.world_devices.empty()) {
    auto w = r.world_devices.find(device_index);
    if (w != r.world_devices.end()) layout.world_devices = w->second;
  }
  r.groups[{device_index, name}] = std::move(layout);
}

void unregister_group(int device_index, const std::string& name, const std::string& uid) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.groups.find({device_index, name});
  if (it != r.groups.end() && it->second.uid == uid) r.groups.erase(it);
}

void forget_group(int device_index, const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  r.groups.erase({device_index, name});
}

std::optional<GroupLayout> find_group(int device_index, const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.groups.find({device_index, name});
  if (it == r.groups.end()) return std::nullopt;
  return it->second;
}

void set_world_devices(int device_index, std::vector<int64_t> devices) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  r.world_devices[device_index] = std::move(devices);
}

ReplicaWorld plan_world(int device_index, const std::vector<std::string>& group_names) {
  TORCH_INTERNAL_ASSERT(!group_names.empty());
  std::vector<std::pair<std::string, GroupLayout>> layouts;
  for (const std::string& name : group_names) {
    std::optional<GroupLayout> layout = find_group(device_index, name);
    if (!layout) {
      not_implemented("process group '" + name + "' of tpu:" + std::to_string(device_index) +
                      " has no collectives inside programs (it is not a tpu group, or its ranks "
                      "are not one PJRT world and it stages through the host)");
    }
    layouts.emplace_back(name, std::move(*layout));
  }
  ReplicaWorld world;
  world.timeout = std::chrono::milliseconds(0);
  world.in_process = true;
  std::vector<std::string> uids;
  for (const auto& [name, l] : layouts) {
    world.timeout = std::max(world.timeout, l.timeout);
    world.in_process = world.in_process && l.in_process;
    uids.push_back(l.uid);
  }
  // The same groups, whichever rank plans (each names its groups its own way).
  std::sort(uids.begin(), uids.end());
  for (const std::string& uid : uids) world.key += uid + ";";
  const GroupLayout& first = layouts[0].second;
  const bool same_devices = std::all_of(layouts.begin(), layouts.end(), [&](const auto& nl) {
    return nl.second.devices == first.devices;
  });
  if (same_devices) {
    // One group's devices (a DDP or FSDP world, one mesh dimension): replicas = group ranks.
    world.devices = first.devices;
    std::vector<int64_t> all(first.devices.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    for (const auto& [name, l] : layouts) world.groups[name] = {all};
    return world;
  }
  // Several groups (FSDP x TP): the world is the default group's, replicas = global ranks, and
  // each group's replica groups are the groups of its mesh dimension, its translates.
  if (first.world_devices.empty()) {
    not_implemented("a program using several process groups needs the default group's devices");
  }
  world.devices = first.world_devices;
  const auto n = static_cast<int64_t>(world.devices.size());
  for (const auto& [name, l] : layouts) {
    if (l.world_devices != first.world_devices) {
      not_implemented("process groups '" + layouts[0].first + "' and '" + name +
                      "' belong to different worlds");
    }
    std::optional<ReplicaGroupList> groups = translates(l.global_ranks, n);
    if (!groups) {
      not_implemented("process group '" + name + "' (ranks " + join(l.global_ranks) +
                      ") and the other groups of the program do not tile the " + std::to_string(n) +
                      " ranks of the world into groups of equal size");
    }
    world.groups[name] = std::move(*groups);
  }
  return world;
}

int64_t replica_of(const ReplicaWorld& world, int device_index) {
  const int64_t id = get().device(device_index).id();
  auto it = std::find(world.devices.begin(), world.devices.end(), id);
  TORCH_CHECK(it != world.devices.end(), "torchtpu: tpu:", device_index, " (device ", id,
              ") is not one of the devices of this collective (", join(world.devices), ")");
  return it - world.devices.begin();
}

int coordinate_launch(const ReplicaWorld& world, int64_t replica, const void* executable,
                      const std::string& what, std::chrono::milliseconds timeout) {
  const std::string world_key = world.key + "|" + join(world.devices);
  if (!world.in_process) {
    std::lock_guard<std::mutex> g(launch_mu);
    return launch_id_of(world_key, launch_counters()[{replica, world_key}]++);
  }
  std::ostringstream id;
  id << executable;
  const std::string mine = id.str() + "|" + what;
  // The meeting's own count is the launch's number on this world: every replica agrees on it.
  std::vector<std::string> all = meetings().meet(world, replica, "launch", mine, what, timeout);
  // The executable decides (its module and options key it): the signatures may differ, as the
  // graphs of one compiled function do on each thread rank (g0, g1, ...).
  const std::string my_executable = id.str() + "|";
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].compare(0, my_executable.size(), my_executable) == 0) continue;
    std::string listing;
    for (size_t k = 0; k < all.size(); ++k) {
      listing += "\n  " + device_of(world, k) + ": " + all[k].substr(all[k].find('|') + 1);
    }
    throw CollectiveMismatch(
        "torchtpu: the ranks of one collective launch different programs (a collective with "
        "another shape, dtype, reduce op or group on some rank, or collectives issued in another "
        "order); nothing was launched:" +
        listing);
  }
  uint64_t seq;
  {
    std::lock_guard<std::mutex> g(launch_mu);
    seq = launch_counters()[{replica, world_key}]++;
  }
  return launch_id_of(world_key, seq);
}

std::vector<std::string> exchange(const ReplicaWorld& world, int64_t replica,
                                  const std::string& tag, std::string payload,
                                  std::chrono::milliseconds timeout) {
  TORCH_CHECK_NOT_IMPLEMENTED(world.in_process, "torchtpu: exchanging ", tag,
                              " among the ranks of a multi-process world is not supported");
  return meetings().meet(world, replica, "exchange " + tag, std::move(payload), tag, timeout);
}

const std::string& process_token() {
  static const std::string token = [] {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::random_device rd;
    return std::string(host) + ":" + std::to_string(getpid()) + ":" + std::to_string(rd());
  }();
  return token;
}

}  // namespace torchtpu::runtime
