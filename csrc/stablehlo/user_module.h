// A StableHLO module written by a user or exported by JAX, made ready to be called from a
// program we build (torchtpu.stablehlo_op / torchtpu.jax_op): its functions are renamed with a
// prefix of their own so several modules (or one twice) fit in one program, its entry function
// becomes private, and its entry signature gives the types the caller must pass and gets back.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stablehlo/types.h"

namespace torchtpu::shlo {

struct UserModule {
  std::vector<TensorType> arg_types;
  std::vector<TensorType> result_types;
  std::string entry;      // the entry function's new symbol name (without '@')
  std::string functions;  // every func.func of the module, renamed, locations removed
};

// Reads `text`; the entry function is @main, or the module's only public function. Symbols get
// the prefix "<prefix>_". Throws std::invalid_argument saying what it could not read (no
// function, dynamic shapes, an element type StableHLO tensors of torch cannot hold, ...).
UserModule parse_user_module(std::string_view text, const std::string& prefix);

// Adds func.func definitions (MLIR text) to the module being built on this thread, once per
// `key`: the next ModuleBuilder::str() on this thread prints them after @main. Constructing a
// ModuleBuilder starts an empty set (stablehlo/builder.cpp).
void add_module_functions(const std::string& key, const std::string& text);

// "tensor<2x3xf32>", "tensor<bf16>", "tensor<4xcomplex<f32>>"; throws std::invalid_argument.
TensorType parse_tensor_type(std::string_view text);

}  // namespace torchtpu::shlo
