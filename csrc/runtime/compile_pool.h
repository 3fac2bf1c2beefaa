// The compile pool: an eager op that misses the program cache lowers and prints its module on
// the calling thread (so its errors stay synchronous) and hands the XLA compile to these
// threads; the op returns at once with results that wait for it (runtime/launch_queue.h), and
// independent ops compile in parallel while the host keeps enqueuing.
#pragma once

#include <cstddef>
#include <functional>

namespace torchtpu::runtime {

// Whether misses compile on the pool: TORCHTPU_ASYNC_COMPILE (default on), off under
// TPU_LAUNCH_BLOCKING=1 (debugging wants every error at its op). Read once.
bool async_compile();

// Runs `task` (which must not throw) on one of TORCHTPU_COMPILE_THREADS threads (default: the
// machine's hardware concurrency), in submission order as threads free up.
void submit_compile(std::function<void()> task);

// Work that only makes later runs faster (a hot light program's full-effort compile): runs on
// the pool when no compile is queued, is dropped at exit instead of delaying it, and is not
// run at all when compiles are synchronous. wait_for_compiles waits for it only once started.
void submit_background_compile(std::function<void()> task);

// Starts the queued background work now, without waiting for a quiet pool, and returns once
// it and every foreground compile are done (torchtpu.finish_background_compiles: a benchmark
// that wants the steady state at once, a test of the upgrade).
void finish_background_compiles();

// Test hook: while held, queued compiles do not start, so a test can act on results whose
// programs are certainly still compiling. Reading such a result waits until released.
void hold_compiles(bool hold);

bool compiles_held();

// Compiles queued or running.
size_t compiles_in_flight();

// Blocks until no compile is queued (unless held) or running: at process exit no thread may
// still be inside the plugin while its static destructors run, and metrics count every compile
// of the ops launched so far.
void wait_for_compiles();

// At interpreter exit (torchtpu's Python atexit hook, before any C++ static destructor runs):
// releases held compiles, waits for every queued and running one, and makes later submissions
// compile on the calling thread, so no pool thread is inside the plugin's compiler once exit()
// starts destroying its statics. The drain this file registers with std::atexit runs too late
// for that: it runs after the statics constructed since it was registered (LLVM's among them,
// created by the first compile) are already gone, and a compile still running then died with
// "LLVM ERROR" (SIGABRT) or SIGSEGV (issue 32).
void finish_compiles_for_exit();

}  // namespace torchtpu::runtime
