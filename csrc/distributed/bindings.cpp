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
}

}  // namespace torchtpu::distributed
