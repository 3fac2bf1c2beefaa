// The plugin's own log lines (absl: "E0000 00:00:... file.cc:578] ...") around one PJRT call.
// A disk-cache entry that does not load makes the XLA plugin log a parse error per bad field,
// and a damaged executable can print a stack trace: many lines for one event that torchtpu
// handles (it recompiles) and reports in one line of its own. So the call runs with file
// descriptor 2 pointed at a temporary file. If it succeeds, everything captured is written
// back; if it fails, what came before the plugin's first log line is written back and the rest
// (that line and the trace continuing it) is dropped. Another thread's stderr output inside
// that window (milliseconds) is delayed, and after such a log line dropped too.
//
// Torch-free; one capture at a time per process (a mutex), so concurrent loads take turns.
#pragma once

#include <functional>

namespace torchtpu::runtime {

// Runs `fn` with stderr captured as above; `fn`'s exception propagates.
void without_plugin_log_on_failure(const std::function<void()>& fn);

}  // namespace torchtpu::runtime
