#include "exec/executor.h"

#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <c10/util/strides.h>

#include <mutex>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "config/config.h"
#include "device/buckets.h"
#include "exec/call_state.h"
#include "exec/fused_eager.h"
#include "exec/generic.h"
#include "exec/host_transfer.h"
#include "exec/program.h"
#include "exec/recipe.h"
#include "exec/signature_of.h"
#include "exec/warmup.h"
#include "runtime/compile.h"
#include "runtime/metrics.h"
#include "runtime/program_cache.h"
#include "runtime/runtime.h"
#include "runtime/trace.h"

namespace torchtpu::exec {
namespace {

using shlo::TensorType;

// ---------------------------------------------------------------------------------------------
// An eager op's program (exec/program.h) and how its returns map onto the op's schema.

using Entry = OpEntry;

struct Cache {
  runtime::ProgramCache<Entry> programs;
  runtime::SignatureIndex signatures;  // the cached programs' typed signatures, by op
};

Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}

// ---------------------------------------------------------------------------------------------
// Meta inference: PyTorch's own meta kernels give output shapes and dtypes and raise PyTorch's
// own errors (broadcasting, in-place dtype rules) before anything is compiled.

c10::IValue to_meta(const c10::IValue& v) {
  auto meta = [](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || !t.is_privateuseone()) return t;
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
  };
  if (v.isTensor()) return meta(v.toTensor());
  // Generators never change output types, and PyTorch's Python meta kernels of some random ops
  // (the _refs of exponential_, log_normal_, cauchy_, geometric_) refuse any generator.
  if (v.isGenerator()) return c10::IValue();
  if (v.isTensorList()) {
    std::vector<at::Tensor> ts;
    for (const at::Tensor& t : v.toTensorVector()) ts.push_back(meta(t));
    return c10::IValue(ts);
  }
  if (v.isList()) {
    auto list = v.toList();
    bool has_tensors = false;
    for (const c10::IValue& item : list) has_tensors |= item.isTensor();
    if (has_tensors) {
      c10::List<std::optional<at::Tensor>> out;
      for (const c10::IValue& item : list) {
        out.push_back(item.isNone() ? std::optional<at::Tensor>() : meta(item.toTensor()));
      }
      return c10::IValue(out);
    }
  }
  return v;
}

// Runs `op` on meta copies of the given arguments; returns its returns.
torch::jit::Stack meta_call(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args) {
  torch::jit::Stack s;
  for (const auto& v : args) s.push_back(to_meta(v));
  op.callBoxed(&s);
  return s;
}

std::vector<TensorType> types_of(const torch::jit::Stack& returns, const std::string& op) {
  std::vector<TensorType> out;
  for (const auto& v : returns) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      out.push_back(lowering::tensor_type(t.scalar_type(), t.sizes()));
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) {
        out.push_back(lowering::tensor_type(t.scalar_type(), t.sizes()));
      }
    } else {
      TORCH_CHECK_NOT_IMPLEMENTED(false, "torchtpu: ", op, " returns a non-tensor value");
    }
  }
  return out;
}

// How a functional op's flat outputs group into its schema's returns (Entry::return_lists),
// from the called op's meta kernel; empty when no return is a list (or the grouping is unknown,
// which leaves the outputs flat as before).
std::vector<int> list_returns(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args,
                              size_t num_outputs) {
  bool any = false;
  for (const auto& r : op.schema().returns()) any |= r.type()->kind() == c10::TypeKind::ListType;
  if (!any) return {};
  torch::jit::Stack returns;
  try {
    returns = meta_call(op, args);
  } catch (const c10::NotImplementedError&) {
    return {};
  }
  std::vector<int> sizes;
  size_t total = 0;
  for (const auto& v : returns) {
    int n = v.isTensorList() ? static_cast<int>(v.toTensorList().size()) : -1;
    sizes.push_back(n);
    total += n < 0 ? 1 : static_cast<size_t>(n);
  }
  return total == num_outputs ? sizes : std::vector<int>{};
}

