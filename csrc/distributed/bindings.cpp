// torchtpu._C's entry point for torchtpu/distributed: wrap a host c10d backend (ProcessGroupGloo,
// made in Python over the group's store) into the tpu backend. Torch's own pybind types for
// c10d::Backend (torch._C._distributed_c10d) carry the objects across.
#include <torch/csrc/utils/pybind.h>

#include "distributed/c10d_kv_store.h"
#include "distributed/tpu_backend.h"
#include "runtime/collective_world.h"
#include "runtime/runtime.h"

namespace torchtpu::distributed {
namespace {

// The plugin's side of the key-value callbacks, for tests: each call goes through the PJRT
// callbacks as a plugin would make it (pjrt::call_kv_*), onto a C10dKvStore. A callback error
// becomes a RuntimeError carrying its code and message; try_get's NOT_FOUND is None.
class KvCallbacksForTest {
 public:
  KvCallbacksForTest(const c10::intrusive_ptr<c10d::Store>& store, const std::string& prefix)
      : store_(store, prefix) {}

  pybind11::bytes get(const std::string& key, int timeout_ms) {
    pjrt::KvCallOutcome o;
    {
      pybind11::gil_scoped_release no_gil;
      o = pjrt::call_kv_get(store_, key, timeout_ms);
    }
    return pybind11::bytes(value_of(o));
  }
  pybind11::object try_get(const std::string& key) {
    pjrt::KvCallOutcome o;
    {
      pybind11::gil_scoped_release no_gil;
      o = pjrt::call_kv_try_get(store_, key);
    }
    if (o.code == PJRT_Error_Code_NOT_FOUND) return pybind11::none();
    return pybind11::bytes(value_of(o));
  }
  void put(const std::string& key, const std::string& value) {
    pybind11::gil_scoped_release no_gil;
    value_of(pjrt::call_kv_put(store_, key, value));
  }

 private:
  static std::string value_of(const pjrt::KvCallOutcome& o) {
    TORCH_CHECK(o.ok(), "PJRT error code ", static_cast<int>(o.code), ": ", o.message);
    return o.value.value_or(std::string());
  }

  C10dKvStore store_;
};

}  // namespace

void bind(pybind11::module& m) {
  // With `store`, the ranks pick the group's transport together (select_transport): every rank of
  // the group must call this at once, as torch calls a backend's creator.
  m.def(
      "_tpu_backend",
      [](const c10::intrusive_ptr<c10d::Backend>& host, int rank, int size,
         const c10::intrusive_ptr<c10d::Store>& store, const std::string& group_name,
         std::vector<int64_t> global_ranks, int64_t timeout_ms) {
        std::unique_ptr<XlaTransport> xla;
        std::string why = "no store to choose a transport with";
        if (store) {
          pybind11::gil_scoped_release no_gil;
          xla = select_transport(store, rank, size, group_name, std::move(global_ranks),
                                 std::chrono::milliseconds(timeout_ms), &why);
        }
        return c10::intrusive_ptr<c10d::Backend>(
            c10::make_intrusive<TpuBackend>(host, rank, size, std::move(xla), why));
      },
      pybind11::arg("host_backend"), pybind11::arg("rank"), pybind11::arg("size"),
      pybind11::arg("store") = c10::intrusive_ptr<c10d::Store>(), pybind11::arg("group_name") = "",
      pybind11::arg("global_ranks") = std::vector<int64_t>{},
      pybind11::arg("timeout_ms") = int64_t{30 * 60 * 1000});
  // After rendezvous, before the device is first used: the PJRT client, when made, joins one
  // multi-process world through `store` (its key-value store, under "pjrt/") as process `rank`
  // of `size`. (joined, why not).
  m.def("_pjrt_world_join", [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
    std::string why = runtime::process_world_blocker();
    if (!why.empty()) return std::make_pair(false, why);  // no store traffic
    pybind11::gil_scoped_release no_gil;
    // Every process names the world as rank 0 does.
    if (rank == 0) {
      const std::string id = runtime::process_token();
      store->set("pjrt/world_id", std::vector<uint8_t>(id.begin(), id.end()));
    }
    const std::vector<uint8_t> id = store->get("pjrt/world_id");
    const bool joined =
        runtime::configure_process_world(std::make_shared<C10dKvStore>(store, "pjrt/kv"),
                                         std::string(id.begin(), id.end()), rank, size, &why);
    return std::make_pair(joined, why);
  });
  m.def("_pjrt_world_blocker", &runtime::process_world_blocker);
  pybind11::class_<KvCallbacksForTest>(m, "_KvCallbacksForTest")
      .def(pybind11::init<const c10::intrusive_ptr<c10d::Store>&, const std::string&>())
      .def("get", &KvCallbacksForTest::get)
      .def("try_get", &KvCallbacksForTest::try_get)
      .def("put", &KvCallbacksForTest::put);
  // ("xla" | "gloo", why) of a tpu backend.
  m.def("_tpu_backend_transport", [](const c10::intrusive_ptr<c10d::Backend>& backend) {
    auto* tpu = dynamic_cast<TpuBackend*>(backend.get());
    TORCH_CHECK(tpu != nullptr, "not a tpu backend: ", backend->getBackendName());
    std::string detail = tpu->transport_reason();
    if (const XlaTransport* x = tpu->xla_transport()) detail = x->describe() + ": " + detail;
    return std::make_pair(tpu->transport(), detail);
  });
  // Whether one program on tpu:`device_index` can hold collectives of the process groups named
  // `group_names` (as the rank on that device names them): "" when it can, else why not
  // (runtime::plan_world's reason). Compiled graphs ask before lowering their collectives.
  m.def("_plan_collectives",
        [](int device_index, const std::vector<std::string>& group_names) -> std::string {
          TORCH_CHECK(!group_names.empty(), "torchtpu: _plan_collectives needs a group name");
          try {
            runtime::plan_world(device_index, group_names);
          } catch (const c10::NotImplementedError& e) {
            return e.what_without_backtrace();
          }
          return std::string();
        });
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
