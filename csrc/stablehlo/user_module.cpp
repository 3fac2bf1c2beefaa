#include "stablehlo/user_module.h"

#include <cctype>
#include <stdexcept>

namespace torchtpu::shlo {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("StableHLO module: " + what);
}

bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.' ||
         c == '-';
}

bool starts_with_at(std::string_view s, size_t i, std::string_view word) {
  return s.substr(i, word.size()) == word;
}

// Index just past the string literal that starts at s[i] == '"'.
size_t skip_string(std::string_view s, size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '"') {
      return i + 1;
    }
  }
  fail("unterminated string literal");
}

// Index of the bracket closing the one at s[i] (== open); string literals are skipped.
size_t matching(std::string_view s, size_t i, char open, char close) {
  int depth = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == '"') {
      i = skip_string(s, i);
      continue;
    }
    if (c == open) {
      ++depth;
    } else if (c == close && --depth == 0) {
      return i;
    }
    ++i;
  }
  fail(std::string("unbalanced '") + open + "'");
}

size_t skip_spaces(std::string_view s, size_t i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

// Source locations refer to `#loc` aliases defined outside the functions we keep; they carry
// no meaning for execution, so they go.
std::string strip_locations(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '"') {
      size_t end = skip_string(s, i);
      out.append(s.substr(i, end - i));
      i = end;
      continue;
    }
    if (starts_with_at(s, i, "loc(") && (i == 0 || !ident_char(s[i - 1]))) {
      i = matching(s, i + 3, '(', ')') + 1;
      while (!out.empty() && out.back() == ' ') out.pop_back();
      continue;
    }
    if (s[i] == '#' && starts_with_at(s, i, "#loc") && (i == 0 || s[i - 1] == '\n')) {
      // A `#locN = loc(...)` alias definition line.
      size_t end = s.find('\n', i);
      i = end == std::string_view::npos ? s.size() : end + 1;
      continue;
    }
    out.push_back(s[i++]);
  }
  return out;
}

// Splits at commas outside brackets and strings.
std::vector<std::string_view> split_top_level(std::string_view s) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    char c = s[i];
    if (c == '"') {
      i = skip_string(s, i);
      continue;
    }
    if (c == '(' || c == '<' || c == '{' || c == '[') ++depth;
    if (c == ')' || c == '>' || c == '}' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
    ++i;
  }
  if (s.find_first_not_of(" \t\n") != std::string_view::npos) parts.push_back(s.substr(start));
  return parts;
}

// The tensor type inside one argument or result entry ("%arg0: tensor<4xf32> {attrs}").
TensorType type_of_entry(std::string_view entry, const std::string& where) {
  size_t t = entry.find("tensor<");
  if (t == std::string_view::npos) {
    fail(where + " is not a tensor (" + std::string(entry) +
         "); only tensor values can cross "
         "between torch and the module");
  }
  size_t end = matching(entry, t + 6, '<', '>');
  return parse_tensor_type(entry.substr(t, end - t + 1));
}

struct Function {
  std::string name;
  size_t start = 0;       // of "func.func"
  size_t name_end = 0;    // just past the symbol name
  size_t end = 0;         // just past the body's '}'
  std::string_view args;  // inside the argument parentheses
  std::string_view results;
  bool is_public = true;  // MLIR's default visibility
};

std::vector<Function> find_functions(std::string_view s) {
  std::vector<Function> out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '"') {
      i = skip_string(s, i);
      continue;
    }
    if (!starts_with_at(s, i, "func.func") || (i > 0 && ident_char(s[i - 1]))) {
      ++i;
      continue;
    }
    Function f;
    f.start = i;
    size_t p = skip_spaces(s, i + 9);
    for (std::string_view vis : {"public", "private", "nested"}) {
      if (starts_with_at(s, p, vis)) {
        f.is_public = vis == "public";
        p = skip_spaces(s, p + vis.size());
      }
    }
    if (p >= s.size() || s[p] != '@') fail("expected a symbol name after func.func");
    size_t n = p + 1;
    while (n < s.size() && ident_char(s[n])) ++n;
    f.name = std::string(s.substr(p + 1, n - p - 1));
    f.name_end = n;
    if (n >= s.size() || s[n] != '(') fail("expected the arguments of @" + f.name);
    size_t args_end = matching(s, n, '(', ')');
    f.args = s.substr(n + 1, args_end - n - 1);
    p = skip_spaces(s, args_end + 1);
    if (starts_with_at(s, p, "->")) {
      p = skip_spaces(s, p + 2);
      if (p < s.size() && s[p] == '(') {
        size_t r_end = matching(s, p, '(', ')');
        f.results = s.substr(p + 1, r_end - p - 1);
        p = skip_spaces(s, r_end + 1);
      } else {
        size_t lt = s.find('<', p);
        if (lt == std::string_view::npos) fail("cannot read the results of @" + f.name);
        size_t r_end = matching(s, lt, '<', '>');
        f.results = s.substr(p, r_end - p + 1);
        p = skip_spaces(s, r_end + 1);
      }
    }
    if (starts_with_at(s, p, "attributes")) {
      p = skip_spaces(s, p + 10);
      if (p < s.size() && s[p] == '{') p = skip_spaces(s, matching(s, p, '{', '}') + 1);
    }
    if (p >= s.size() || s[p] != '{') fail("@" + f.name + " has no body");
    f.end = matching(s, p, '{', '}') + 1;
    out.push_back(f);
    i = f.end;
  }
  return out;
}