// The layout PyTorch's meta kernel gives a returned tensor when it is dense but not contiguous,
// as the CPU's kernels give it: channels_last from conv, batch_norm and elementwise ops, and
// TensorIterator's and empty_like's "preserve" layout (the clone of a transposed matrix, an
// elementwise op on a permuted tensor keep their input's strides). The permutation stores it in
// memory order, and the strides are the meta tensor's own (a size-1 dim's stride included).
// None: contiguous's strides (overlapping or gapped layouts, which no kernel returns here, too).
exec::Layout dense_layout(const c10::IValue& meta) {
  if (!meta.isTensor()) return {};
  const at::Tensor& t = meta.toTensor();
  if (!t.defined() || !t.is_non_overlapping_and_dense() ||
      t.strides() == c10::IntArrayRef(c10::contiguous_strides(t.sizes()))) {
    return {};
  }
  exec::Layout layout;
  layout.perm.resize(static_cast<size_t>(t.dim()));
  std::iota(layout.perm.begin(), layout.perm.end(), 0);
  // Outermost first; a stable sort keeps size-1 dims (whose strides can tie) in dim order.
  std::stable_sort(layout.perm.begin(), layout.perm.end(),
                   [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  layout.strides = t.strides().vec();
  return layout;
}

// ---------------------------------------------------------------------------------------------
// Building: an eager op is a one-node program spec whose arguments are the call's slots.

// `layouts`: per functional output, the dense_layout of its meta tensor (or none).
// Fills `entry` but its program; returns the module's text.
std::string build_program(const OpPlan& plan, CallState& state, const torch::jit::Stack& stack,
                          size_t first, const std::vector<TensorType>& out_types,
                          const std::vector<exec::Layout>& layouts, Entry& entry) {
  using Arg = exec::NodeArg;
  exec::ProgramSpec spec;
  spec.name = plan.called_name;
  std::vector<Arg> args;
  for (size_t j : plan.arg_map) {
    args.push_back({Arg::Kind::kInput, static_cast<int>(j), 0, {}, stack[first + j]});
  }
  exec::Node node;
  node.name = plan.lowering_name;
  node.schema = &plan.lowered_op->schema();
  node.lowering = plan.lowering;
  node.descriptor = plan.descriptor;
  node.out_types = out_types;
  node.args = std::move(args);
  spec.nodes.push_back(std::move(node));
  const auto result = [](size_t i) {
    return Arg{Arg::Kind::kNode, 0, static_cast<int>(i), {}, {}};
  };
  if (plan.variant == Variant::kFunctional) {
    for (size_t i = 0; i < out_types.size(); ++i) spec.returns.push_back(result(i));
    spec.layouts = layouts;
  } else {
    // A written Tensor[] (_foreach_add_, _fused_adam_) takes one result per element.
    for (size_t m : plan.mutated_args) {
      const ArgDesc& d = state.args[m];
      if (d.kind != ArgDesc::Kind::kTensorList) spec.writes.emplace_back(&d, result(0));
      for (const ArgDesc& item : d.items) spec.writes.emplace_back(&item, result(0));
    }
    TORCH_CHECK(spec.writes.size() == out_types.size(), "torchtpu: ", plan.called_name, " writes ",
                spec.writes.size(), " tensors but its lowering returns ", out_types.size());
    for (size_t i = 0; i < spec.writes.size(); ++i) spec.writes[i].second = result(i);
  }
  return exec::build(spec, state, entry);
}

// ---------------------------------------------------------------------------------------------
// Launch.

void launch(const OpPlan& plan, const Entry& entry, CallState& state, torch::jit::Stack* stack,
            size_t first) {
  const bool functional = plan.variant == Variant::kFunctional;
  // A functional program's outputs are its returns, in order; an in-place or out= one's are
  // the writes into its mutated arguments.
  c10::SmallVector<at::Tensor, 4> returns = exec::launch(
      entry, state, *stack, {}, functional ? entry.outputs.size() : 0, /*world=*/nullptr,
      entry.generic ? &state.out_sizes : nullptr, entry.generic ? &state.out_strides : nullptr);
  // Replace the arguments by the returns.
  if (!functional) {
    c10::SmallVector<c10::IValue, 4> written;
    // Only what the schema returns: `_fused_adam_` and `_foreach_add_` return nothing,
    // `_amp_update_scale_` writes two tensors and returns one.
    for (size_t i = 0; i < plan.mutated_args.size() && i < plan.called_returns; ++i) {
      written.push_back((*stack)[first + plan.mutated_args[i]]);
    }
    stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
    for (auto& r : written) stack->push_back(std::move(r));
    return;
  }
  stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  if (entry.return_lists.empty()) {
    for (auto& t : returns) stack->emplace_back(std::move(t));
    return;
  }
  size_t next = 0;
  for (int n : entry.return_lists) {
    if (n < 0) {
      stack->emplace_back(std::move(returns[next++]));
      continue;
    }
    c10::List<at::Tensor> list;
    list.reserve(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) list.push_back(std::move(returns[next++]));
    stack->emplace_back(std::move(list));
  }
}

// Resizes out= arguments the way the op's meta kernel does; true if anything changed.
bool resize_outs(const OpPlan& plan, const torch::jit::Stack& meta_returns,
                 torch::jit::Stack* stack, size_t first) {
  bool changed = false;
  for (size_t i = 0; i < plan.mutated_args.size() && i < meta_returns.size(); ++i) {
    if (!meta_returns[i].isTensor()) continue;
    const at::Tensor& want = meta_returns[i].toTensor();
    at::Tensor out = (*stack)[first + plan.mutated_args[i]].toTensor();
    if (out.sizes() != want.sizes()) {
      at::native::resize_output(out, want.sizes());
      changed = true;
    }
  }
  return changed;
}

}  // namespace

at::Tensor wrap_buffer(device::BufferPtr buffer, std::vector<int64_t> buffer_dims,
                       c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                       int device_index) {
  int64_t numel = c10::multiply_integers(sizes);
  size_t nbytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  auto storage = device::make_storage(nbytes, device_index, std::move(buffer),
                                      std::move(buffer_dims), lowering::to_element_type(dtype));
  auto t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      caffe2::TypeMeta::fromScalarType(dtype));
  if (strides.empty()) {
    t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  } else {
    t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  }
  return t;
}

