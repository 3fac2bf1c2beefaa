// Which transport a process group's collectives take, from what each rank says about itself
// (exchanged through the group's store by csrc/distributed/xla_transport.cpp); no torch here, so
// it is unit-tested alone with made-up ranks (tests/cpp/test_pjrt.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torchtpu::pjrt {

struct RankEntry {
  std::string process;      // which process the rank is (thread ranks share one)
  int device_index = 0;     // its torch device index, tpu:N
  int64_t device_id = -1;   // the PJRT global id of that device (-1: unknown)
  std::string world;        // the multi-process PJRT world its client belongs to ("" if none)
  bool wants_host = false;  // TORCHTPU_COLLECTIVES=host on that rank
};

struct TransportPlan {
  enum Kind { kHost, kInProcess, kProcessWorld };
  Kind kind = kHost;
  // The global device id of each rank (kProcessWorld; kInProcess: as the ranks said, -1 where a
  // rank's process had not started its client yet).
  std::vector<int64_t> devices;
  std::string why;  // for kHost: why not in programs
};

// `no_world_why` says why ranks in different processes stage through the host when they are not
// one multi-process world (the plugin's reason: XLA:CPU has no cross-process collectives, the
// world is switched off, ...).
TransportPlan plan_transport(const std::vector<RankEntry>& ranks, const std::string& no_world_why);

}  // namespace torchtpu::pjrt
