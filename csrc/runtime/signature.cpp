#include "runtime/signature.h"

#include <algorithm>
#include <functional>

#include "runtime/metrics.h"
#include "util/strides.h"

namespace torchtpu::runtime {
namespace {

std::string ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

const char* kind_name(SigEntry::Kind k) {
  switch (k) {
    case SigEntry::Kind::kNone:
      return "None";
    case SigEntry::Kind::kTensor:
      return "tensor";
    case SigEntry::Kind::kCpuScalar:
      return "CPU 0-d tensor";
    case SigEntry::Kind::kList:
      return "tensor list";
    case SigEntry::Kind::kScalar:
      return "runtime Scalar";
    case SigEntry::Kind::kDefaultScalar:
      return "default Scalar";
    case SigEntry::Kind::kRuntimeInts:
      return "runtime int list";
    case SigEntry::Kind::kGenerator:
      return "Generator";
    case SigEntry::Kind::kConst:
      return "constant";
  }
  return "?";
}

void hash_combine(size_t& h, size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }

size_t hash_of(const SigEntry& e) {
  size_t h = std::hash<int>()(static_cast<int>(e.kind));
  hash_combine(h, std::hash<std::string>()(e.dtype));
  for (int64_t s : e.sizes) hash_combine(h, std::hash<int64_t>()(s));
  for (int64_t s : e.strides) hash_combine(h, std::hash<int64_t>()(s) * 31);
  hash_combine(h, std::hash<int>()(e.storage));
  hash_combine(h, e.runtime_offset);
  for (int64_t s : e.storage_dims) hash_combine(h, std::hash<int64_t>()(s) * 7);
  hash_combine(h, std::hash<std::string>()(e.storage_dtype));
  hash_combine(h, e.storage_written);
  hash_combine(h, std::hash<std::string>()(e.value));
  for (const SigEntry& item : e.items) hash_combine(h, hash_of(item));
  return h;
}

// The fields of one entry that differ, each "what: this vs other".
void diff_entry(const SigEntry& a, const SigEntry& b, const std::string& where,
                std::vector<std::string>& out) {
  auto add = [&](const std::string& what, const std::string& x, const std::string& y) {
    out.push_back(where + ": " + what + x + " vs " + y);
  };
  if (a.kind != b.kind) {
    add("", a.describe(), b.describe());
    return;
  }
  if (a.dtype != b.dtype) add("dtype ", a.dtype, b.dtype);
  if (a.sizes != b.sizes) add("sizes ", ints(a.sizes), ints(b.sizes));
  // Strides of two contiguous tensors, and the buffer of a tensor that is its whole storage,
  // follow from the sizes: said only when they add something.
  if (a.strides != b.strides && (a.sizes == b.sizes || !util::is_contiguous(a.sizes, a.strides) ||
                                 !util::is_contiguous(b.sizes, b.strides))) {
    add("strides ", ints(a.strides), ints(b.strides));
  }
  if (a.storage != b.storage) {
    add("storage ", "#" + std::to_string(a.storage),
        "#" + std::to_string(b.storage) + " (aliasing)");
  }
  if (a.runtime_offset != b.runtime_offset) {
    auto name = [](bool r) { return std::string(r ? "a partial view" : "its whole storage"); };
    add("reads ", name(a.runtime_offset), name(b.runtime_offset));
  }
  if (a.storage_dims != b.storage_dims &&
      (a.runtime_offset || b.runtime_offset || a.sizes == b.sizes)) {
    add("storage dims ", ints(a.storage_dims), ints(b.storage_dims));
  }
  if (a.storage_dtype != b.storage_dtype) add("storage dtype ", a.storage_dtype, b.storage_dtype);
  if (a.storage_written != b.storage_written) {
    auto name = [](bool w) { return std::string(w ? "written" : "never written"); };
    add("storage ", name(a.storage_written), name(b.storage_written));
  }
  if (a.value != b.value)
    add(a.kind == SigEntry::Kind::kRuntimeInts ? "length " : "", a.value, b.value);
  if (a.items.size() != b.items.size()) {
    add("length ", std::to_string(a.items.size()), std::to_string(b.items.size()));
    return;
  }
  for (size_t i = 0; i < a.items.size(); ++i) {
    diff_entry(a.items[i], b.items[i], where + " item " + std::to_string(i), out);
  }
}

std::string arg_label(size_t i, const SigEntry& e) {
  return "arg " + std::to_string(i) + (e.name.empty() ? "" : " (" + e.name + ")");
}

struct RecompileLog {
  static constexpr size_t kKept = 256;
  std::mutex mutex;
  std::deque<std::pair<std::string, std::string>> reasons;
};

RecompileLog& recompile_log() {
  static RecompileLog* log = new RecompileLog();  // used at exit by late compiles
  return *log;
}

}  // namespace

bool SigEntry::operator==(const SigEntry& o) const {
  // The name is the schema's: equal ops have equal names, so it never decides equality.
  return kind == o.kind && dtype == o.dtype && sizes == o.sizes && strides == o.strides &&
         storage == o.storage && runtime_offset == o.runtime_offset &&
         storage_dims == o.storage_dims && storage_dtype == o.storage_dtype &&
         storage_written == o.storage_written && value == o.value && items == o.items;
}

std::string SigEntry::describe() const {
  switch (kind) {
    case Kind::kTensor: {
      std::string s = dtype + ints(sizes);
      if (!util::is_contiguous(sizes, strides)) s += " strides " + ints(strides);
      if (runtime_offset) s += " (view of " + storage_dtype + ints(storage_dims) + ")";
      if (!storage_written) s += " (never written)";
      return s;
    }
    case Kind::kCpuScalar:
      return "cpu " + dtype + "[]";
    case Kind::kList: {
      std::string s = "[";
      for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i].describe();
      return s + "]";
    }
    case Kind::kScalar:
      return "Scalar(" + dtype + ")";
    case Kind::kDefaultScalar:
      return "default";
    case Kind::kRuntimeInts:
      return "int[" + value + "] at run time";
    case Kind::kGenerator:
      return "Generator";
    case Kind::kConst:
      return value;
    case Kind::kNone:
      return "None";
  }
  return kind_name(kind);
}

