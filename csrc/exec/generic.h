// Size-generic elementwise programs (TORCHTPU_SIZE_BUCKETS=1; device/buckets.h). An op whose
// lowering is elementwise (lowering::kElementwise) computes the same thing for every size of a
// size bucket: its program runs the lowering over the positions of the result's bucket
// (padding included: its values are unspecified, and an elementwise op computes on them
// harmlessly into the result's padding), and the call's exact shape never reaches it. Each
// tensor is read as its whole bucket when it lies in the positions' order over its whole
// storage, as one broadcast element, or else gathered (a written one scattered) through the
// call's runtime geometry (its sizes, strides and offsets: lowering::GenericSpace). One program
// per (op, dtypes, buckets, rank, argument classes) where exact programs needed one per shape
// and layout; the new tensors take the call's shape and PyTorch's layout at launch.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include "exec/call_state.h"
#include "exec/op_plan.h"

namespace torchtpu::exec {

// Whether calls of `plan`'s op may run size-generic programs (buckets on, an elementwise
// lowering, not an out= form, whose result tensors' shapes the caller chose).
bool generic_candidate(const OpPlan& plan);

// Scans the call for a size-generic program into `state` (key, parameters, arguments read as
// whole buckets or through the call's runtime geometry, state.out_sizes/out_strides the
// result's shape and layout). False when it does not fit one; `state` must then be cleared
// before scanning for an exact program.
bool scan_generic_call(const OpPlan& plan, const c10::OperatorHandle& op,
                       const torch::jit::Stack& stack, size_t first, CallState& state);

}  // namespace torchtpu::exec
