// The Python face's private module torchtpu._C. Everything user-facing lives in Python
// (torchtpu/__init__.py, torch.tpu); these are the C++ entry points it calls.
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include "aten/boxed_kernel.h"
#include "config/config.h"
#include "device/buckets.h"
#include "device/current_device.h"
#include "device/generator.h"
#include "device/storage.h"
#include "exec/executor.h"
#include "exec/fused_eager.h"
#include "exec/host_transfer.h"
#include "exec/warmup.h"
#include "lowering/lowering.h"
#include "pjrt/profiler_extension.h"
#include "profiler/profiler.h"
#include "runtime/compile.h"
#include "runtime/compile_pool.h"
#include "runtime/determinism.h"
#include "runtime/device_checks.h"
#include "runtime/disk_cache.h"
#include "runtime/fork.h"
#include "runtime/interrupt.h"
#include "runtime/launch_queue.h"
#include "runtime/local_view.h"
#include "runtime/metrics.h"
#include "runtime/program_cache.h"
#include "runtime/runtime.h"
#include "runtime/signature.h"

namespace torchtpu::device {
void register_hooks();
}

namespace torchtpu::python {
void bind_graph(pybind11::module& m);
void bind_fused(pybind11::module& m);
void add_fused_metrics(pybind11::dict& d);
}  // namespace torchtpu::python

namespace torchtpu::distributed {
void bind(pybind11::module& m);
}

namespace py = pybind11;
using namespace torchtpu;

namespace {

// Runs Python's pending signal handlers from inside a blocking wait (runtime/interrupt.h); the
// KeyboardInterrupt they raise travels as error_already_set, which torch and pybind11 restore.
void python_interrupt_check() {
  if (!Py_IsInitialized()) return;  // a wait during interpreter teardown
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// runtime::blocking_wait: a wait on another thread's progress lets go of the GIL if it holds it.
void wait_without_gil(const std::function<void()>& wait) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release no_gil;
    wait();
    return;
  }
  wait();
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torchtpu native core";
  device::register_hooks();
  aten::register_lowered_kernels();
  python::bind_graph(m);
  python::bind_fused(m);
  distributed::bind(m);

  // The importing thread is Python's main thread: the one signal handlers run on.
  runtime::set_interrupt_check(&python_interrupt_check);
  runtime::set_blocking_wait_hook(&wait_without_gil);
  m.def("_configure", &runtime::configure, py::arg("plugin_path"), py::arg("error"));
  m.def("_is_available", &runtime::is_available, py::call_guard<py::gil_scoped_release>());
  m.def("_is_initialized", &runtime::is_initialized);
  m.def("_init_error", &runtime::init_error);
  m.def(
      "_init", [] { runtime::get(); }, py::call_guard<py::gil_scoped_release>());
  m.def(
      "_device_count", [] { return runtime::device_count(); },
      py::call_guard<py::gil_scoped_release>());
  m.def("_in_bad_fork", &runtime::in_bad_fork);
  // The tpu indices this process owns (all of them unless one device per local rank applies).
  m.def(
      "_local_devices",
      [] {
        std::vector<int> own;
        runtime::Runtime& rt = runtime::get();
        for (int i = 0; i < rt.device_count(); ++i) {
          if (rt.owns_device(i)) own.push_back(i);
        }
        return own;
      },
      py::call_guard<py::gil_scoped_release>());
  m.def("_local_view", [] {
    const runtime::LocalView& v = runtime::local_view();
    return py::make_tuple(v.on, v.why);
  });
  m.def("_deferred_check_count", &runtime::deferred_check_count);
  m.def("_platform", [] { return runtime::get().platform(); });
  m.def("_plugin_path", [] { return runtime::get().plugin_path(); });
  m.def("_host_isa", &runtime::host_isa);
  m.def("_platform_version", [] { return runtime::get().client().platform_version(); });
  m.def("_device_kind", [](int i) { return runtime::get().device(i).kind(); });
  m.def("_current_device", &device::current_device);
  m.def("_set_device", &device::set_current_device);
  m.def("_other_threads_selected_a_device", &device::other_threads_selected_a_device);
  m.def("_synchronize", &exec::synchronize, py::arg("device") = -1,
        py::call_guard<py::gil_scoped_release>());
  m.def("_lowered_ops", &lowering::lowered_op_names);
  m.def("_duplicate_lowerings", &lowering::duplicate_lowerings);
  // (name, facts) of every op descriptor, facts a list of flag names ("complex", ...):
  // what the docs and the tests read instead of a list of their own.
  m.def("_op_descriptors", [] {
    std::vector<std::pair<std::string, std::vector<std::string>>> out;
    for (const lowering::OpDescriptor* d : lowering::op_descriptors()) {
      std::vector<std::string> facts;
      if (d->complex()) facts.push_back("complex");
      if (d->graph_only()) facts.push_back("graph_only");
      if (d->overwrites_self()) facts.push_back("overwrites_self");
      if (d->collective()) facts.push_back("collective");
      out.emplace_back(d->name, std::move(facts));
    }
    return out;
  });
  m.def("_program_cache_size", &exec::program_cache_size);
  // torchtpu.save_signatures / torchtpu.warmup (torchtpu/_warmup.py).
  m.def("_recorded_signatures", [] {
    py::list out;
    for (const std::string& r : exec::recorded_signatures()) out.append(py::bytes(r));
    return out;
  });
  m.def("_replay_signature", [](const py::bytes& record) {
    std::string r = record;
    py::gil_scoped_release no_gil;
    exec::replay_signature(r);
  });
  m.def("_cache_dir", &runtime::disk_cache_dir);
  // (name, default, doc) of every declared environment variable: docs/debugging.md's table and
  // torchtpu._config check themselves against it.
  m.def("_config_variables", [] {
    std::vector<std::tuple<std::string, std::string, std::string>> out;
    for (const config::Variable& v : config::variables())
      out.emplace_back(v.name, v.default_value, v.doc);
    return out;
  });

