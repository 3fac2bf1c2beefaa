// Every environment variable torchtpu reads, declared once (config.cpp) with its default and a
// doc line. C++ code reads them only through these functions; the Python package reads the few
// it needs before the extension loads, and they are declared here too. scripts/env_table.py
// prints the table in docs/debugging.md from the declarations; tests/python/test_config.py checks
// that the table is current and that no code reads an undeclared variable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torchtpu::config {

struct Variable {
  const char* name;
  const char* default_value;  // as docs/debugging.md shows it ("" = unset)
  const char* doc;            // one line
};

// The declarations, in docs/debugging.md's order.
const std::vector<Variable>& variables();

// The variable's value from the environment, nullopt when unset or empty. Throws
// std::invalid_argument for a name that is not declared (so every read is declared).
std::optional<std::string> raw(const char* name);

// A switch: "0", "false", "off" or "no" (any case) is off, any other value on, unset or empty
// is `default_on`.
bool flag(const char* name, bool default_on);

// A positive integer in [1, max], or `fallback` when unset. Throws std::invalid_argument naming
// the variable and what it expects for anything else.
int64_t positive_int(const char* name, int64_t fallback, int64_t max);

// A number in (0, 1], or `fallback` when unset; anything else throws std::invalid_argument
// naming the variable.
double fraction(const char* name, double fallback);

// One of `allowed` (compared in lower case, as given), or `fallback` when unset; anything else
// throws std::invalid_argument naming the variable and the choices.
std::string choice(const char* name, const std::vector<std::string>& allowed,
                   const std::string& fallback);

}  // namespace torchtpu::config
