// Recorded signatures, replayed at startup (torchtpu.save_signatures / torchtpu.warmup): a
// service pays its compiles (or disk loads) before traffic, not at its first requests.
//
// Each eager program built in this process records the call that built it: the op and, per
// argument, what decides the program (a tensor's dtype, sizes, strides, storage offset, its
// storage's size and buffer layout, which arguments share a storage) plus the host values of
// other arguments. Replaying a record calls the op on zero-filled tensors of that layout, so the
// same signature reaches the program cache, which compiles it or loads it from disk.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>
#include <vector>

namespace torchtpu::exec {

// Records the call of `op` on stack[first ...] (once per signature key; bounded). Calls with an
// argument kind replay cannot rebuild are left out.
void record_signature(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first,
                      const std::string& key);

// The records so far, in the order their programs were built.
std::vector<std::string> recorded_signatures();

// Rebuilds the call of one record and runs it natively. Throws c10::Error when the record is
// malformed or names an unknown op, or when the op raises.
void replay_signature(const std::string& record);

}  // namespace torchtpu::exec
