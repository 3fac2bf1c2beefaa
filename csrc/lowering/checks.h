// Device-side checks (runtime/device_checks.h): XLA clamps out-of-range gather indices and drops
// out-of-range scatter updates, so a lowering that indexes also computes whether its indices
// were in range, and the program returns that beside its results; the next sync of the device
// raises the CPU kernel's error. Lowerings register checks with `check`/`check_indices`; the
// program builders (eager op, compiled graph) collect them with a CheckCollector around the
// lowering calls and turn them into one extra output (`pack_checks`).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lowering/lowering.h"

namespace torchtpu::lowering {

// TORCHTPU_INDEX_CHECKS=0 turns device-side checks off (read once: it changes the programs).
bool device_checks_enabled();

struct DeviceCheck {
  Value failed;  // i1 scalar
  Value value;   // s64 scalar: an offending index, target...; "{}" in the message
  std::string op;
  std::string message;
  bool index_error = true;  // IndexError, else RuntimeError (as the CPU kernel raises)
};

// Collects the checks that lowerings register on this thread while it lives (program builders
// lower on one thread; a nested builder gets its own collector).
class CheckCollector {
 public:
  CheckCollector();
  ~CheckCollector();
  CheckCollector(const CheckCollector&) = delete;
  CheckCollector& operator=(const CheckCollector&) = delete;
  void add(DeviceCheck c) { checks_.push_back(std::move(c)); }
  std::vector<DeviceCheck> take() { return std::move(checks_); }

 private:
  std::vector<DeviceCheck> checks_;
  CheckCollector* previous_;
};

// When `ok` (an i1 scalar) is false at run time, the device's next sync raises `message` naming
// ctx's op: an IndexError when `index_error`, else a RuntimeError; "{}" in the message becomes
// `value` (an integer scalar), if given. No-op when checks are off or nothing collects them.
void check(LoweringContext& ctx, Value ok, std::string message, bool index_error = true,
           std::optional<Value> value = std::nullopt);

// Checks lo <= idx < hi for every element of `idx` (any integer dtype), elements equal to
// `except` aside (nll_loss's ignore_index); "{}" in `message` becomes an offending value.
void check_indices(LoweringContext& ctx, Value idx, int64_t lo, int64_t hi, std::string message,
                   bool index_error = true, std::optional<int64_t> except = std::nullopt);

// The CPU's "index {} is out of bounds for dimension <dim> with size <size>" check, with
// negative indices allowed (advanced indexing, index_fill) or not (gather, scatter).
void check_dim_indices(LoweringContext& ctx, Value idx, int64_t dim, int64_t size,
                       bool allow_negative, bool index_error, const std::string& prefix = "");

// Every element of the i1 tensor `ok` is true (an i1 scalar), for `check`.
Value all_true(FunctionBuilder& b, Value ok);

// All checks of a program as one s64[2n] output: per check (failed, value).
Value pack_checks(FunctionBuilder& b, const std::vector<DeviceCheck>& checks);

}  // namespace torchtpu::lowering