// Renames every `@name` of `names` in `text` (whole symbols only, strings left alone).
std::string rename_symbols(std::string_view text, const std::vector<std::string>& names,
                           const std::string& prefix) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '"') {
      size_t end = skip_string(text, i);
      out.append(text.substr(i, end - i));
      i = end;
      continue;
    }
    if (text[i] == '@') {
      size_t n = i + 1;
      while (n < text.size() && ident_char(text[n])) ++n;
      std::string_view sym = text.substr(i + 1, n - i - 1);
      bool ours = false;
      for (const auto& name : names) ours |= sym == name;
      out += ours ? "@" + prefix + "_" + std::string(sym) : "@" + std::string(sym);
      i = n;
      continue;
    }
    out.push_back(text[i++]);
  }
  return out;
}

}  // namespace

TensorType parse_tensor_type(std::string_view text) {
  std::string_view s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (s.substr(0, 7) != "tensor<" || s.back() != '>') {
    fail("expected a tensor type, got '" + std::string(text) + "'");
  }
  std::string_view inner = s.substr(7, s.size() - 8);
  if (inner.find(',') != std::string_view::npos) {
    fail("tensor types with an encoding are not supported: " + std::string(text));
  }
  std::vector<int64_t> shape;
  // Leading "<dim>x" groups; the element type is what follows the last one.
  size_t p = 0;
  while (true) {
    size_t q = p;
    while (q < inner.size() &&
           (std::isdigit(static_cast<unsigned char>(inner[q])) || inner[q] == '?')) {
      ++q;
    }
    if (q == p || q >= inner.size() || inner[q] != 'x') break;
    std::string_view dim = inner.substr(p, q - p);
    if (dim.find('?') != std::string_view::npos) {
      fail("dynamic dimensions are not supported (" + std::string(text) +
           "): export the function for static shapes");
    }
    shape.push_back(std::stoll(std::string(dim)));
    p = q + 1;
  }
  std::string_view element = inner.substr(p);
  for (ElementType t : {ElementType::kPred, ElementType::kS8, ElementType::kS16, ElementType::kS32,
                        ElementType::kS64, ElementType::kU8, ElementType::kU16, ElementType::kU32,
                        ElementType::kU64, ElementType::kF16, ElementType::kBF16, ElementType::kF32,
                        ElementType::kF64, ElementType::kC64, ElementType::kC128}) {
    if (element == mlir_name(t)) return TensorType(t, shape);
  }
  fail("element type '" + std::string(element) + "' has no torch dtype on tpu");
}

UserModule parse_user_module(std::string_view text, const std::string& prefix) {
  std::string clean = strip_locations(text);
  std::vector<Function> functions = find_functions(clean);
  if (functions.empty()) fail("no func.func found");
  const Function* entry = nullptr;
  int publics = 0;
  for (const Function& f : functions) {
    if (f.name == "main") entry = &f;
    publics += f.is_public ? 1 : 0;
  }
  if (!entry) {
    if (publics != 1) fail("no @main, and not exactly one public function to call instead");
    for (const Function& f : functions) {
      if (f.is_public) entry = &f;
    }
  }
  UserModule m;
  for (std::string_view a : split_top_level(entry->args)) {
    m.arg_types.push_back(type_of_entry(a, "an argument of @" + entry->name));
  }
  for (std::string_view r : split_top_level(entry->results)) {
    m.result_types.push_back(type_of_entry(r, "a result of @" + entry->name));
  }
  if (m.result_types.empty()) fail("@" + entry->name + " returns nothing");
  std::vector<std::string> names;
  for (const Function& f : functions) names.push_back(f.name);
  for (const Function& f : functions) {
    // Every function becomes private: the caller's program has its own public @main.
    std::string header = "func.func private @" + prefix + "_" + f.name;
    std::string_view rest(clean.data() + f.name_end, f.end - f.name_end);
    m.functions += "  " + header + rename_symbols(rest, names, prefix) + "\n";
  }
  m.entry = prefix + "_" + entry->name;
  return m;
}

}  // namespace torchtpu::shlo
