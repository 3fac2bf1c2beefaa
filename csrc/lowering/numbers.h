// Number arguments that travel at run time. Eager calls pass the values a workload varies
// from call to call (random ops' bounds, dropout's p, roll's shifts, the fused optimizers' lr:
// exec/call_state.h's is_runtime_number) as program arguments, so a new value never
// recompiles; compiled graphs pass the same arguments as literals. A lowering of such an
// argument reads it through these helpers, never through int_arg/double_arg, which would bake
// the first call's value into the program.
#pragma once

#include <vector>

#include "lowering/lowering.h"

namespace torchtpu::lowering {

// The argument as a 0-d Value of `dtype`: a runtime scalar (LArg::kScalar), a one-element
// tensor, or a literal (kConst: int, double or bool).
Value number(const LoweringContext& ctx, size_t i, ElementType dtype);

// An int-list argument whose elements are runtime values arrives as kTensorList of 0-d s64
// values (the schema says int[], so it can never be a real tensor list); a literal list as
// kConst.
bool is_runtime_list(const LoweringContext& ctx, size_t i);
size_t list_size(const LoweringContext& ctx, size_t i);
// Element `k` of an int-list argument as a 0-d s64 Value (runtime or literal).
Value list_element(const LoweringContext& ctx, size_t i, size_t k);

}  // namespace torchtpu::lowering
