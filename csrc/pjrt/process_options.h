// How a plugin is told which of a host's devices one process owns and where it stands in a
// multi-process world (no torch headers: unit-tested alone in tests/cpp/test_pjrt.cpp).
//
// TPU (libtpu) reads its environment at client creation, as torch_xla sets it for one chip per
// process (torch_xla/_internal/tpu.py configure_topology): TPU_VISIBLE_CHIPS, TPU_PROCESS_BOUNDS,
// TPU_CHIPS_PER_PROCESS_BOUNDS, TPU_PROCESS_ADDRESSES, TPU_PROCESS_PORT, CLOUD_TPU_TASK_ID.
// XLA:GPU takes client create options: visible_devices (local device ordinals), node_id and
// num_nodes (with the key-value store callbacks, which it uses to exchange topologies).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pjrt/pjrt.h"

namespace torchtpu::pjrt {

struct ProcessPlace {
  int local_rank = 0;        // this process on its host
  int local_world_size = 1;  // processes per host
  int node_rank = 0;         // this host
  int num_nodes = 1;         // hosts
};

// One TPU chip per process on each host. `host_chip_bounds` is the host's chip mesh (x,y,z; a
// v4-8 or v5p-8 host: 2,2,1; a v5e-8/v6e-8 host: 2,4,1); `host_addresses` one address per host
// in node order; processes listen on base_port + local_rank. Returns (name, value) pairs to set
// where the user has not. Throws std::invalid_argument when the host's chips are not
// local_world_size, or a host address is missing.
std::vector<std::pair<std::string, std::string>> tpu_process_env(
    const ProcessPlace& place, const std::array<int, 3>& host_chip_bounds,
    const std::vector<std::string>& host_addresses, int base_port = 8476);

// The chip mesh of a host with `chips` chips, as TPU hosts come (1: 1,1,1; 2: 1,2,1; 4: 2,2,1;
// 8: 2,4,1). Throws std::invalid_argument for another count.
std::array<int, 3> default_host_chip_bounds(int chips);

// XLA:GPU's create options for one process owning `local_devices` (ordinals on its host);
// node_id/num_nodes only when `distributed` (they need the key-value store callbacks).
std::map<std::string, Attribute> gpu_process_options(const ProcessPlace& place,
                                                     const std::vector<int64_t>& local_devices,
                                                     bool distributed);

}  // namespace torchtpu::pjrt