  m.def("_metrics", [] {
    {
      // Compiles and launches of ops already called count as done: finish them first (a
      // test holding compiles sees what has run so far).
      py::gil_scoped_release no_gil;
      runtime::wait_for_compiles();
      if (!runtime::compiles_held()) runtime::wait_for_launch_queues();
    }
    const runtime::Metrics& x = runtime::metrics();
    py::dict d;
    d["programs_compiled"] = x.programs_compiled.load();
    d["compile_seconds"] = x.compile_ns.load() / 1e9;
    d["cache_hits"] = x.cache_hits.load();
    d["cache_misses"] = x.cache_misses.load();
    d["program_cache_evictions"] = x.program_cache_evictions.load();
    d["recompiles"] = x.recompiles.load();
    d["modules_lowered"] = x.modules_lowered.load();
    d["graph_cache_evictions"] = x.graph_cache_evictions.load();
    d["programs_shared"] = x.programs_shared.load();
    d["programs_upgraded"] = x.programs_upgraded.load();
    d["disk_cache_hits"] = x.disk_cache_hits.load();
    d["disk_cache_misses"] = x.disk_cache_misses.load();
    d["disk_cache_signature_hits"] = x.disk_cache_signature_hits.load();
    d["disk_cache_corrupt"] = x.disk_cache_corrupt.load();
    d["disk_cache_writes"] = x.disk_cache_writes.load();
    d["disk_cache_signature_writes"] = x.disk_cache_signature_writes.load();
    d["disk_cache_evictions"] = x.disk_cache_evictions.load();
    d["disk_cache_load_failures"] = x.disk_cache_load_failures.load();
    d["executions"] = x.executions.load();
    d["launches_queued"] = x.launches_queued.load();
    d["h2d_transfers"] = x.h2d_transfers.load();
    d["h2d_bytes"] = x.h2d_bytes.load();
    d["d2h_transfers"] = x.d2h_transfers.load();
    d["d2h_bytes"] = x.d2h_bytes.load();
    d["d2d_transfers"] = x.d2d_transfers.load();
    d["host_syncs"] = x.host_syncs.load();
    d["cpu_fallbacks"] = x.cpu_fallbacks.load();
    d["collectives_in_program"] = x.collectives_in_program.load();
    d["collective_host_bytes"] = x.collective_host_bytes.load();
    d["deterministic_programs"] = x.deterministic_programs.load();
    d["deterministic_option_programs"] = x.deterministic_option_programs.load();
    py::dict by_op;
    for (const auto& [op, n] : runtime::fallbacks_by_op()) by_op[py::str(op)] = n;
    d["cpu_fallbacks_by_op"] = by_op;
    python::add_fused_metrics(d);
    return d;
  });
  m.def("_reset_metrics", [] {
    runtime::reset_metrics();
    runtime::clear_recompile_reasons();
    exec::fused::reset_stats();
  });
  m.def("_recompile_reasons", &runtime::recompile_reasons);
  // A compiled graph's bounded cache (torchtpu/_dynamo.py) dropped a specialization.
  m.def("_count_graph_cache_eviction", [] { runtime::metrics().graph_cache_evictions++; });
  // Compiles off the critical path (runtime/compile_pool.h): whether they are on, and test hooks.
  m.def("_async_compile", &runtime::async_compile);
  m.def("_hold_compiles", &runtime::hold_compiles, py::arg("hold"));
  m.def("_finish_background_compiles", [] {
    py::gil_scoped_release released;
    runtime::finish_background_compiles();
  });
  // torchtpu's last Python atexit hook: no compile or launch may still run inside the plugin
  // when exit() destroys its statics (runtime/compile_pool.h).
  m.def(
      "_finish_async_work_for_exit",
      [] {
        // A forked child has none of the parent's threads to wait for.
        if (!runtime::is_initialized() || runtime::in_bad_fork()) return;
        runtime::finish_compiles_for_exit();
        runtime::wait_for_launch_queues();
      },
      py::call_guard<py::gil_scoped_release>());
  m.def("_fail_next_compiles", &runtime::fail_next_compiles, py::arg("n") = 1);
  // torch.use_deterministic_algorithms on XLA (runtime/determinism.h): the plan for this
  // process's platform, and a test hook that plans as if on `platform`, probing `names`.
  m.def("_determinism_plan", [] {
    const runtime::DeterminismPlan& p = runtime::determinism_plan();
    const char* route = p.route == runtime::DeterminismRoute::kNative          ? "native"
                        : p.route == runtime::DeterminismRoute::kCompileOption ? "compile_option"
                                                                               : "unavailable";
    py::dict d;
    d["route"] = route;
    d["platform"] = p.platform;
    d["option"] = p.option;
    return d;
  });
  // The plugin's PJRT extensions (type numbers, in chain order) and whether one is the profiler
  // extension, whose device timestamps torch.profiler then shows (profiler/kineto_session.cpp).
  m.def("_plugin_extensions", [] {
    std::shared_ptr<pjrt::Plugin> plugin = pjrt::Plugin::load(runtime::get().plugin_path());
    const PJRT_Extension_Base* chain = plugin->api()->extension_start;
    py::dict d;
    d["types"] = pjrt::extension_types(chain);
    d["profiler"] = pjrt::find_profiler_api(chain) != nullptr;
    return d;
  });
  m.def("_set_determinism_test_platform", &runtime::set_determinism_test_platform,
        py::arg("platform"), py::arg("names") = std::vector<std::string>());
  // The serialized CompileOptionsProto a program gets: portable, with these overrides.
  m.def("_portable_compile_options", [](const std::vector<std::string>& overrides) {
    std::vector<pjrt::OptionOverride> o;
    for (const std::string& name : overrides) o.push_back({name, true});
    return py::bytes(pjrt::portable_compile_options(o));
  });
  m.def("_compiles_in_flight", &runtime::compiles_in_flight);
  // Whether a tpu tensor's data is still to come: its program is compiling or queued.
  m.def("_is_pending", [](const at::Tensor& t) {
    device::BufferPtr b = device::handle_of(t)->buffer();
    return b != nullptr && !b->ready();
  });
  m.def("_kineto_profiler_registered", &profiler::kineto_profiler_registered);
  // The plugin's PJRT_Plugin_Attributes (e.g. the StableHLO versions it reads).
  m.def("_plugin_attributes", [] {
    py::dict d;
    for (const auto& [k, v] : runtime::get().client().plugin()->attributes()) {
      d[py::str(k)] = std::visit([](const auto& x) { return py::cast(x); }, v);
    }
    return d;
  });

