// The ONE lowering table: aten op (functional overload, e.g. "aten::add.Tensor") + the
// structure of its arguments -> StableHLO ops. Eager kernels (one op per module) and the
// torch.compile backend (one FX graph per module) both emit through it.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "stablehlo/builder.h"
#include "stablehlo/collectives.h"

namespace torchtpu::lowering {

using shlo::ElementType;
using shlo::FunctionBuilder;
using shlo::TensorType;
using shlo::Value;

// One schema argument as a lowering sees it.
struct LArg {
  enum class Kind {
    kTensor,      // `value` holds the (already gathered) tensor; an absent optional is kNone
    kTensorList,  // `values` (absent entries of an optional list are nullopt)
    kScalar,      // a Scalar *value*: a 0-d runtime argument in `value` (never baked in);
                  // `ivalue` holds a sample of its Python type (double/int/bool) for promotion
    kGenerator,   // `value` is a tensor<2xui64> (seed, offset) runtime argument
    kConst,       // structural: int, int list, bool, double attribute, dtype, string...
    kNone,
  };
  Kind kind = Kind::kNone;
  Value value;
  std::vector<std::optional<Value>> values;
  c10::IValue ivalue;  // kScalar: a sample value; kTensor: the eager input tensor (else None)
  // kScalar: the schema's default value, a constant of the program (its value is structure:
  // `ivalue` is that very value, not a sample).
  bool is_default = false;
};

class LoweringContext {
 public:
  LoweringContext(FunctionBuilder& builder, const c10::FunctionSchema& schema,
                  std::vector<LArg> args, std::vector<TensorType> out_types, std::string platform)
      : b(builder),
        schema_(schema),
        args_(std::move(args)),
        out_types_(std::move(out_types)),
        platform_(std::move(platform)) {}

  FunctionBuilder& b;

  // The PJRT platform the program is built for ("cpu", "cuda", "tpu"). A lowering may pick a
  // formulation by it; it never asks the runtime (lowering cannot see runtime/), so whoever
  // caches programs keys them by the platform too.
  const std::string& platform() const { return platform_; }

  const c10::FunctionSchema& schema() const { return schema_; }
  size_t num_args() const { return args_.size(); }
  const LArg& arg(size_t i) const { return args_.at(i); }
  // Index of the argument called `name` in the schema; throws if absent.
  size_t index_of(const std::string& name) const;
  // What the op must return, as the meta kernels (eager) or FX fake tensors (compile) say.
  const std::vector<TensorType>& out_types() const { return out_types_; }
  const TensorType& out_type(size_t i = 0) const { return out_types_.at(i); }

  bool is_none(size_t i) const;
  Value tensor(size_t i) const;                    // kTensor; throws a clear error otherwise
  std::vector<Value> tensor_list(size_t i) const;  // kTensorList without absent entries
  int64_t int_arg(size_t i) const;
  double double_arg(size_t i) const;
  bool bool_arg(size_t i) const;
  std::vector<int64_t> int_list(size_t i) const;  // also accepts a single int
  std::optional<int64_t> optional_int(size_t i) const;
  std::optional<c10::ScalarType> optional_dtype(size_t i) const;

  // The (seed, offset) tensor<2xui64> of the default generator, for random ops whose schema
  // has no Generator argument (native_dropout). Each call reserves a fresh stream.
  Value rng_state();
  void set_rng_source(std::function<Value()> fn) { rng_source_ = std::move(fn); }

  // Collective lowerings (kCollective): the replica groups of the process group named
  // `group_name` in this program (replica ids index the program's devices), and the program's
  // replica count. The engine plans them from the program's groups before lowering; a group
  // the program cannot run collectives of throws c10::NotImplementedError.
  const shlo::ReplicaGroups& replica_groups(const std::string& group_name) const;
  int64_t num_replicas() const { return num_replicas_; }
  using CollectiveSource = std::function<const shlo::ReplicaGroups&(const std::string&)>;
  void set_collective_source(CollectiveSource fn, int64_t num_replicas) {
    collective_source_ = std::move(fn);
    num_replicas_ = num_replicas;
  }

  // A tensor or Scalar argument converted to `dtype` (runtime scalars stay runtime).
  Value operand(size_t i, ElementType dtype) const;
  // The dtype PyTorch's type promotion gives these tensor/Scalar arguments
  // (dimensioned tensors > zero-dim tensors > Python scalars; categories bool < int < float).
  c10::ScalarType promoted_type(const std::vector<size_t>& indices) const;