at::Tensor wrap_buffer(device::BufferPtr buffer, c10::IntArrayRef sizes, c10::ScalarType dtype,
                       int device_index) {
  return wrap_buffer(std::move(buffer), device::buffer_dims(sizes), sizes, {}, dtype, device_index);
}

size_t program_cache_size() { return cache().programs.size(); }

namespace {

// ---------------------------------------------------------------------------------------------
// Recipes (runtime/compile.h): a signature recorded by an earlier process reaches its
// executable on disk without meta inference, lowering, printing or hashing the module.

// The op's name stands for the plan's address that starts the in-memory key.
std::string recipe_key_of(const c10::OperatorHandle& op, const CallState& state) {
  return exec::recipe_key("eager|" + full_name(op.schema().operator_name()),
                          std::string_view(state.key).substr(sizeof(const OpPlan*)));
}

std::string recipe_of(const OpPlan& plan, const Entry& e) {
  runtime::RecipeWriter w;
  exec::write_entry(w, e);
  // The number of returns; a loaded entry takes it from its plan.
  w.i64(static_cast<int64_t>(plan.variant == Variant::kFunctional ? e.outputs.size()
                                                                  : plan.mutated_args.size()));
  // How the outputs group into Tensor[] returns: without it a warm process handed functional
  // _fused_adam & co. a flat tuple of tensors where a cold one returned lists.
  w.ints(std::vector<int64_t>(e.return_lists.begin(), e.return_lists.end()));
  return w.bytes();
}

// Null when there is no recipe or it does not fit this call (then the caller builds).
std::shared_ptr<Entry> entry_from_recipe(const std::string& key, const CallState& state) {
  auto e = std::make_shared<Entry>();
  const auto rest = [&](runtime::RecipeReader& r) {
    r.i64();  // the number of returns
    size_t grouped = 0;
    for (int64_t n : r.ints()) {
      if (n < -1 || n > static_cast<int64_t>(e->outputs.size())) return false;
      e->return_lists.push_back(static_cast<int>(n));
      grouped += n < 0 ? 1 : static_cast<size_t>(n);
    }
    return e->return_lists.empty() || grouped == e->outputs.size();
  };
  if (!exec::load_entry(key, std::string(), *e, state.params.size(), 0, rest)) return nullptr;
  e->generic = state.generic;
  return e;
}

// The checks of a call that depend only on its signature, as TensorIterator makes them on CPU:
// a written tensor must not overlap itself, nor partially overlap an input.
void check_aliasing(const OpPlan& plan, const c10::OperatorHandle& op,
                    const torch::jit::Stack& stack, size_t first) {
  if (plan.variant == Variant::kFunctional) return;
  const size_t nargs = op.schema().arguments().size();
  for (size_t m : plan.mutated_args) {
    const c10::IValue& mv = stack[first + m];
    std::vector<at::Tensor> outs =
        mv.isTensorList() ? mv.toTensorVector() : std::vector<at::Tensor>{mv.toTensor()};
    for (const at::Tensor& out : outs) {
      at::assert_no_internal_overlap(out);
      for (size_t i = 0; i < nargs; ++i) {
        const c10::IValue& v = stack[first + i];
        if (i == m || !v.isTensor() || !v.toTensor().defined()) continue;
        if (v.toTensor().is_privateuseone()) at::assert_no_partial_overlap(out, v.toTensor());
      }
    }
  }
}

// Validates the call with PyTorch's meta kernels, sizes out= arguments and infers the lowered
// op's output types (and functional outputs' layouts) into `e`. Returns null when done, a
// fallback entry when the op has no meta kernel, or `resized` (out= arguments changed shape,
// so did the signature) set.
std::shared_ptr<Entry> infer_outputs(const OpPlan& plan, const c10::OperatorHandle& op,
                                     torch::jit::Stack* stack, size_t first, const CallState& state,
                                     int attempt, Entry& e, bool* resized) {
  std::vector<c10::IValue> called_args(stack->begin() + static_cast<std::ptrdiff_t>(first),
                                       stack->end());
  std::vector<TensorType>& out_types = e.out_types;
  std::vector<exec::Layout>& layouts = e.layouts;
  try {
    if (plan.variant != Variant::kFunctional) {
      torch::jit::Stack meta_returns = meta_call(op, called_args);
      if (plan.variant == Variant::kOut && attempt == 0 &&
          resize_outs(plan, meta_returns, stack, first)) {
        *resized = true;  // out= tensors changed shape: the signature changed too
        return nullptr;
      }
      if (*plan.lowered_op == op) out_types = types_of(meta_returns, plan.called_name);
    }
    if (out_types.empty()) {
      std::vector<c10::IValue> lowered_args;
      for (size_t idx : plan.arg_map) lowered_args.push_back(called_args[idx]);
      torch::jit::Stack meta_returns = meta_call(*plan.lowered_op, lowered_args);
      out_types = types_of(meta_returns, plan.lowering_name);
      if (plan.variant == Variant::kFunctional) {
        bool any = false;
        for (const auto& r : meta_returns) {
          layouts.push_back(dense_layout(r));
          any |= !layouts.back().perm.empty();
        }
        if (state.generic) {
          // A size-generic program's new tensors take each call's layout (exec/generic.h),
          // which must be the one PyTorch gives this call.
          const at::Tensor& r = meta_returns.at(0).toTensor();
          const c10::DimVector plain = c10::contiguous_strides(state.out_sizes);
          const c10::IntArrayRef want =
              state.out_strides.empty() ? c10::IntArrayRef(plain) : state.out_strides;
          if (meta_returns.size() != 1 || !r.strides().equals(want)) {
            auto exact = std::make_shared<Entry>();
            exact->exact_only = true;
            return exact;
          }
          any = false;
        }
        if (plan.called_name == "aten::convolution" && !layouts.empty()) {
          // Its meta kernel says contiguous; the CPU returns channels_last when the input or
          // the weight is channels_last.
          const at::Tensor& in = (*stack)[first].toTensor();
          const at::Tensor& w = (*stack)[first + 1].toTensor();
          at::MemoryFormat f =
              in.dim() == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast;
          if ((in.dim() == 4 || in.dim() == 5) &&
              (in.suggest_memory_format() == f || w.suggest_memory_format() == f)) {
            at::Tensor like = at::empty(meta_returns[0].toTensor().sizes(),
                                        at::TensorOptions().device(c10::kMeta), f);
            layouts[0] = dense_layout(like);
            any |= !layouts[0].perm.empty();
          }
        }
        if (!any) layouts.clear();
      }
    }
  } catch (const c10::NotImplementedError& err) {
    // No meta kernel: we cannot know the output types, so the CPU runs it.
    auto fb = std::make_shared<Entry>();
    fb->fallback = std::string("no meta kernel: ") + err.what_without_backtrace();
    return fb;
  }
  return nullptr;
}

// Lowers the call's one-op program over `state` (scanned with views) into `e` and returns its
// module's text; a fallback entry in `*declined` when the lowering declines the signature.
std::string lower_entry(const OpPlan& plan, const c10::OperatorHandle& op,
                        const torch::jit::Stack& stack, size_t first, CallState& state, Entry& e,
                        const std::string& signature, std::shared_ptr<Entry>* declined) {
  std::string text;
  try {
    text = build_program(plan, state, stack, first, e.out_types, e.layouts, e);
  } catch (const c10::NotImplementedError& err) {
    auto fb = std::make_shared<Entry>();
    fb->fallback = err.what_without_backtrace();
    *declined = fb;
    return text;
  } catch (const c10::Error& err) {
    TORCH_CHECK(false, "torchtpu: lowering ", plan.lowering_name, " failed for ", signature, ": ",
                err.what_without_backtrace());
  } catch (const std::exception& err) {
    TORCH_CHECK(false, "torchtpu: lowering ", plan.lowering_name, " failed for ", signature, ": ",
                err.what());
  }
  if (plan.variant == Variant::kFunctional) {
    std::vector<c10::IValue> called_args(stack.begin() + static_cast<std::ptrdiff_t>(first),
                                         stack.end());
    e.return_lists = list_returns(op, called_args, e.outputs.size());
  }
  return text;
}

// A signature missed the cache: validates the call, infers output types and builds the
// program (or a fallback entry when the op cannot run natively). Null when out= arguments were
// resized, which changes the signature.
std::shared_ptr<Entry> build_entry(const OpPlan& plan, const c10::OperatorHandle& op,
                                   torch::jit::Stack* stack, size_t first, CallState& state,
                                   int attempt) {
  const auto& schema = op.schema();
  const OpPlan* plan_ptr = &plan;
  // Miss: checking aliasing here covers every later hit (it depends only on the signature).
  check_aliasing(plan, op, *stack, first);
  // Recorded by an earlier process: everything below depends only on the signature and
  // succeeded then (only built programs are recorded; out= arguments were already sized).
  const std::string recipe = recipe_key_of(op, state);
  if (!recipe.empty()) {
    if (std::shared_ptr<Entry> recorded = entry_from_recipe(recipe, state)) {
      runtime::metrics().cache_misses++;
      auto sig = std::make_shared<runtime::Signature>(
          eager_signature(plan.called_name, schema, state, *stack, first));
      // Not compiled, but still a miss of an op that may have other signatures cached: counted
      // and explained like one.
      cache().signatures.explain_miss(plan.called_name, *sig);
      recorded->signature = sig;
      cache().signatures.add(plan.called_name, sig);
      return recorded;
    }
  }
  auto built = std::make_shared<Entry>();
  bool resized = false;
  if (auto fb = infer_outputs(plan, op, stack, first, state, attempt, *built, &resized)) return fb;
  if (resized) return nullptr;

  runtime::metrics().cache_misses++;
  if (state.generic) {
    // Whole buckets of the result's dtype; the call's shape stays out of the program (a
    // generic scan has its views already).
    const int64_t bucket = device::bucket_elements(c10::multiply_integers(state.out_sizes));
    for (TensorType& t : built->out_types) t = TensorType(t.dtype, {bucket});
  } else {
    // The program builder needs every argument's view: scan again, with views.
    CallState described;
    described.key.append(state.key.data(), sizeof(plan_ptr));
    Scanner(described, /*with_views=*/true).scan(schema, *stack, first);
    TORCH_INTERNAL_ASSERT(described.key == state.key, "torchtpu: unstable signature");
    state = std::move(described);
  }
  auto sig = std::make_shared<runtime::Signature>(
      eager_signature(plan.called_name, schema, state, *stack, first));
  const std::string signature = sig->describe();
  std::shared_ptr<Entry> declined;
  std::string text = lower_entry(plan, op, *stack, first, state, *built, signature, &declined);
  if (declined) return declined;
  if (state.generic && built->checks) {
    // A device-side check reads every element, a bucket's padding included: exact programs.
    auto exact = std::make_shared<Entry>();
    exact->exact_only = true;
    return exact;
  }
  std::string why = cache().signatures.explain_miss(plan.called_name, *sig);
  std::string metadata = recipe.empty() ? std::string() : recipe_of(plan, *built);
  if (plan.called_name == "torchtpu::stablehlo_call") {
    // A user's own module, which the plugin may well reject: they learn it at the call
    // (torchtpu.stablehlo_op words the error), not at a later read.
    built->program =
        runtime::compile_program(text, signature, why, exec::compile_options_of(*built));
    if (!recipe.empty()) runtime::store_recipe(recipe, *built->program, metadata);
  }
  built->signature = sig;
  built->generic = state.generic;
  cache().signatures.add(plan.called_name, sig);
  if (built->program) return built;
  // Off the critical path (runtime/compile_pool.h): the op returns with pending results.
  const size_t num_outputs = built->outputs.size() + (built->checks ? 1 : 0);
  // Its largest array decides its compile effort (runtime::effort_for).
  int64_t largest = 0;
  for (const Param& p : state.params) {
    if (p.kind == Param::Kind::kStorage) largest = std::max(largest, lowering::numel_of(p.dims));
  }
  for (const TensorType& t : built->out_types)
    largest = std::max(largest, lowering::numel_of(t.shape));
  const runtime::Effort effort =
      runtime::effort_for(runtime::ProgramClass::kEagerOp, largest, text);
  built->program = runtime::compile_program_async(
      std::move(text), std::move(signature), std::move(why), num_outputs, recipe,
      std::move(metadata), exec::compile_options_of(*built), effort);
  return built;
}

}  // namespace

