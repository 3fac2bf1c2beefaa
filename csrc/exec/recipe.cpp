#include "exec/recipe.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <sstream>
#include <stdexcept>

#include "lowering/checks.h"
#include "runtime/disk_cache.h"

namespace torchtpu::exec {

std::string recipe_key(const std::string& what, std::string_view key) {
  if (runtime::disk_cache_dir().empty()) return std::string();
  std::string typed = what;
  typed.push_back('\0');
  typed.push_back(lowering::device_checks_enabled() ? '1' : '0');
  typed.append(key);
  return runtime::recipe_key(typed);
}

void write_entry(runtime::RecipeWriter& w, const ProgramEntry& e) {
  w.ints(std::vector<int64_t>(e.used_params.begin(), e.used_params.end()));
  w.i64(static_cast<int64_t>(e.outputs.size()));
  for (const OutputSink& o : e.outputs) {
    w.i64((o.to_storage ? 1 : 0) | (o.to_cpu_input ? 2 : 0));
    w.i64(o.index);
    w.ints(o.dims);
    w.i64(static_cast<int64_t>(o.dtype));
    w.i64(static_cast<int64_t>(o.element_type));
    // A new tensor's sizes (its buffer may be 1-D: device::flat_buffers) and, for a layout
    // stored in memory order (channels_last, a preserved permutation), the CPU's strides:
    // without them a reloaded recipe returned the buffer's shape.
    w.ints(o.sizes);
    w.ints(o.strides);
  }
  w.i64(static_cast<int64_t>(e.rng_numel));
  w.i64(e.checks ? static_cast<int64_t>(e.checks->size()) : 0);
  if (e.checks) {
    for (const runtime::CheckSpec& c : *e.checks) {
      w.str(c.op);
      w.str(c.message);
      w.i64(static_cast<int64_t>(c.error));
    }
  }
}

bool read_entry(runtime::RecipeReader& r, ProgramEntry& e, size_t num_params, size_t num_inputs) {
  const auto nparams = static_cast<int64_t>(num_params);
  for (int64_t p : r.ints()) {
    if (p < -1 || p >= nparams) return false;
    e.used_params.push_back(static_cast<int>(p));
  }
  int64_t nout = r.i64();
  if (nout < 0 || nout > 1 << 20) return false;
  for (int64_t i = 0; i < nout; ++i) {
    OutputSink o;
    int64_t flags = r.i64();
    o.to_storage = (flags & 1) != 0;
    o.to_cpu_input = (flags & 2) != 0;
    o.index = static_cast<int>(r.i64());
    o.dims = r.ints();
    o.dtype = static_cast<c10::ScalarType>(r.i64());
    o.element_type = static_cast<shlo::ElementType>(r.i64());
    o.sizes = r.ints();
    o.strides = r.ints();
    if ((!o.strides.empty() && o.sizes.size() != o.strides.size()) || o.index < 0) return false;
    if (o.to_storage && o.index >= nparams) return false;
    if (o.to_cpu_input && static_cast<size_t>(o.index) >= num_inputs) return false;
    e.outputs.push_back(std::move(o));
  }
  e.rng_numel = static_cast<uint64_t>(r.i64());
  int64_t nchecks = r.i64();
  if (nchecks < 0 || nchecks > 1 << 20) return false;
  if (nchecks > 0) {
    auto specs = std::make_shared<std::vector<runtime::CheckSpec>>();
    for (int64_t i = 0; i < nchecks; ++i) {
      runtime::CheckSpec c;
      c.op = r.str();
      c.message = r.str();
      c.error = static_cast<runtime::CheckError>(r.i64());
      specs->push_back(std::move(c));
    }
    e.checks = std::move(specs);
  }
  return true;
}

bool load_entry(const std::string& key, const std::string& name, ProgramEntry& e, size_t num_params,
                size_t num_inputs, const std::function<bool(runtime::RecipeReader&)>& rest) {
  runtime::Recipe recipe = runtime::load_recipe(key, name);
  if (!recipe.program) return false;
  try {
    runtime::RecipeReader r(recipe.metadata);
    if (!read_entry(r, e, num_params, num_inputs) || (rest && !rest(r)) || !r.at_end()) {
      return false;
    }
  } catch (const std::runtime_error&) {
    return false;
  }
  e.program = std::move(recipe.program);
  return true;
}

namespace {

// The recipe writer's encoding (a length before each string), with IValues and node arguments.
class StructureWriter : public runtime::RecipeWriter {
 public:
  void f64(double x) {
    int64_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    i64(bits);
  }
  // Constants bit for bit: two graphs that differ only in a constant (0.1 vs 0.1000001) are two
  // programs.
  void value(const c10::IValue& v) {
    if (v.isNone()) {
      tag('n');
    } else if (v.isBool()) {
      tag(v.toBool() ? 'T' : 'F');
    } else if (v.isInt()) {
      tag('i');
      i64(v.toInt());
    } else if (v.isDouble()) {
      tag('f');
      f64(v.toDouble());
    } else if (v.isComplexDouble()) {
      tag('c');
      c10::complex<double> z = v.toComplexDouble();
      f64(z.real());
      f64(z.imag());
    } else if (v.isString()) {
      tag('s');
      str(v.toStringRef());
    } else if (v.isDevice()) {
      tag('D');
      str(v.toDevice().str());
    } else if (v.isList()) {
      tag('[');
      for (const c10::IValue& item : v.toList()) value(item);
      tag(']');
    } else if (v.isTuple()) {
      tag('(');
      for (const c10::IValue& item : v.toTupleRef().elements()) value(item);
      tag(')');
    } else {
      // Anything else a schema constant can be (a dtype or layout arrives as an int): its
      // printed form with its type.
      std::ostringstream os;
      os << v.tagKind() << ':' << v;
      tag('?');
      str(os.str());
    }
  }
  void arg(const NodeArg& a) {
    i64(static_cast<int64_t>(a.kind));
    i64(a.index);
    i64(a.output);
    value(a.constant);
    i64(static_cast<int64_t>(a.items.size()));
    for (const NodeArg& item : a.items) arg(item);
  }
};

}  // namespace

std::string structure_hash(const ProgramSpec& spec) {
  StructureWriter w;
  w.str("torchtpu-program-structure-1");
  w.i64(spec.rng_streams);
  w.i64(spec.donate);
  w.i64(static_cast<int64_t>(spec.nodes.size()));
  for (const Node& n : spec.nodes) {
    w.str(n.name);
    w.i64(n.overwrites_self);
    w.i64(static_cast<int64_t>(n.out_types.size()));
    for (const auto& t : n.out_types) {
      w.i64(static_cast<int64_t>(t.dtype));
      w.i64(static_cast<int64_t>(t.shape.size()));
      for (int64_t d : t.shape) w.i64(d);
    }
    w.i64(static_cast<int64_t>(n.args.size()));
    for (const NodeArg& a : n.args) w.arg(a);
  }
  w.i64(static_cast<int64_t>(spec.returns.size()));
  for (const NodeArg& a : spec.returns) w.arg(a);
  w.i64(static_cast<int64_t>(spec.layouts.size()));
  for (const Layout& l : spec.layouts) {
    w.i64(static_cast<int64_t>(l.perm.size()));
    for (int64_t d : l.perm) w.i64(d);
    w.i64(static_cast<int64_t>(l.strides.size()));
    for (int64_t s : l.strides) w.i64(s);
  }
  // Writes name eager slots by pointer: a spec with writes is an eager op's, keyed otherwise.
  TORCH_INTERNAL_ASSERT(spec.writes.empty(), "torchtpu: structure_hash of a spec with writes");
  return runtime::to_hex(runtime::sha256(w.bytes()));
}

}  // namespace torchtpu::exec
