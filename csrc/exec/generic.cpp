#include "exec/generic.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>
#include <c10/util/strides.h>

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "config/config.h"
#include "device/buckets.h"
#include "lowering/lowering.h"

namespace torchtpu::exec {
namespace {

using shlo::ElementType;

void put(std::string& key, int64_t v) { key.append(reinterpret_cast<const char*>(&v), 8); }
void put(std::string& key, char c) { key.push_back(c); }
void put_ints(std::string& key, c10::IntArrayRef v) {
  put(key, static_cast<int64_t>(v.size()));
  key.append(reinterpret_cast<const char*>(v.data()), v.size() * 8);
}

bool tensor_list_arg(const c10::IValue& v, const c10::Argument& a) {
  return v.isTensorList() || (v.isList() && a.type()->str().find("Tensor") != std::string::npos);
}

// Contiguous with the strides contiguous_strides gives (size-1 dims included): TensorIterator
// lays out the result of such operands contiguously, whatever broadcasts between them.
std::vector<int64_t> contiguous(c10::IntArrayRef sizes) {
  const c10::DimVector s = c10::contiguous_strides(sizes);
  return std::vector<int64_t>(s.begin(), s.end());
}

bool plain(const at::Tensor& t) {
  return t.strides().equals(c10::IntArrayRef(c10::contiguous_strides(t.sizes())));
}

// The strides PyTorch gives a functional elementwise op's result when some operand is not
// plain (TensorIterator follows its operands' layouts, clone preserves its input's): asked of
// the op's meta kernel once per distinct geometry, then remembered. Empty: contiguous.
class ResultLayouts {
 public:
  // Null when the meta kernel refuses the call (the exact path then raises its error).
  const std::vector<int64_t>* find_or_ask(const std::string& key, const c10::OperatorHandle& op,
                                          const torch::jit::Stack& stack, size_t first) {
    {
      std::lock_guard<std::mutex> g(mutex_);
      auto it = layouts_.find(key);
      if (it != layouts_.end()) return &it->second;
    }
    std::vector<int64_t> strides;
    try {
      torch::jit::Stack s;
      for (size_t i = first; i < stack.size(); ++i) {
        const c10::IValue& v = stack[i];
        if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_privateuseone()) {
          const at::Tensor& t = v.toTensor();
          s.emplace_back(at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta)));
        } else {
          s.push_back(v);
        }
      }
      op.callBoxed(&s);
      if (s.empty() || !s[0].isTensor()) return nullptr;
      const at::Tensor& r = s[0].toTensor();
      if (!r.is_non_overlapping_and_dense()) return nullptr;
      if (!plain(r)) strides = r.strides().vec();
    } catch (const c10::Error&) {
      return nullptr;
    }
    std::lock_guard<std::mutex> g(mutex_);
    // Bounded: a stream of ever-new geometries asks the meta kernel again, nothing grows.
    if (layouts_.size() >= kMaxEntries) layouts_.clear();
    return &layouts_.emplace(key, std::move(strides)).first->second;
  }

 private:
  static constexpr size_t kMaxEntries = 1 << 14;
  std::mutex mutex_;
  std::unordered_map<std::string, std::vector<int64_t>> layouts_;
};

ResultLayouts& result_layouts() {
  static ResultLayouts* l = new ResultLayouts();
  return *l;
}

// A strides vector with size-1 dims' strides set to 1: positions never divide by them (their
// coordinate is 0 whatever the stride), and a 0 would divide by zero.
std::vector<int64_t> iteration_strides(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  std::vector<int64_t> out(strides.begin(), strides.end());
  for (size_t d = 0; d < out.size(); ++d) {
    if (sizes[d] == 1 || out[d] < 1) out[d] = 1;
  }
  return out;
}

// Dense over every byte of its storage from offset 0, in whatever dimension order.
bool whole_storage(const at::Tensor& t) {
  return t.is_non_overlapping_and_dense() && t.storage_offset() == 0 &&
         static_cast<size_t>(t.numel()) * t.element_size() == t.storage().nbytes();
}

// The small-call fast path: below these result sizes a call runs its exact program, whose static
// shape costs nothing at run time, instead of the size-generic one, which computes over its whole
// bucket and gathers or scatters views through index arithmetic on every element. A workload
// meets few distinct small shapes, so the extra programs are few; its large ones are where sizes
// vary. The first threshold is device::exact_below() (storages that small keep their exact size
// too); this one is for results over strided views. By default no view call runs generic: on
// XLA:CPU the gather and scatter through runtime geometry cost 1.6-5x the exact program at every
// size measured (2Ki to 512Ki elements, benchmarks/generic_views.py), where the programs they
// save are few (the tiny Llama's cold run: 214 programs with views generic from 1024 elements,
// 244 without; the Hugging Face test files: 1651 against 1731).
int64_t generic_view_min_elements() {
  static const int64_t n = [] {
    constexpr int64_t kMax = int64_t{1} << 40;
    const std::optional<std::string> v = config::raw("TORCHTPU_SIZE_GENERIC_VIEW_MIN_ELEMENTS");
    if (!v || *v == "never") return kMax + 1;
    return config::positive_int("TORCHTPU_SIZE_GENERIC_VIEW_MIN_ELEMENTS", kMax, kMax);
  }();
  return n;
}

}  // namespace

