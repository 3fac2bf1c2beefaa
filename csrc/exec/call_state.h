// Per-call state shared by eager op kernels and compiled graphs: the signature key, and the
// runtime values (storage buffers, scalars, generator states) that feed a program.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include <string>
#include <vector>

#include "device/storage.h"
#include "exec/numerics.h"
#include "lowering/strided.h"
#include "runtime/compile.h"
#include "stablehlo/types.h"

namespace torchtpu::exec {

struct Param {
  // kInts: a runtime s64 vector (`ints`), the geometry of a size-generic call (exec/generic.h).
  enum class Kind { kStorage, kScalar, kCpuTensor, kGenerator, kInts } kind;
  // kStorage
  c10::StorageImpl* storage = nullptr;
  device::BufferPtr buffer;
  std::vector<int64_t> dims;
  shlo::ElementType dtype = shlo::ElementType::kF32;
  // kScalar / kCpuTensor
  c10::Scalar scalar;
  size_t arg_index = 0;  // kGenerator: where the Generator? sits on the stack
  // kGenerator drawn ahead (fused eager draws when it records an op, where a strict launch
  // would): a launch passes this (seed, offset) instead of drawing from the stack's generator.
  bool drawn = false;
  uint64_t seed_offset[2] = {0, 0};
  at::Tensor cpu_tensor;
  std::vector<int64_t> ints;  // kInts
};

struct ArgDesc {
  enum class Kind {
    kTensor,
    kTensorList,
    kScalar,
    kScalarList,  // `items` are kScalar (a runtime int list: roll's shifts)
    kDefaultScalar,
    kGenerator,
    kConst,
    kNone
  };
  Kind kind = Kind::kNone;
  int param = -1;  // tensor / scalar / generator
  // kTensor of a view that does not cover its whole storage: the s64 kScalar param holding
  // its storage offset, a runtime value so that moving the view never recompiles.
  int offset_param = -1;
  // kTensor of a size-generic call read (or written) through its runtime geometry: which view
  // of CallState::generic_geometry it is (exec/generic.h); -1 when it is not.
  int generic_view = -1;
  lowering::StridedView view;
  c10::ScalarType dtype = c10::kFloat;
  std::vector<ArgDesc> items;  // kTensorList (kNone entries for absent optionals), kScalarList
  // Back to a default-constructed ArgDesc, keeping the view's allocations (see CallState::clear).
  void reset();
};

struct CallState {
  std::string key;
  std::vector<Param> params;
  std::vector<ArgDesc> args;  // one per called-op argument
  int device = -1;
  bool any_f64 = false;
  // torch's numeric settings at the scan (exec/numerics.h): one byte of `key`; the build reads
  // them from here.
  Numerics numerics;
  // A size-generic call (exec/generic.h): the shape of its result, which the program does not
  // know (its new tensors take it at launch).
  bool generic = false;
  std::vector<int64_t> out_sizes;
  // Its strides, when not contiguous (a layout PyTorch gives the result of permuted inputs).
  std::vector<int64_t> out_strides;
  // The kInts param of its runtime geometry (lowering::GenericSpace), -1 when it needs none,
  // and the rank of its iteration space.
  int geometry_param = -1;
  int64_t generic_rank = 0;
  // Dims lists of released params, reused by the next scan (see PooledCallState).
  std::vector<std::vector<int64_t>> spare_dims;
  // Sizes `args` to `n` slots, each reset: a pooled state keeps its ArgDescs from call to call
  // instead of destroying and constructing them on every op.
  void reset_args(size_t n);
  // Empties the state, keeping its allocations for the next call.
  void clear();
};

// A per-thread CallState for one eager op, reused by the next op on the thread so that a cache
// hit allocates no key, parameter or argument lists. Nested ops (a CPU fallback or a kernel
// running tpu ops inside an op) take the next state of the thread's pool.
class PooledCallState {
 public:
  PooledCallState();
  ~PooledCallState();
  PooledCallState(const PooledCallState&) = delete;
  PooledCallState& operator=(const PooledCallState&) = delete;
  CallState& operator*() const { return *state_; }
  CallState* operator->() const { return state_; }

 private:
  CallState* state_;
};

bool is_scalar_type(const c10::TypePtr& t);     // Scalar or Scalar?
bool is_generator_type(const c10::TypePtr& t);  // Generator or Generator?
// A `float`/`int`/`int[]` (not Scalar) argument whose value changes from call to call in real
// workloads (the fused optimizers' learning rate, which a scheduler moves every step; random
// ops' bounds and parameters; dropout's p; roll's shifts): it travels as runtime scalars like a
// Scalar, and its lowering reads it as a Value (LoweringContext::number / number_list).
bool is_runtime_number(const c10::FunctionSchema& schema, const c10::Argument& arg);
// The dtype a Python scalar travels in: i1, i64, or f32 (f64 when f64 data is involved).
shlo::ElementType scalar_element_type(const c10::Scalar& s, bool any_f64);

// Appends arguments to a CallState: tensors become (deduplicated) storage parameters with
// their view's sizes and strides in the key and its offset a runtime parameter; Scalars become
// runtime parameters unless equal to the default.
class Scanner {
 public:
  // Without `with_views` the per-argument views are left empty: a cache hit never needs them,
  // only building a program does.
  explicit Scanner(CallState& s, bool with_views = true) : s_(s), with_views_(with_views) {}
  void tensor(const at::Tensor& t, ArgDesc& d);
  // Scans an op's arguments, stack[first ...].
  void scan(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t first);
  // The same for a size-generic program (exec/generic.h) of result shape s.out_sizes: tensors
  // are keyed by their class and their storage's size bucket, never by their sizes, and read as
  // whole buckets. False when an argument does not fit one (the caller then scans again for an
  // exact program, on a cleared state).
  bool scan_generic(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                    size_t first);

 private:
  // The CallState.params index of t's storage (added at its first use in the call).
  int storage_param(const at::Tensor& t);
  void generic_tensor(const at::Tensor& t, int index, ArgDesc& d);  // exec/generic.cpp
  void constant(const c10::IValue& v);
  void runtime_number(const c10::Scalar& value, ArgDesc& d);
  int scalar_param(const c10::Scalar& value, shlo::ElementType dtype);  // returns its index
  CallState& s_;
  bool with_views_;
  bool generic_ = false;
  bool generic_fits_ = true;
};

// Uploads runtime scalars and generator states (index -1: the device's default generator),
// launches `program` on device `dev`, and returns its output buffers. `launch_id`: one replica of
// a program with collectives (runtime::Program::execute).
std::vector<device::BufferPtr> launch_program(const runtime::Program& program,
                                              const std::vector<int>& used_params, CallState& state,
                                              const torch::jit::Stack& stack, uint64_t rng_numel,
                                              int dev, int launch_id = 0);

}  // namespace torchtpu::exec
