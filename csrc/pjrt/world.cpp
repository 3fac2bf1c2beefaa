#include "pjrt/world.h"

namespace torchtpu::pjrt {

TransportPlan plan_transport(const std::vector<RankEntry>& ranks, const std::string& no_world_why) {
  TransportPlan plan;
  for (const RankEntry& r : ranks) {
    if (r.wants_host) {
      plan.why = "TORCHTPU_COLLECTIVES=host";
      return plan;
    }
  }
  if (ranks.size() < 2) {
    plan.why = "a group of one rank has nothing to exchange";
    return plan;
  }
  bool one_process = true;
  bool one_world = !ranks[0].world.empty();
  for (const RankEntry& r : ranks) {
    one_process = one_process && r.process == ranks[0].process;
    one_world = one_world && r.world == ranks[0].world;
  }
  if (!one_process && !one_world) {
    plan.why = "its ranks are separate processes and " + no_world_why;
    return plan;
  }
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (size_t q = r + 1; q < ranks.size(); ++q) {
      const bool same = one_process ? ranks[r].device_index == ranks[q].device_index
                                    : ranks[r].device_id == ranks[q].device_id;
      if (same) {
        plan.why = "ranks " + std::to_string(r) + " and " + std::to_string(q) +
                   (one_process ? " share tpu:" + std::to_string(ranks[r].device_index)
                                : " share PJRT device " + std::to_string(ranks[r].device_id)) +
                   " (in-program collectives need one device per rank)";
        return plan;
      }
    }
    if (!one_process && ranks[r].device_id < 0) {
      plan.why = "rank " + std::to_string(r) +
                 " uses tpu:" + std::to_string(ranks[r].device_index) +
                 ", which its process does not have";
      return plan;
    }
    plan.devices.push_back(ranks[r].device_id);
  }
  plan.kind = one_process ? TransportPlan::kInProcess : TransportPlan::kProcessWorld;
  return plan;
}

}  // namespace torchtpu::pjrt
