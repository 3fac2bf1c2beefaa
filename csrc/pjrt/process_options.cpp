#include "pjrt/process_options.h"

#include <stdexcept>

namespace torchtpu::pjrt {
namespace {

std::string bounds_text(const std::array<int, 3>& b) {
  return std::to_string(b[0]) + "," + std::to_string(b[1]) + "," + std::to_string(b[2]);
}

}  // namespace

std::array<int, 3> default_host_chip_bounds(int chips) {
  switch (chips) {
    case 1:
      return {1, 1, 1};
    case 2:
      return {1, 2, 1};
    case 4:
      return {2, 2, 1};
    case 8:
      return {2, 4, 1};
    default:
      throw std::invalid_argument("torchtpu: no TPU host has " + std::to_string(chips) +
                                  " chips (1, 2, 4 or 8); set TPU_PROCESS_BOUNDS and "
                                  "TPU_VISIBLE_CHIPS yourself");
  }
}

std::vector<std::pair<std::string, std::string>> tpu_process_env(
    const ProcessPlace& place, const std::array<int, 3>& host_chip_bounds,
    const std::vector<std::string>& host_addresses, int base_port) {
  const int chips = host_chip_bounds[0] * host_chip_bounds[1] * host_chip_bounds[2];
  if (chips != place.local_world_size) {
    throw std::invalid_argument(
        "torchtpu: one TPU chip per process needs " + std::to_string(chips) +
        " processes per host (chip bounds " + bounds_text(host_chip_bounds) +
        "), got LOCAL_WORLD_SIZE=" + std::to_string(place.local_world_size));
  }
  if (static_cast<int>(host_addresses.size()) != place.num_nodes) {
    throw std::invalid_argument("torchtpu: " + std::to_string(place.num_nodes) + " TPU hosts but " +
                                std::to_string(host_addresses.size()) + " host addresses");
  }
  // Hosts line up along y, as torch_xla multiplies the slice's per-host process bounds.
  const std::array<int, 3> process_bounds = {
      host_chip_bounds[0], host_chip_bounds[1] * place.num_nodes, host_chip_bounds[2]};
  std::string addresses;
  for (const std::string& host : host_addresses) {
    for (int r = 0; r < place.local_world_size; ++r) {
      addresses += (addresses.empty() ? "" : ",") + host + ":" + std::to_string(base_port + r);
    }
  }
  return {
      {"TPU_VISIBLE_CHIPS", std::to_string(place.local_rank)},
      {"TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1"},
      {"TPU_PROCESS_BOUNDS", bounds_text(process_bounds)},
      {"TPU_PROCESS_ADDRESSES", addresses},
      {"TPU_PROCESS_PORT", std::to_string(base_port + place.local_rank)},
      {"CLOUD_TPU_TASK_ID",
       std::to_string(place.node_rank * place.local_world_size + place.local_rank)},
  };
}

std::map<std::string, Attribute> gpu_process_options(const ProcessPlace& place,
                                                     const std::vector<int64_t>& local_devices,
                                                     bool distributed) {
  std::map<std::string, Attribute> options;
  options["visible_devices"] = local_devices;
  if (distributed) {
    options["node_id"] =
        static_cast<int64_t>(place.node_rank * place.local_world_size + place.local_rank);
    options["num_nodes"] = static_cast<int64_t>(place.num_nodes * place.local_world_size);
  }
  return options;
}

}  // namespace torchtpu::pjrt
