// Eager execution of one aten op on tpu: signature -> program cache -> asynchronous launch.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>
#include <string>

#include "device/storage.h"
#include "exec/call_state.h"
#include "exec/op_plan.h"
#include "exec/program.h"

namespace torchtpu::exec {

// An eager op's program (exec/program.h) and how its returns map onto the op's schema.
struct OpEntry : ProgramEntry {
  // Set when the lowering declined this signature (why): it runs on CPU.
  std::optional<std::string> fallback;
  // Functional ops that return Tensor[] (_fused_adam, _foreach_*): per schema return, the
  // number of the program's outputs that form its list, or -1 for a single tensor. Empty when
  // every return is a tensor, so the outputs are the returns.
  std::vector<int> return_lists;
  // A size-generic program (exec/generic.h): its new tensors take each call's shape. Fused
  // eager never records one (its out_types are whole buckets).
  bool generic = false;
  // A size-generic signature that must take the exact path instead: PyTorch lays its result out
  // other than contiguously, or its program has device-side checks (which would read a
  // bucket's padding).
  bool exact_only = false;
  // The lowered op's result types and, for a functional op, its returns' layouts (empty:
  // contiguous): what fused eager (exec/fused_*.h) needs to record the call as a node of a
  // larger program. Unset in an entry loaded from a recipe.
  std::vector<shlo::TensorType> out_types;
  std::vector<Layout> layouts;
};

// Runs `op` (whose `plan` has a lowering) natively on the stack: signature -> program cache ->
// asynchronous launch. Returns why it cannot when this call must run elsewhere (no meta kernel,
// or the lowering declined the signature): the caller (aten/boxed_kernel.cpp) then runs the
// counted CPU fallback, which is a registration concern, not the engine's.
[[nodiscard]] std::optional<std::string> run_native(const OpPlan& plan,
                                                    const c10::OperatorHandle& op,
                                                    torch::jit::Stack* stack);

// What fused eager records instead of launching: validates the call (aliasing rules, PyTorch's
// meta kernels, out= sizing) and lowers its one-op program over `state` (the call's scan, with
// views) to learn its outputs, generator draws and device checks, without compiling anything.
// Null when out= arguments were resized (scan again, with `attempt` 1); an entry with
// `fallback` when the CPU must run it.
std::shared_ptr<OpEntry> describe_native(const OpPlan& plan, const c10::OperatorHandle& op,
                                         torch::jit::Stack* stack, CallState& state, int attempt);

// The dispatcher's handle of `name` ("aten::copy_") and `overload`, looked up once.
const c10::OperatorHandle& op_handle(const char* name, const char* overload);

// A new tpu tensor of `sizes` and `strides` (empty: contiguous) over a new storage owning
// `buffer`, whose dims are `buffer_dims`.
at::Tensor wrap_buffer(device::BufferPtr buffer, std::vector<int64_t> buffer_dims,
                       c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                       int device_index);
// A new contiguous tpu tensor of `sizes` owning `buffer`, whose dims are
// device::buffer_dims(sizes).
at::Tensor wrap_buffer(device::BufferPtr buffer, c10::IntArrayRef sizes, c10::ScalarType dtype,
                       int device_index);

// Number of entries in the in-memory program cache (for tests and metrics).
size_t program_cache_size();

}  // namespace torchtpu::exec
