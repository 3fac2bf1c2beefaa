// Recipes of the one engine (runtime/compile.h): what a built program's launch needs besides its
// executable (argument order, where outputs land, device checks, how far it draws the
// generators), recorded on disk under its typed signature so a later process skips lowering.
// Eager ops (aten/executor.cpp) add their returns' grouping; compiled graphs key theirs by the
// graph's structure, hashed here.
#pragma once

#include <string>

#include "exec/program.h"
#include "runtime/compile.h"

namespace torchtpu::exec {

void write_entry(runtime::RecipeWriter& w, const ProgramEntry& e);
// False when the recorded entry does not fit a call with `num_params` parameters and
// `num_inputs` graph inputs (then the caller builds as usual); throws std::runtime_error on a
// short record.
bool read_entry(runtime::RecipeReader& r, ProgramEntry& e, size_t num_params, size_t num_inputs);

// A hex SHA-256 of everything in `spec` that decides its program: node ops, arguments (graph
// inputs, other nodes' outputs, constants bit for bit), result types, returns and the engine's
// flags. Not the graph's name, which differs from process to process.
std::string structure_hash(const ProgramSpec& spec);

}  // namespace torchtpu::exec