bool generic_candidate(const OpPlan& plan) {
  return device::size_buckets() && plan.descriptor != nullptr &&
         (plan.descriptor->flags & lowering::kElementwise) != 0 && plan.variant != Variant::kOut &&
         plan.mutated_args.size() <= 1;
}

bool scan_generic_call(const OpPlan& plan, const c10::OperatorHandle& op,
                       const torch::jit::Stack& stack, size_t first, CallState& state) {
  const auto& args = op.schema().arguments();
  // The result's shape: the device tensors broadcast (CPU 0-d tensors are runtime scalars).
  c10::DimVector shape;
  bool any = false, all_plain = true;
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = stack[first + i];
    if (tensor_list_arg(v, args[i])) return false;
    if (!v.isTensor() || !v.toTensor().defined() || !v.toTensor().is_privateuseone()) continue;
    const at::Tensor& t = v.toTensor();
    // Bit views read through their bits, float8 have fill rules for one element: exact
    // programs only.
    if (t.is_conj() || t.is_neg() || shlo::is_float8(lowering::to_element_type(t.scalar_type()))) {
      return false;
    }
    all_plain = all_plain && (plain(t) || t.numel() == 1);
    if (!any) {
      shape.assign(t.sizes().begin(), t.sizes().end());
      any = true;
      continue;
    }
    if (t.sizes().equals(shape)) continue;
    try {
      shape = at::infer_size_dimvector(shape, t.sizes());
    } catch (const c10::Error&) {
      return false;  // the exact path's meta kernel raises PyTorch's own error
    }
  }
  const int64_t n = c10::multiply_integers(shape);
  if (!any || n == 0 || n < device::exact_below()) return false;
  if (n < generic_view_min_elements()) {
    // A tensor that is neither one element nor its whole storage would be reached through the
    // runtime geometry, which a result this small does not take: the exact path, before the
    // scan (the host time of a scan thrown away shows on every small view op).
    for (size_t i = 0; i < args.size(); ++i) {
      const c10::IValue& v = stack[first + i];
      if (!v.isTensor() || !v.toTensor().defined() || !v.toTensor().is_privateuseone()) continue;
      const at::Tensor& t = v.toTensor();
      if (!whole_storage(t) && t.numel() != 1) return false;
    }
  }
  state.out_sizes.assign(shape.begin(), shape.end());
  // The order positions are computed in: the result's memory order (a functional op), or the
  // written tensor's (in place; a view that does not cover its storage is scattered into it
  // in row-major order).
  std::vector<int64_t> order;
  if (!plan.mutated_args.empty()) {
    const c10::IValue& v = stack[first + plan.mutated_args[0]];
    if (!v.isTensor() || !v.toTensor().is_privateuseone() || !v.toTensor().sizes().equals(shape) ||
        shape.empty()) {
      return false;
    }
    const at::Tensor& self = v.toTensor();
    if (at::has_internal_overlap(self) == at::MemOverlap::Yes) return false;  // PyTorch refuses
    order = whole_storage(self) ? self.strides().vec() : contiguous(self.sizes());
    // Another view of the written storage is a partial overlap PyTorch refuses (the exact path
    // raises it), unless it is the very same view (x.mul_(x)).
    for (size_t i = 0; i < args.size(); ++i) {
      const c10::IValue& o = stack[first + i];
      if (i == plan.mutated_args[0] || !o.isTensor() || !o.toTensor().defined() ||
          !o.toTensor().is_privateuseone() || !o.toTensor().is_alias_of(self)) {
        continue;
      }
      const at::Tensor& t = o.toTensor();
      if (t.storage_offset() != self.storage_offset() || !t.sizes().equals(self.sizes()) ||
          !t.strides().equals(self.strides())) {
        return false;
      }
    }
  } else if (all_plain) {
    order = contiguous(shape);
  } else {
    std::string key;
    const OpPlan* plan_ptr = &plan;
    key.append(reinterpret_cast<const char*>(&plan_ptr), sizeof(plan_ptr));
    for (size_t i = 0; i < args.size(); ++i) {
      const c10::IValue& v = stack[first + i];
      if (v.isTensor() && v.toTensor().defined()) {
        put(key, 't');
        put_ints(key, v.toTensor().sizes());
        put_ints(key, v.toTensor().strides());
      } else {
        put(key, v.isNone() ? 'n' : 'v');
      }
    }
    const std::vector<int64_t>* strides = result_layouts().find_or_ask(key, op, stack, first);
    if (strides == nullptr) return false;
    if (!strides->empty()) state.out_strides = *strides;
    order = strides->empty() ? contiguous(shape) : *strides;
  }
  state.generic = true;
  state.generic_rank = static_cast<int64_t>(shape.size());
  // The space's geometry (lowering::GenericSpace); the views follow as the scan meets them.
  Param g;
  g.kind = Param::Kind::kInts;
  g.dtype = ElementType::kS64;
  g.ints.push_back(n);
  for (int64_t s : iteration_strides(shape, order)) g.ints.push_back(s);
  for (int64_t s : shape) g.ints.push_back(s);
  state.params.push_back(std::move(g));
  state.geometry_param = 0;
  const size_t rank_at = state.key.size() + 1 + 8;  // Scanner::scan_generic's rank field
  if (!Scanner(state, /*with_views=*/true).scan_generic(op.schema(), stack, first)) return false;
  // A written tensor is a whole bucket or a view scattered into one, never a broadcast element.
  if (!plan.mutated_args.empty() && state.args[plan.mutated_args[0]].offset_param >= 0) {
    return false;
  }
  bool any_view = false;
  for (const ArgDesc& d : state.args) any_view = any_view || d.generic_view >= 0;
  if (any_view && n < generic_view_min_elements()) return false;
  if (!any_view) {
    // Every tensor is a whole bucket in the positions' order, or one element: the program
    // needs no geometry, and is the same for every rank.
    state.geometry_param = -1;
    state.params[0].ints.clear();
    const int64_t no_rank = -1;
    state.key.replace(rank_at, 8, reinterpret_cast<const char*>(&no_rank), 8);
  }
  return true;
}