bool Signature::operator==(const Signature& o) const {
  return op == o.op && platform == o.platform && context == o.context && args == o.args;
}

size_t Signature::hash() const {
  size_t h = std::hash<std::string>()(op);
  hash_combine(h, std::hash<std::string>()(platform));
  for (const std::string& c : context) hash_combine(h, std::hash<std::string>()(c));
  for (const SigEntry& e : args) hash_combine(h, hash_of(e));
  return h;
}

std::vector<std::string> Signature::diff(const Signature& other) const {
  std::vector<std::string> out;
  if (op != other.op) {
    // A graph's op is its structure's hash: two hashes say nothing more than that they differ.
    bool graphs = op.rfind("graph ", 0) == 0 && other.op.rfind("graph ", 0) == 0;
    out.push_back(graphs ? "graph structure (another graph, or one specialized for other sizes)"
                         : "op " + op + " vs " + other.op);
  }
  if (platform != other.platform) out.push_back("platform " + platform + " vs " + other.platform);
  if (context != other.context) {
    for (size_t i = 0; i < std::max(context.size(), other.context.size()); ++i) {
      std::string a = i < context.size() ? context[i] : "(none)";
      std::string b = i < other.context.size() ? other.context[i] : "(none)";
      if (a != b) out.push_back(a + " vs " + b);
    }
  }
  for (size_t i = 0; i < std::max(args.size(), other.args.size()); ++i) {
    if (i >= args.size() || i >= other.args.size()) {
      out.push_back(arg_label(i, i < args.size() ? args[i] : other.args[i]) + ": " +
                    (i < args.size() ? args[i].describe() : "(none)") + " vs " +
                    (i < other.args.size() ? other.args[i].describe() : "(none)"));
      continue;
    }
    diff_entry(args[i], other.args[i], arg_label(i, args[i]), out);
  }
  return out;
}