  m.def("_memory_allocated", &device::memory_allocated);
  m.def("_max_memory_allocated", &device::max_memory_allocated);
  m.def("_reset_peak_memory", &device::reset_peak_memory);
  m.def("_buffer_memory_allocated", &device::buffer_memory_allocated);
  m.def("_max_buffer_memory_allocated", &device::max_buffer_memory_allocated);
  m.def("_size_buckets", [] { return runtime::is_initialized() && device::size_buckets(); });
  m.def("_device_memory_stats", [](int i) {
    pjrt::MemoryStats s = runtime::get().device(i).memory_stats();
    py::dict d;
    d["bytes_in_use"] = s.bytes_in_use;
    d["peak_bytes_in_use"] = s.peak_bytes_in_use;
    d["bytes_limit"] = s.bytes_limit;
    return d;
  });

  // What the PJRT client is (or would be) created with for a plugin path: for tests of the
  // environment's mapping onto the plugins' create options without that plugin.
  m.def("_client_options", [](const std::string& path) {
    py::dict d;
    try {
      for (const auto& [name, value] : runtime::client_options(path)) {
        std::visit([&](const auto& v) { d[py::str(name)] = v; }, value);
      }
    } catch (const std::invalid_argument& e) {
      throw py::value_error(e.what());
    }
    return d;
  });

  m.def("_default_generator", [](int index) {
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(
        device::default_generator(static_cast<c10::DeviceIndex>(index))));
  });
}