 private:
  const c10::FunctionSchema& schema_;
  std::vector<LArg> args_;
  std::vector<TensorType> out_types_;
  std::string platform_;
  std::function<Value()> rng_source_;
  CollectiveSource collective_source_;
  int64_t num_replicas_ = 1;
};

// Returns one Value per schema return (in-place and out= variants are handled by the caller,
// which lowers their functional form and writes the results back).
using LoweringFn = std::function<std::vector<Value>(LoweringContext&)>;

// One descriptor per op: its lowering and the facts both execution paths (eager kernels and
// compiled graphs) read about it, declared once where the lowering is registered, so adding an
// op means one lowering + one descriptor + one test, and no list elsewhere to keep in step.
enum OpFlag : uint32_t {
  // The lowering handles complex values (tests/python/test_complex_ops.py checks each against
  // the CPU). Without it a complex operand (tensor, list, Scalar or dtype=) sends an eager call
  // to the CPU fallback and makes a compiled graph decline, since lowerings written for real
  // dtypes may drop an imaginary part silently.
  kComplex = 1u << 0,
  // Only compiled graphs use this entry: view ops (metadata in eager mode), factories and
  // device-changing copies. Eager kernels never see it.
  kGraphOnly = 1u << 1,
  // The op replaces its first argument's value without reading it (copy_). In a compiled graph
  // that argument must be a graph input, whose storage receives the result when the program
  // finishes (a mutated input kept in the graph: BatchNorm stats, optimizer state); the lowering
  // sees it as None and returns the new value, which the graph executor types as that input.
  kOverwritesSelf = 1u << 2,
  // A collective over the process group its `group_name` argument names (lowering/
  // collectives.cpp). The engine gives the program one replica per device of the groups' world
  // (runtime/collective_world.h) before lowering, and launches it on every rank.
  kCollective = 1u << 3,
  // The result is computed element by element from the operands broadcast to its shape (and
  // Scalars), and the lowering reads no operand's shape beyond that: run over whole flat
  // buffers of any length it computes the same elements. With size buckets the engine then
  // compiles one program per bucket instead of one per shape (exec/generic.h).
  kElementwise = 1u << 4,
};

struct OpDescriptor {
  std::string name;  // "aten::add.Tensor" ("aten::relu" when the overload name is empty)
  LoweringFn fn;
  uint32_t flags = 0;  // OpFlag bits

  bool complex() const { return (flags & kComplex) != 0; }
  bool graph_only() const { return (flags & kGraphOnly) != 0; }
  bool overwrites_self() const { return (flags & kOverwritesSelf) != 0; }
  bool collective() const { return (flags & kCollective) != 0; }
  bool elementwise() const { return (flags & kElementwise) != 0; }
};

// Registration happens from static initializers; the returned pointers stay valid for the life
// of the process.
void register_lowering(const std::string& op_name, LoweringFn fn, uint32_t flags = 0);
// Any entry (the compile path); null if none.
const OpDescriptor* find_op(const std::string& op_name);
// Entries eager kernels may use (not kGraphOnly); null if none.
const OpDescriptor* find_eager_op(const std::string& op_name);
// Shorthands for the lowering alone.
const LoweringFn* find_lowering(const std::string& op_name);
const LoweringFn* find_eager_lowering(const std::string& op_name);
std::vector<std::string> lowered_op_names();
// Every descriptor, sorted by name (for the docs and the tests).
std::vector<const OpDescriptor*> op_descriptors();
// Op names registered more than once (should be none: one entry per op).
std::vector<std::string> duplicate_lowerings();
// For aten::_foreach_* ops: a lowering that applies the per-tensor op's lowering to every list
// element, synthesized (and registered, graph-only) on first use; null if there is no
// per-tensor lowering.
const LoweringFn* foreach_lowering(const c10::OperatorHandle& op);

// Registers from a static initializer beside each lowering, with its facts:
//   TORCHTPU_LOWERING("aten::relu", lower_relu);
//   TORCHTPU_LOWERING("aten::exp", lower_exp, kComplex);
//   TORCHTPU_GRAPH_LOWERING("aten::view", reshape_to_out);  // = flags kGraphOnly
struct LoweringRegistrar {
  LoweringRegistrar(const char* name, LoweringFn fn, uint32_t flags = 0) {
    register_lowering(name, std::move(fn), flags);
  }
};
#define TORCHTPU_LOWERING_CONCAT_(a, b) a##b
#define TORCHTPU_LOWERING_CONCAT(a, b) TORCHTPU_LOWERING_CONCAT_(a, b)
#define TORCHTPU_LOWERING(name, ...)                                       \
  static ::torchtpu::lowering::LoweringRegistrar TORCHTPU_LOWERING_CONCAT( \
      registrar_, __COUNTER__)(name, __VA_ARGS__)
#define TORCHTPU_GRAPH_LOWERING(name, fn) \
  TORCHTPU_LOWERING(name, fn, ::torchtpu::lowering::kGraphOnly)

// CPU kernels reject some dtypes outright; a lowering must reject them too rather than compute
// something. `reject_bool_result`: the op's result dtype is bool ("<what>" not implemented for
// 'Bool'). `reject_bool_operands`: any bool tensor or Scalar operand raises `message`.
LoweringFn reject_bool_result(const char* what, LoweringFn fn);
LoweringFn reject_bool_operands(const char* message, LoweringFn fn);

// ---- helpers shared by the op families ----
ElementType to_element_type(c10::ScalarType t);  // throws for unsupported (complex, quantized)
c10::ScalarType to_scalar_type(ElementType t);
TensorType tensor_type(c10::ScalarType t, c10::IntArrayRef sizes);
// Normalizes a possibly negative dim against `rank`.
int64_t wrap_dim(int64_t dim, int64_t rank);
// A 0-d or n-d constant of `type` (value splat).
Value full_like_type(FunctionBuilder& b, double value, const TensorType& type);
// Broadcast + convert so `v` has exactly `type`.
Value coerce(FunctionBuilder& b, Value v, const TensorType& type);

// A tensor of zeros of this type.
Value zeros(FunctionBuilder& b, const TensorType& type);

// The results of an op whose output_mask leaves some outputs out (backward ops). Eager kernels
// type every output (unrequested ones get zeros); compiled graphs carry types for the requested
// ones only, in order. Each value is reshaped (same element count) and coerced to its type.
std::vector<Value> masked_results(LoweringContext& ctx,
                                  const std::vector<std::optional<Value>>& values);

}  // namespace torchtpu::lowering
