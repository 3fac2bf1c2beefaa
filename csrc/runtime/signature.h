// A program's typed signature: what an eager op or a compiled graph was compiled for (the op or
// the graph's structure, one typed entry per argument, the platform), never a value. The program
// caches look programs up by a cheap byte key (exec/call_state.h's Scanner); a Signature is
// materialized only on a miss, to say why the call missed: the nearest *cached* signature of the
// same op and what differs from it, in TORCHTPU_LOG_COMPILES=1 lines and in the recompile
// reasons (torchtpu.recompile_reasons()).
//
// Torch-free (std only): callers fill it from their own argument descriptions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace torchtpu::runtime {

// One argument of a signature. Only the fields of its kind are set.
struct SigEntry {
  enum class Kind : uint8_t {
    kNone,           // an absent optional
    kTensor,         // a device tensor (a view of a storage)
    kCpuScalar,      // a 0-d CPU tensor: a runtime value of `dtype`
    kList,           // Tensor[] / Tensor?[]: `items`
    kScalar,         // a Scalar travelling at run time in `dtype`
    kDefaultScalar,  // a Scalar equal to its default (folded into the program)
    kRuntimeInts,    // an int[] whose values travel at run time: only its length counts
    kGenerator,      // a Generator?: its state travels at run time
    kConst,          // a structural constant: `value`
  };
  Kind kind = Kind::kNone;
  std::string name;   // "self", "input3"
  std::string dtype;  // "Float"; a Scalar's transport type
  std::vector<int64_t> sizes, strides;
  // View facts: which of the call's storages it reads (an alias of an earlier argument names the
  // same one), whether its storage offset is a runtime argument, and the storage's buffer.
  int storage = -1;
  bool runtime_offset = false;
  std::vector<int64_t> storage_dims;
  std::string storage_dtype;
  bool storage_written = true;  // false: never written (the program sees zeros)
  std::string value;            // kConst, as printed; kRuntimeInts: the length
  std::vector<SigEntry> items;  // kList

  bool operator==(const SigEntry& o) const;
  bool operator!=(const SigEntry& o) const { return !(*this == o); }
  // "Float[8, 16]" (with strides, view and storage facts where they are not the plain case).
  std::string describe() const;
};

class Signature {
 public:
  std::string op;  // "aten::add.Tensor"; a graph: "graph <structure hash>"
  // Shown instead of `op` in describe(): a graph's name in this process ("graph g3").
  std::string display;
  std::string platform;  // "cpu", "cuda", "tpu"
  // Call-wide facts that decide the program beside the arguments ("default dtype Float").
  std::vector<std::string> context;
  std::vector<SigEntry> args;

  bool operator==(const Signature& o) const;
  bool operator!=(const Signature& o) const { return !(*this == o); }
  size_t hash() const;
  // What differs from `other`, one line per field ("arg 2 (self): sizes [8, 16] vs [8, 32]",
  // this signature's value first). Empty when equal.
  std::vector<std::string> diff(const Signature& other) const;
  // How many arguments (and call-wide facts) differ: what "nearest" minimizes.
  size_t distance(const Signature& other) const;
  // "aten::add.Tensor(self=Float[8, 16], other=Float[8, 16], alpha=default)".
  std::string describe() const;
};

struct SignatureHash {
  size_t operator()(const Signature& s) const { return s.hash(); }
};

// The signatures the program caches hold now, by family (an eager op; a compiled graph and
// its per-size specializations): a miss is explained against the nearest of them. Weak: an
// entry's signature is owned by its cached program, so an evicted program's signature leaves
// the index when its last launch finishes.
class SignatureIndex {
 public:
  // Why `sig` missed: the nearest cached signature of its family and what differs, or that none
  // is cached. Counts a recompile (metrics().recompiles and recompile_reasons()) when another
  // signature of the family is or was cached, whether the new program is then compiled or
  // loaded from the disk cache.
  std::string explain_miss(const std::string& family, const Signature& sig);
  // `sig` is cached from now on (as long as its owner holds it).
  void add(const std::string& family, const std::shared_ptr<const Signature>& sig);

 private:
  std::mutex mutex_;
  struct PerOp {
    std::vector<std::weak_ptr<const Signature>> cached;
    int64_t ever = 0;  // signatures ever added (tells "first" from "evicted")
  };
  std::unordered_map<std::string, PerOp> by_op_;
};

// The most recent recompile reasons, oldest first: (op or graph, reason). Bounded.
std::vector<std::pair<std::string, std::string>> recompile_reasons();
void clear_recompile_reasons();

}  // namespace torchtpu::runtime
