// Fused eager's Python face (torchtpu.set_eager_mode, mark_step, its metrics) and the Python
// locations the engine keeps per recorded op, so that an error found when a region runs names
// the line that called the op (exec/fused_eager.h).
#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "exec/fused_eager.h"

namespace py = pybind11;

namespace torchtpu::python {
namespace {

namespace fused = exec::fused;

// Locations by (code object, line), each formatted once. Capturing runs under the GIL;
// describing may run without it (a region launched on a worker thread), hence the mutex.
struct Locations {
  std::mutex mutex;
  std::vector<std::string> texts;
  // GIL-protected. Code objects are held (one reference each, never dropped) so that an id
  // never names a freed object whose address a new one reuses; bounded by kMax.
  std::unordered_map<PyCodeObject*, bool> internal;
  std::unordered_map<PyCodeObject*, std::unordered_map<int, int64_t>> ids;
  size_t count = 0;
  std::vector<std::string> internal_dirs;  // torch's and torchtpu's folders, the stdlib's
};

constexpr size_t kMax = 1 << 20;

Locations& locations() {
  static auto* l = new Locations();  // leaked: read at exit by late launches
  return *l;
}

std::string utf8(PyObject* s) {
  const char* c = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : nullptr;
  if (c == nullptr) {
    PyErr_Clear();
    return std::string();
  }
  return c;
}

// Whether a frame of `code` belongs to torch, torchtpu or Python itself: the user's line is
// the first frame outside them.
bool is_internal(Locations& l, PyCodeObject* code) {
  auto it = l.internal.find(code);
  if (it != l.internal.end()) return it->second;
  std::string file = utf8(code->co_filename);
  bool internal = file.empty() || file[0] == '<';
  for (const std::string& dir : l.internal_dirs) {
    internal = internal || file.compare(0, dir.size(), dir) == 0;
  }
  if (l.internal.size() < kMax) {
    Py_INCREF(code);
    l.internal.emplace(code, internal);
  }
  return internal;
}

int64_t id_of(Locations& l, PyCodeObject* code, int line) {
  auto& by_line = l.ids[code];
  auto it = by_line.find(line);
  if (it != by_line.end()) return it->second;
  if (l.count >= kMax) return -1;
  if (by_line.empty()) Py_INCREF(code);
  std::string text =
      utf8(code->co_filename) + ":" + std::to_string(line) + " in " + utf8(code->co_name);
  std::lock_guard<std::mutex> g(l.mutex);
  const auto id = static_cast<int64_t>(l.texts.size());
  l.texts.push_back(std::move(text));
  by_line.emplace(line, id);
  ++l.count;
  return id;
}

int64_t capture() {
  // A thread that never ran Python (or an interpreter going away) has no Python caller.
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return -1;
  PyGILState_STATE gil = PyGILState_Ensure();
  Locations& l = locations();
  int64_t id = -1;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    if (!is_internal(l, code)) id = id_of(l, code, PyFrame_GetLineNumber(frame));
    Py_DECREF(code);
    if (id >= 0) break;
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  PyGILState_Release(gil);
  return id;
}

std::string describe(int64_t id) {
  Locations& l = locations();
  std::lock_guard<std::mutex> g(l.mutex);
  return id >= 0 && static_cast<size_t>(id) < l.texts.size() ? l.texts[static_cast<size_t>(id)]
                                                             : std::string();
}

std::string folder_of(const char* module) {
  py::object file = py::module::import(module).attr("__file__");
  std::string f = file.cast<std::string>();
  return f.substr(0, f.rfind('/') + 1);
}

}  // namespace

void bind_fused(py::module& m) {
  Locations& l = locations();
  l.internal_dirs.push_back(folder_of("torch"));
  l.internal_dirs.push_back(folder_of("torchtpu"));
  l.internal_dirs.push_back(folder_of("contextlib"));  // the standard library's folder
  fused::set_location_hooks(&capture, &describe);

  m.def("_fused_enabled", &fused::enabled);
  m.def("_fused_set_enabled", &fused::set_enabled, py::arg("on"),
        py::call_guard<py::gil_scoped_release>());
  // mark_step(): the device's pending region runs now (-1: the current device's and those this
  // thread recorded on).
  m.def(
      "_fused_flush", [](int device) { fused::flush(device, fused::Cause::kSync); },
      py::arg("device") = -1, py::call_guard<py::gil_scoped_release>());
  m.def("_fused_set_launch_log", &fused::set_launch_log, py::arg("on"));
  m.def("_fused_launch_log", &fused::launch_log);
  m.def("_fused_fail_builds_for_tests", &fused::fail_builds_for_tests, py::arg("n"));
}

// The fused eager counters as torchtpu.metrics() shows them.
void add_fused_metrics(py::dict& d) {
  fused::Stats s = fused::stats();
  d["fused_programs"] = s.programs;
  d["fused_ops"] = s.ops;
  d["fused_ops_replayed"] = s.replayed_ops;
  py::dict causes;
  for (int c = 0; c <= static_cast<int>(fused::Cause::kCount); ++c) {
    causes[py::str(fused::cause_name(static_cast<fused::Cause>(c)))] =
        s.flushes[static_cast<size_t>(c)];
  }
  d["fused_flushes_by_cause"] = causes;
}

}  // namespace torchtpu::python
