// Collectives inside programs: which devices a program's replicas run on, and how every replica
// of one launch finds the others.
//
// A process group whose ranks' devices belong to one PJRT world (devices of this process's
// client, or one multi-process client) registers its layout here (distributed/tpu_backend.cpp).
// A program holding collectives of such groups is compiled for several replicas
// (pjrt::replicated_compile_options over ReplicaWorld::devices) and launched once per replica,
// each from its rank on its rank's device, all with one launch id.
//
// What XLA requires, and what this file guarantees before anything reaches the device:
// - every replica launches the very same executable: two separately compiled copies of one
//   module do not meet in the XLA CPU runtime's rendezvous (their collectives' op ids differ)
//   and wait forever. Ranks of one process share one executable per module
//   (runtime/compile.h's module table); the launch handshake checks it;
// - every replica uses the same launch id: derived from the world and the rank's count of
//   launches on that world, so ranks that issue the same programs in the same order agree;
// - nobody launches until everyone will: in an in-process world the ranks meet on the host
//   first (coordinate_launch), so a missing rank, another program or another shape raises an
//   error on every rank within the group's timeout instead of hanging in the device rendezvous,
//   which never times out.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace torchtpu::runtime {

// Each inner list holds the replica ids of one group, in group rank order.
using ReplicaGroupList = std::vector<std::vector<int64_t>>;

// A process group as one of its ranks sees it.
struct GroupLayout {
  // The same on every rank of this group and different for every other group, of this process
  // or another (its ranks agree on it when the group is made): launches count per group, so a
  // group that timed out leaves nothing behind for the next group on the same devices.
  std::string uid;
  std::vector<int64_t> devices;       // global PJRT device id of each group rank
  std::vector<int64_t> global_ranks;  // each group rank's rank in the default group
  int64_t rank = 0;                   // this rank's group rank
  // Global device id of each rank of the default group (empty while unknown).
  std::vector<int64_t> world_devices;
  // All devices belong to this process's client (thread ranks); else one multi-process world.
  bool in_process = true;
  std::chrono::milliseconds timeout{30 * 60 * 1000};
};

// `device_index` is the registering rank's torch device index: thread ranks of one process
// share this table, and each names its groups by its own counter ("1", "2", ...), so one name
// may mean different groups on different ranks.
void register_group(int device_index, const std::string& name, GroupLayout layout);
// Removes the registration of `name` made with `uid` (a later group of the same name keeps its).
void unregister_group(int device_index, const std::string& name, const std::string& uid);
// Removes any registration of `name` on `device_index`: a new group of that name is being made
// there, and the old one (destroyed, though compiled graphs may still hold its backend) must not
// serve it, whichever transport the new one gets.
void forget_group(int device_index, const std::string& name);
std::optional<GroupLayout> find_group(int device_index, const std::string& name);
// Registers the default group's devices as every later group's world_devices on this rank.
void set_world_devices(int device_index, std::vector<int64_t> devices);

// The replicas of one program and the replica groups of each process group it uses.
struct ReplicaWorld {
  // Which groups launch on it (their uids): replicas meet and count their launches per key.
  std::string key;
  std::vector<int64_t> devices;  // replica i runs on the device whose global id is devices[i]
  std::map<std::string, ReplicaGroupList> groups;
  bool in_process = true;
  std::chrono::milliseconds timeout{30 * 60 * 1000};
};

// Which replica of `world` the rank on torch device `device_index` is (its device's position).
int64_t replica_of(const ReplicaWorld& world, int device_index);

// The world of a program using `group_names` (registered groups), seen from device
// `device_index`: the groups' own devices when they all have the same; else the default group's
// devices, each group's replica groups being its translates (the groups of one DeviceMesh
// dimension). Throws c10::NotImplementedError saying why when one program cannot hold them (an
// unknown group, a group of another transport, groups that do not tile the world).
ReplicaWorld plan_world(int device_index, const std::vector<std::string>& group_names);

// Raised on every replica, before anything is launched, when the replicas of one launch bring
// different programs; what() lists each replica's.
class CollectiveMismatch : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The launch id of this rank's next launch on `world`, once every replica has arrived with the
// same `executable` (its identity) in an in-process world. Throws CollectiveMismatch on every
// rank, naming `what` (the program's signature) of each, when they launch different programs,
// and c10::Error after the world's timeout when some replica does not arrive. Multi-process
// worlds skip the meeting.
int coordinate_launch(const ReplicaWorld& world, int64_t replica, const void* executable,
                      const std::string& what, std::chrono::milliseconds timeout);

// Exchanges a small host value among the replicas of an in-process world: returns every
// replica's `payload`, in replica order. `tag` separates independent exchanges (each counts its
// own calls). Throws c10::NotImplementedError for a multi-process world.
std::vector<std::string> exchange(const ReplicaWorld& world, int64_t replica,
                                  const std::string& tag, std::string payload,
                                  std::chrono::milliseconds timeout);

// This process's identity among the ranks of a group: equal for thread ranks of one process,
// different across processes (and across processes that reuse a pid on other hosts).
const std::string& process_token();

}  // namespace torchtpu::runtime