size_t Signature::distance(const Signature& other) const {
  size_t n = (op != other.op) + (platform != other.platform) + (context != other.context);
  n += args.size() > other.args.size() ? args.size() - other.args.size()
                                       : other.args.size() - args.size();
  for (size_t i = 0; i < args.size() && i < other.args.size(); ++i) {
    n += args[i] != other.args[i];
  }
  return n;
}

std::string Signature::describe() const {
  std::string s = (display.empty() ? op : display) + "(";
  for (size_t i = 0; i < args.size(); ++i) {
    s += (i ? ", " : "") + (args[i].name.empty() ? "" : args[i].name + "=") + args[i].describe();
  }
  return s + ")";
}

std::string SignatureIndex::explain_miss(const std::string& family, const Signature& sig) {
  std::shared_ptr<const Signature> nearest;
  size_t best = 0, cached = 0;
  int64_t ever = 0;
  {
    std::lock_guard<std::mutex> g(mutex_);
    auto it = by_op_.find(family);
    if (it != by_op_.end()) {
      ever = it->second.ever;
      // Fewest differing arguments wins; among equals, the most recently added.
      for (auto w = it->second.cached.rbegin(); w != it->second.cached.rend(); ++w) {
        std::shared_ptr<const Signature> s = w->lock();
        if (!s) continue;
        ++cached;
        size_t d = sig.distance(*s);
        if (!nearest || d < best) nearest = std::move(s), best = d;
      }
    }
  }
  const std::string& name = sig.display.empty() ? sig.op : sig.display;
  if (ever == 0) return "first call of " + name;
  std::string why;
  if (!nearest) {
    why = "no signature of " + name + " is cached (" + std::to_string(ever) +
          " compiled before were evicted: TORCHTPU_PROGRAM_CACHE_MAX_ENTRIES)";
  } else {
    std::vector<std::string> d = sig.diff(*nearest);
    why = "nearest cached signature (of " + std::to_string(cached) + ") " + nearest->describe();
    if (d.empty()) {
      why += " is the same typed signature: the cached program was evicted, or the call differs " +
             std::string("in a layout detail the signature leaves out");
    } else {
      why += " differs in ";
      for (size_t i = 0; i < d.size(); ++i) why += (i ? "; " : "") + d[i];
    }
  }
  metrics().recompiles++;
  RecompileLog& log = recompile_log();
  std::lock_guard<std::mutex> g(log.mutex);
  if (log.reasons.size() == RecompileLog::kKept) log.reasons.pop_front();
  log.reasons.emplace_back(name, why);
  return why;
}

void SignatureIndex::add(const std::string& family, const std::shared_ptr<const Signature>& sig) {
  std::lock_guard<std::mutex> g(mutex_);
  PerOp& per = by_op_[family];
  // Drop signatures whose programs are gone, so the list follows the cache's bound.
  per.cached.erase(
      std::remove_if(per.cached.begin(), per.cached.end(),
                     [](const std::weak_ptr<const Signature>& w) { return w.expired(); }),
      per.cached.end());
  per.cached.push_back(sig);
  per.ever++;
}

std::vector<std::pair<std::string, std::string>> recompile_reasons() {
  RecompileLog& log = recompile_log();
  std::lock_guard<std::mutex> g(log.mutex);
  return {log.reasons.begin(), log.reasons.end()};
}

void clear_recompile_reasons() {
  RecompileLog& log = recompile_log();
  std::lock_guard<std::mutex> g(log.mutex);
  log.reasons.clear();
}

}  // namespace torchtpu::runtime