bool Scanner::scan_generic(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                           size_t first) {
  generic_ = true;
  generic_fits_ = true;
  // The geometry param is first; its length is structure (rank and views), its values not.
  put(s_.key, 'G');
  put(s_.key, device::bucket_elements(c10::multiply_integers(s_.out_sizes)));
  put(s_.key, s_.generic_rank);
  scan(schema, stack, first);
  return generic_fits_;
}

void Scanner::generic_tensor(const at::Tensor& t, int index, ArgDesc& d) {
  const Param& p = s_.params[static_cast<size_t>(index)];
  const ElementType et = lowering::to_element_type(t.scalar_type());
  const auto itemsize = static_cast<int64_t>(t.element_size());
  const auto nbytes = static_cast<int64_t>(t.storage().nbytes());
  const int64_t storage_n = nbytes / itemsize;
  // The storage's buffer is its whole bucket, in the tensor's own dtype.
  if (p.dtype != et || p.dims.size() != 1 || nbytes % itemsize != 0 ||
      p.dims[0] != device::bucket_elements(storage_n)) {
    generic_fits_ = false;
    return;
  }
  d.kind = ArgDesc::Kind::kTensor;
  d.param = index;
  d.dtype = t.scalar_type();
  d.view.strides.clear();
  put(s_.key, 'g');
  put(s_.key, static_cast<int64_t>(index));
  put(s_.key, static_cast<int64_t>(d.dtype));
  put(s_.key, p.dims[0]);
  put(s_.key, static_cast<char>(p.buffer ? 1 : 0));
  const int64_t bucket = device::bucket_elements(c10::multiply_integers(s_.out_sizes));
  const std::vector<int64_t>& geometry = s_.params[0].ints;
  const int64_t rank = s_.generic_rank;
  // In the positions' order over its whole storage (the result's shape, strides equal to the
  // positions' along every dim that moves): its bucket is read as it is. A 0-d result is one
  // element of the zero-dim tier of type promotion, not a dimensioned bucket.
  bool aligned = rank > 0 && t.sizes().equals(s_.out_sizes) && t.storage_offset() == 0 &&
                 t.numel() == storage_n && p.dims[0] == bucket;
  for (int64_t k = 0; aligned && k < rank; ++k) {
    aligned = t.size(k) == 1 || t.stride(k) == geometry[static_cast<size_t>(1 + k)];
  }
  if (aligned) {
    put(s_.key, 'A');
    d.view.sizes = {p.dims[0]};
    d.view.strides = {1};
    d.view.offset = 0;
    return;
  }
  if (t.numel() == 1) {
    // One element, broadcast: 0-d stays 0-d (promotion's zero-dim tier), any other rank reads
    // as [1]. Its position is a runtime value.
    put(s_.key, '1');
    put(s_.key, static_cast<char>(t.dim() == 0 ? 0 : 1));
    d.view.sizes.assign(t.dim() == 0 ? 0 : 1, 1);
    d.view.strides.assign(d.view.sizes.size(), 1);
    d.view.offset = t.storage_offset();
    d.offset_param = scalar_param(c10::Scalar(d.view.offset), ElementType::kS64);
    return;
  }
  // Any other view: gathered (or, written, scattered) through its runtime geometry: its offset
  // and its strides along the result's dims (0 where it broadcasts).
  put(s_.key, 'S');
  std::vector<int64_t>& g = s_.params[0].ints;
  d.generic_view = static_cast<int>((static_cast<int64_t>(g.size()) - 1 - 2 * rank) / (rank + 1));
  g.push_back(t.storage_offset());
  const int64_t lead = rank - t.dim();
  for (int64_t k = 0; k < rank; ++k) {
    const int64_t j = k - lead;
    g.push_back(j < 0 || t.size(j) == 1 ? 0 : t.stride(j));
  }
  d.view.sizes = {bucket};
  d.view.strides = {1};
  d.view.offset = 0;
}

}  // namespace torchtpu::exec