// A size-generic program (exec/generic.h) for the call: true when it ran, or when it must run
// on the CPU (`fallback` says why); false when the call takes the exact path.
bool run_generic(const OpPlan& plan, const c10::OperatorHandle& op, torch::jit::Stack* stack,
                 size_t first, std::optional<std::string>* fallback) {
  PooledCallState pooled;
  CallState& state = *pooled;
  const OpPlan* plan_ptr = &plan;
  state.key.append(reinterpret_cast<const char*>(&plan_ptr), sizeof(plan_ptr));
  if (!scan_generic_call(plan, op, *stack, first, state)) return false;
  bool hit = false;
  const auto build = [&] {
    std::shared_ptr<Entry> built = build_entry(plan, op, stack, first, state, 0);
    if (built && !built->fallback && !built->exact_only) {
      record_signature(op, *stack, first, state.key);
    }
    return built;
  };
  std::shared_ptr<Entry> entry = cache().programs.get_or_build(state.key, build, &hit);
  if (entry && hit && !entry->fallback && !entry->exact_only && entry->program->failed()) {
    cache().programs.erase(state.key, entry);
    entry = cache().programs.get_or_build(state.key, build, &hit);
  }
  if (!entry || entry->exact_only) return false;
  if (hit) runtime::metrics().cache_hits++;
  if (entry->fallback) {
    *fallback = entry->fallback;
    return true;
  }
  launch(plan, *entry, state, stack, first);
  return true;
}

