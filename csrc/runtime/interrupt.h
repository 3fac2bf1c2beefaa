// Blocking waits that Ctrl-C can interrupt. The host blocks (in .cpu(), .item(), synchronize())
// with the GIL released, so Python's SIGINT handler only runs once the wait returns: after all
// queued work has drained, which can be minutes. Waits on the thread that installed the check
// (the importing, i.e. main, thread, the only one Python delivers signals to) wake every few
// milliseconds and let pending signal handlers run; KeyboardInterrupt propagates from there
// while the queued work carries on, so the process stays usable.
//
// Torch-free: the Python bindings install the check (PyErr_CheckSignals under the GIL).
#pragma once

#include "pjrt/pjrt.h"

namespace torchtpu::runtime {

// Runs pending signal handlers; throws (an exception carrying the Python error) when one
// raised. Installed once by the bindings; `this` thread becomes the interruptible one.
using InterruptCheck = void (*)();
void set_interrupt_check(InterruptCheck check);

// Whether waits on this thread poll for signals (a check is installed and this is its thread).
bool interruptible_here();

// Calls the installed check (no-op when none, or off its thread).
void check_interrupt();

// On the interruptible thread: until `event` is ready, running signal handlers meanwhile (its
// error, if any, is left for the caller's await). Elsewhere a no-op: the caller's await waits.
void wait_ready(pjrt::Event& event);

// The same for a pending buffer (its program still compiling or queued) until it resolves or
// fails; the caller's next use of the buffer reports a failure.
void wait_resolved(const pjrt::Buffer& buffer);

}  // namespace torchtpu::runtime
