// torchtpu._C's entry point for torchtpu/distributed: wrap a host c10d backend (ProcessGroupGloo,
// made in Python over the group's store) into the tpu backend. Torch's own pybind types for
// c10d::Backend (torch._C._distributed_c10d) carry the objects across.
#include <torch/csrc/utils/pybind.h>

#include "distributed/tpu_backend.h"

namespace torchtpu::distributed {

void bind(pybind11::module& m) {
  m.def(
      "_tpu_backend",
      [](const c10::intrusive_ptr<c10d::Backend>& host, int rank, int size) {
        return c10::intrusive_ptr<c10d::Backend>(c10::make_intrusive<TpuBackend>(host, rank, size));
      },
      pybind11::arg("host_backend"), pybind11::arg("rank"), pybind11::arg("size"));
  // Where the staged collectives of a tpu backend spent their time so far (benchmarks).
  m.def("_tpu_backend_staging_stats", [](const c10::intrusive_ptr<c10d::Backend>& backend) {
    auto* tpu = dynamic_cast<TpuBackend*>(backend.get());
    TORCH_CHECK(tpu != nullptr, "not a tpu backend: ", backend->getBackendName());
    const StagingStats& s = tpu->staging_stats();
    pybind11::dict d;
    d["collectives"] = s.collectives.load();
    d["to_host_ns"] = s.to_host_ns.load();
    d["to_host_bytes"] = s.to_host_bytes.load();
    d["host_wait_ns"] = s.host_wait_ns.load();
    d["to_device_ns"] = s.to_device_ns.load();
    d["to_device_bytes"] = s.to_device_bytes.load();
    return d;
  });
}

}  // namespace torchtpu::distributed