std::optional<std::string> run_native(const OpPlan& plan, const c10::OperatorHandle& op,
                                      torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t first = stack->size() - nargs;
  // Fused eager records exact-shape nodes (a size-generic entry's out_types are whole buckets,
  // not the call's shape), so size-generic programs serve only strict eager.
  if (generic_candidate(plan) && !fused::enabled()) {
    std::optional<std::string> fallback;
    if (run_generic(plan, op, stack, first, &fallback)) return fallback;
  }

  if (plan.variant == Variant::kOut && *plan.lowered_op == op) {
    // Out= ops lowered as themselves (arange.out, linspace.out, eye.out) size their outputs from
    // scalar *values*, which the signature deliberately leaves out: size them on every call.
    std::vector<c10::IValue> called_args(stack->begin() + static_cast<std::ptrdiff_t>(first),
                                         stack->end());
    resize_outs(plan, meta_call(op, called_args), stack, first);
  }
  if (fused::enabled()) {
    // Fused eager (exec/fused_eager.h): the call joins its device's pending region.
    std::string reason;
    switch (fused::record(plan, op, stack, &reason)) {
      case fused::Recorded::kRecorded:
        return std::nullopt;
      case fused::Recorded::kFallback:
        return reason;
      case fused::Recorded::kEager:
        break;
    }
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    PooledCallState pooled;
    CallState& state = *pooled;
    const OpPlan* plan_ptr = &plan;  // plans live forever: their address names the op
    state.key.append(reinterpret_cast<const char*>(&plan_ptr), sizeof(plan_ptr));
    Scanner(state, /*with_views=*/false).scan(schema, *stack, first);

    bool hit = false;
    const auto build = [&] {
      std::shared_ptr<Entry> built = build_entry(plan, op, stack, first, state, attempt);
      // For torchtpu.warmup: this call, as a replayable record of its signature.
      if (built && !built->fallback) record_signature(op, *stack, first, state.key);
      return built;
    };
    std::shared_ptr<Entry> entry = cache().programs.get_or_build(state.key, build, &hit);
    if (entry && hit && !entry->fallback && entry->program->failed()) {
      // Its compile failed in the background (that error went to the launches that used it):
      // compile again, as a synchronous failure would have left nothing cached either.
      cache().programs.erase(state.key, entry);
      entry = cache().programs.get_or_build(state.key, build, &hit);
    }
    if (!entry) continue;  // out= arguments changed shape: so did the signature
    if (hit) runtime::metrics().cache_hits++;
    if (entry->fallback) return entry->fallback;
    launch(plan, *entry, state, stack, first);
    return std::nullopt;
  }
  TORCH_CHECK(false, "torchtpu: ", plan.called_name, ": out= arguments keep changing shape");
}

std::shared_ptr<OpEntry> describe_native(const OpPlan& plan, const c10::OperatorHandle& op,
                                         torch::jit::Stack* stack, CallState& state, int attempt) {
  const size_t first = stack->size() - op.schema().arguments().size();
  check_aliasing(plan, op, *stack, first);
  auto e = std::make_shared<Entry>();
  bool resized = false;
  if (auto fb = infer_outputs(plan, op, stack, first, state, attempt, *e, &resized)) return fb;
  if (resized) return nullptr;
  std::shared_ptr<Entry> declined;
  lower_entry(plan, op, *stack, first, state, *e, plan.called_name, &declined);
  return declined ? declined : e;
}

const c10::OperatorHandle& op_handle(const char* name, const char* overload) {
  static std::mutex m;
  // Node-based: a handle's address stays valid while later lookups insert.
  static std::unordered_map<std::string, c10::OperatorHandle> handles;
  std::string key = std::string(name) + "." + overload;
  std::lock_guard<std::mutex> g(m);
  auto it = handles.find(key);
  if (it == handles.end()) {
    it = handles.emplace(key, c10::Dispatcher::singleton().findSchemaOrThrow(name, overload)).first;
  }
  return it->second;
}

}  // namespace torchtpu::exec
