// A small typed builder that prints a StableHLO module as MLIR text (generic op form, which
// every StableHLO parser version accepts). The lowering table emits through it, in eager
// mode (one op per module) and in compiled mode (one graph per module) alike.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stablehlo/types.h"

namespace torchtpu::shlo {

// An SSA value: its id prints as %v<id>.
// Results of a multi-result op share one id and are told apart by `index` (%v<id>#<index>).
struct Value {
  int id = -1;
  TensorType type;
  int index = -1;
  std::string name() const {
    std::string n = "%v" + std::to_string(id);
    return index < 0 ? n : n + "#" + std::to_string(index);
  }
  const std::vector<int64_t>& shape() const { return type.shape; }
  ElementType dtype() const { return type.dtype; }
  int64_t rank() const { return type.rank(); }
};

enum class CompareDirection { kEQ, kNE, kLT, kLE, kGT, kGE };

class FunctionBuilder;
// Builds a region body: receives the block arguments, returns the values to yield.
using RegionFn = std::function<std::vector<Value>(FunctionBuilder&, const std::vector<Value>&)>;

// stablehlo.gather's dimension numbers (field names as in the StableHLO spec). Empty lists are
// left out of the printed attribute, as the StableHLO printer does.
struct GatherDims {
  std::vector<int64_t> offset_dims;
  std::vector<int64_t> collapsed_slice_dims;
  std::vector<int64_t> start_index_map;
  int64_t index_vector_dim = 0;
};

// stablehlo.scatter's dimension numbers.
struct ScatterDims {
  std::vector<int64_t> update_window_dims;
  std::vector<int64_t> inserted_window_dims;
  std::vector<int64_t> scatter_dims_to_operand_dims;
  int64_t index_vector_dim = 0;
};

// "[1, 2]": the list syntax inside StableHLO's structured attributes.
std::string dims_list(const std::vector<int64_t>& v);

// "array<i64: 1, 2>".
std::string i64_array(const std::vector<int64_t>& v);
// A literal for a dense splat attribute of this element type ("1.5", "0x7F800000", "true").
std::string scalar_literal(double value, ElementType t);
std::string scalar_literal_int(int64_t value, ElementType t);

class FunctionBuilder {
 public:
  // Value ids are drawn from a counter shared by all builders of a module, so nested regions
  // never shadow outer names.
  explicit FunctionBuilder(std::shared_ptr<int> counter, int indent = 4);

  // ---- generic emission ----
  Value op(const std::string& name, const std::vector<Value>& operands, const TensorType& result,
           const std::string& attrs = "");
  std::vector<Value> op_multi(
      const std::string& name, const std::vector<Value>& operands,
      const std::vector<TensorType>& results, const std::string& attrs = "",
      const std::vector<std::pair<std::vector<TensorType>, RegionFn>>& regions = {});

  // ---- constants ----
  Value constant(double value, const TensorType& type);
  Value constant_int(int64_t value, const TensorType& type);
  Value iota(const TensorType& type, int64_t dim);

  // ---- elementwise (operands must already share shape; binary ops share dtype too) ----
  Value unary(const std::string& name, Value a);  // e.g. "stablehlo.exponential"
  Value binary(const std::string& name, Value a, Value b);
  Value add(Value a, Value b) { return binary("stablehlo.add", a, b); }
  Value sub(Value a, Value b) { return binary("stablehlo.subtract", a, b); }
  Value mul(Value a, Value b) { return binary("stablehlo.multiply", a, b); }
  Value div(Value a, Value b) { return binary("stablehlo.divide", a, b); }
  Value max(Value a, Value b) { return binary("stablehlo.maximum", a, b); }
  Value min(Value a, Value b) { return binary("stablehlo.minimum", a, b); }
  Value neg(Value a) { return unary("stablehlo.negate", a); }
  Value abs(Value a) { return unary("stablehlo.abs", a); }
  Value compare(Value a, Value b, CompareDirection dir);
  Value select(Value pred, Value on_true, Value on_false);
  Value clamp(Value lo, Value x, Value hi);
  Value convert(Value a, ElementType to);  // no-op when already `to`
  Value bitcast_convert(Value a, ElementType to);

