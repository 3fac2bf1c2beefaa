// The in-program transport of the tpu backend: each collective is one XLA program, compiled for
// one replica per rank of the group (the group's devices, in group rank order) and launched by
// every rank on its own device (runtime/collective_world.h: shared executable, launch id, the
// ranks' meeting). Its results stay on the device; nothing crosses host memory.
//
// The program comes from the lowering table (lowering/collectives.cpp) through the one engine
// (exec/program.h), as a small graph over the call's tensors: views are read and written in
// place inside the program, and it is cached by (op, tensors' types and views, reduce op and
// other structure, the group's devices), shared by the group's ranks of this process.
//
// Chosen per group by select_transport() when every rank's device belongs to one PJRT world:
// today the devices of this process's client (ranks as threads, each on its own device, as the
// XLA CPU plugin's devices allow); one world across processes needs the plugin's multi-process
// client (distributed/pjrt_world.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "runtime/collective_world.h"

namespace torchtpu::distributed {

class XlaTransport {
 public:
  XlaTransport(std::string group_name, runtime::GroupLayout layout, int device_index);
  ~XlaTransport();

  const runtime::GroupLayout& layout() const { return layout_; }
  int device_index() const { return device_index_; }
  std::string describe() const;  // "devices [0, 1, 2, 3] of this process's PJRT client"

  // Whether this transport runs a collective over tensors of `dtype` (else the backend stages
  // it through the host; complex broadcast and reduce, for instance).
  bool supports(c10::ScalarType dtype, c10d::OpType op) const;

  c10::intrusive_ptr<c10d::Work> allreduce(const std::vector<at::Tensor>& tensors,
                                           const c10d::ReduceOp& op);
  c10::intrusive_ptr<c10d::Work> broadcast(const std::vector<at::Tensor>& tensors, int root);
  c10::intrusive_ptr<c10d::Work> reduce(const std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOp& op, int root);
  // output = the group's inputs concatenated along dim 0 (any output shape of that many elements).
  c10::intrusive_ptr<c10d::Work> allgather_into(const std::vector<at::Tensor>& outputs,
                                                const std::vector<at::Tensor>& inputs);
  // outputs[i][r] = rank r's inputs[i].
  c10::intrusive_ptr<c10d::Work> allgather(const std::vector<std::vector<at::Tensor>>& outputs,
                                           const std::vector<at::Tensor>& inputs);
  c10::intrusive_ptr<c10d::Work> reduce_scatter_from(const std::vector<at::Tensor>& outputs,
                                                     const std::vector<at::Tensor>& inputs,
                                                     const c10d::ReduceOp& op);
  // outputs[i] = the reduction of every rank's inputs[i][my rank].
  c10::intrusive_ptr<c10d::Work> reduce_scatter(const std::vector<at::Tensor>& outputs,
                                                const std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceOp& op);
  c10::intrusive_ptr<c10d::Work> alltoall_single(at::Tensor& output, const at::Tensor& input,
                                                 const std::vector<int64_t>& output_splits,
                                                 const std::vector<int64_t>& input_splits);
  c10::intrusive_ptr<c10d::Work> alltoall(const std::vector<at::Tensor>& outputs,
                                          const std::vector<at::Tensor>& inputs);
  // outputs[i] on group rank `root` = every rank's inputs[i]; the others' stay as they were.
  c10::intrusive_ptr<c10d::Work> gather(const std::vector<std::vector<at::Tensor>>& outputs,
                                        const std::vector<at::Tensor>& inputs, int root);
  // outputs[i] = root's inputs[i][my rank] (inputs are given on the root only).
  c10::intrusive_ptr<c10d::Work> scatter(const std::vector<at::Tensor>& outputs,
                                         const std::vector<std::vector<at::Tensor>>& inputs,
                                         int root);
  // One program over this rank and `peer` (both group ranks): `tensors` of the sender go to the
  // receiver's. Between start_coalescing and end_coalescing they wait, and run then in an order
  // every rank derives alike, so a batch (batch_isend_irecv) cannot deadlock.
  c10::intrusive_ptr<c10d::Work> send(const std::vector<at::Tensor>& tensors, int peer);
  c10::intrusive_ptr<c10d::Work> recv(const std::vector<at::Tensor>& tensors, int peer);
  // A one-element all-reduce every rank waits for, after its own device work.
  c10::intrusive_ptr<c10d::Work> barrier();

  void start_coalescing();
  // The deferred send/recv, run now; Works of the other collectives of the batch ran already.
  std::vector<c10::intrusive_ptr<c10d::Work>> end_coalescing();

 private:
  struct PeerOp {
    std::vector<at::Tensor> tensors;
    int peer = 0;
    bool send = false;
    size_t order = 0;  // its place among this rank's ops with `peer`
  };
  c10::intrusive_ptr<c10d::Work> run_p2p(const PeerOp& op);
  std::shared_ptr<const runtime::ReplicaWorld> pair_world(int peer) const;

  std::string name_;
  runtime::GroupLayout layout_;
  int device_index_;
  std::shared_ptr<const runtime::ReplicaWorld> world_;
  bool coalescing_ = false;
  std::vector<PeerOp> deferred_;
  std::map<int, size_t> peer_ops_;  // per peer: ops deferred in this batch so far
};

// The transport of a new group: exchanges (process, device) of every rank through `store`
// (all ranks of the group call this at once, as they create the group) and returns an
// XlaTransport when the ranks' devices are distinct devices of one PJRT world, else null with
// `*why` saying why the group stages through the host. `global_ranks`: the group's ranks in the
// default group (empty: the default group itself).
std::unique_ptr<XlaTransport> select_transport(const c10::intrusive_ptr<c10d::Store>& store,
                                               int rank, int size, const std::string& group_name,
                                               std::vector<int64_t> global_ranks,
                                               std::chrono::milliseconds timeout, std::string* why);

}  // namespace torchtpu::distributed
