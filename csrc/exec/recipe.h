// Recipes of the one engine (runtime/compile.h): what a built program's launch needs besides its
// executable (argument order, where outputs land, device checks, how far it draws the
// generators), recorded on disk under its typed signature so a later process skips lowering.
// Eager ops (exec/executor.cpp) add their returns' grouping; compiled graphs key theirs by the
// graph's structure, hashed here.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "exec/program.h"
#include "runtime/compile.h"

namespace torchtpu::exec {

// The recipe key (runtime::recipe_key) of a call: `what` ("eager|" op, "graph|" structure), whether
// device checks are on (they decide the program too) and the call's typed key; "" when the disk
// cache is off.
std::string recipe_key(const std::string& what, std::string_view key);

void write_entry(runtime::RecipeWriter& w, const ProgramEntry& e);
// False when the recorded entry does not fit a call with `num_params` parameters and
// `num_inputs` graph inputs (then the caller builds as usual); throws std::runtime_error on a
// short record.
bool read_entry(runtime::RecipeReader& r, ProgramEntry& e, size_t num_params, size_t num_inputs);

// Reads the recipe recorded under `key` into `e`, program included (load_recipe names it `name`);
// `rest`, when given, reads what the caller recorded after the entry. False, with `e`'s program
// unset, when there is none or it does not fit the call (read_entry, `rest`, or trailing bytes).
bool load_entry(const std::string& key, const std::string& name, ProgramEntry& e, size_t num_params,
                size_t num_inputs,
                const std::function<bool(runtime::RecipeReader&)>& rest = nullptr);

// A hex SHA-256 of everything in `spec` that decides its program: node ops, arguments (graph
// inputs, other nodes' outputs, constants bit for bit), result types, returns and the engine's
// flags. Not the graph's name, which differs from process to process.
std::string structure_hash(const ProgramSpec& spec);

}  // namespace torchtpu::exec