  // ---- shape ----
  Value reshape(Value a, const std::vector<int64_t>& shape);  // no-op when equal
  Value broadcast_in_dim(Value a, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& dims);
  // Numpy-style broadcast of `a` to `shape` (trailing dims aligned).
  Value broadcast_to(Value a, const std::vector<int64_t>& shape);
  Value transpose(Value a, const std::vector<int64_t>& perm);  // no-op for identity
  Value slice(Value a, const std::vector<int64_t>& start, const std::vector<int64_t>& limit,
              const std::vector<int64_t>& strides);
  Value pad(Value a, Value pad_value, const std::vector<int64_t>& low,
            const std::vector<int64_t>& high, const std::vector<int64_t>& interior);
  Value concatenate(const std::vector<Value>& values, int64_t dim);
  Value dynamic_update_slice(Value operand, Value update, const std::vector<Value>& start);

  // ---- reductions and contractions ----
  // Reduces `inputs` over `dims` with a body built by `body` (2*N scalar block args).
  std::vector<Value> reduce(const std::vector<Value>& inputs, const std::vector<Value>& inits,
                            const std::vector<int64_t>& dims, const RegionFn& body);
  // Sorts `operands` (same shape) along `dim`; `comparator` gets 2*N scalar block args
  // (lhs_0, rhs_0, lhs_1, rhs_1, ...) and yields one i1 "lhs goes first".
  std::vector<Value> sort(const std::vector<Value>& operands, int64_t dim, bool is_stable,
                          const RegionFn& comparator);
  // stablehlo.while: `cond` gets the loop-carried values and yields one tensor<i1> (keep
  // going); `body` gets them and yields their next values (same types). Returns the values
  // after the last iteration. Throws std::invalid_argument if a region yields wrong types.
  std::vector<Value> while_loop(const std::vector<Value>& init, const RegionFn& cond,
                                const RegionFn& body);
  // Single-input reduction with a binary op body ("stablehlo.add", "stablehlo.maximum", ...).
  Value reduce_simple(Value input, Value init, const std::vector<int64_t>& dims,
                      const std::string& body_op);
  // stablehlo.gather: slices of `slice_sizes` from `operand` at the starts `indices` holds.
  Value gather(Value operand, Value indices, const GatherDims& dims,
               const std::vector<int64_t>& slice_sizes, const TensorType& result);
  // stablehlo.scatter of `updates` into `operand` (one operand, one update), combining the
  // existing element (block argument 0) with the update (1) by `combine`.
  Value scatter(Value operand, Value indices, Value updates, const ScatterDims& dims,
                const RegionFn& combine);
  Value dot_general(Value lhs, Value rhs, const std::vector<int64_t>& lhs_batch,
                    const std::vector<int64_t>& rhs_batch, const std::vector<int64_t>& lhs_contract,
                    const std::vector<int64_t>& rhs_contract, const TensorType& result);

  // ---- function structure ----
  Value add_argument(const TensorType& type, const std::string& attrs = "");
  const std::vector<Value>& arguments() const { return args_; }
  // Attributes of argument `index` (e.g. "tf.aliasing_output = 0 : i32" to donate it).
  void set_argument_attrs(size_t index, std::string attrs) {
    arg_attrs_.at(index) = std::move(attrs);
  }
  // Terminator: "func.return" in a function, "stablehlo.return" inside a region.
  void emit_return(const std::vector<Value>& values, const char* op = "func.return");
  const std::string& body() const { return body_; }
  std::string arg_list() const;
  const std::vector<std::string>& arg_attrs() const { return arg_attrs_; }

 private:
  int next_id() { return (*counter_)++; }
  std::string region_text(const std::vector<TensorType>& arg_types, const RegionFn& fn);
  void line(const std::string& s);

  std::shared_ptr<int> counter_;
  int indent_;
  std::string body_;
  std::vector<Value> args_;
  std::vector<std::string> arg_attrs_;
};

// One module with one public function @main.
class ModuleBuilder {
 public:
  ModuleBuilder();
  FunctionBuilder& main() { return main_; }
  // Records the results and their types; call once.
  void finish(const std::vector<Value>& results);
  const std::vector<TensorType>& result_types() const { return result_types_; }
  // A program of `n` replicas (cross-replica collectives, stablehlo/collectives.h): printed as
  // the module's mhlo.num_replicas, which XLA checks against the compile options.
  void set_num_replicas(int64_t n) { num_replicas_ = n; }
  int64_t num_replicas() const { return num_replicas_; }
  std::string str() const;

 private:
  std::shared_ptr<int> counter_;
  FunctionBuilder main_;
  std::vector<TensorType> result_types_;
  bool finished_ = false;
  int64_t num_replicas_ = 0;  // 0: a single-device program (no attribute)
};

}  // namespace torchtpu::shlo
