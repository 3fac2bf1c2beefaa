// The typed signature (runtime/signature.h) of a call that missed a program cache, built from its
// scanned CallState: an eager op's schema arguments, or a compiled graph's inputs.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include <string>
#include <vector>

#include "exec/call_state.h"
#include "runtime/signature.h"

namespace torchtpu::exec {

// `state` scanned from stack[first ...] (with or without views).
runtime::Signature eager_signature(const std::string& op, const c10::FunctionSchema& schema,
                                   const CallState& state, const torch::jit::Stack& stack,
                                   size_t first);
// `structure`: the graph's structure hash; `name`: its name in this process (for messages).
runtime::Signature graph_signature(const std::string& structure, const std::string& name,
                                   const CallState& state, const std::vector<at::Tensor>& inputs);

}  // namespace torchtpu::exec
