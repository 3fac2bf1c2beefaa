// Collectives inside programs: torch's functional collectives (_c10d_functional, what DTensor,
// FSDP2 and tensor parallelism emit under torch.compile) and the tpu backend's eager collectives
// (torchtpu::c10d_*, whose schemas distributed/xla_ops.cpp declares) as StableHLO cross-replica
// ops. One replica runs per rank; ctx.replica_groups(group_name) says which replicas each group
// spans (runtime/collective_world.h plans them). Graph-only entries: eager calls of these ops on
// tpu tensors keep going to the process group, which builds its programs from these same
// lowerings (distributed/xla_transport.cpp).
//
// Every replica runs the same module, so a rank-dependent result (broadcast's root, reduce's
// root, a permute's targets) is a select on the replica's position in its group, computed from
// stablehlo.replica_id in the program.
#include "stablehlo/collectives.h"

#include <c10/util/Exception.h>

#include <string>
#include <vector>

#include "lowering/common.h"
#include "lowering/lowering.h"
#include "stablehlo/ops.h"

namespace torchtpu::lowering {
namespace {

using shlo::ReduceKind;
using shlo::ReplicaGroups;

const std::string& group_name(const LoweringContext& ctx) {
  const c10::IValue& v = ctx.arg(ctx.index_of("group_name")).ivalue;
  TORCH_CHECK(v.isString(), "torchtpu: ", ctx.schema().name(),
              ": group_name must be a string, got ", v.tagKind());
  return v.toStringRef();
}

const ReplicaGroups& groups_of(LoweringContext& ctx) {
  const ReplicaGroups& groups = ctx.replica_groups(group_name(ctx));
  try {
    shlo::check_replica_groups(groups, ctx.num_replicas());
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "torchtpu: ", ctx.schema().name(), " over group '",
                                group_name(ctx), "': ", e.what());
  }
  return groups;
}

int64_t group_size(const ReplicaGroups& groups) { return static_cast<int64_t>(groups[0].size()); }

// A `group_size` argument must be the group's size (torch passes it beside the name).
void check_group_size(LoweringContext& ctx, const ReplicaGroups& groups) {
  const int64_t given = ctx.int_arg(ctx.index_of("group_size"));
  TORCH_CHECK(given == group_size(groups), "torchtpu: ", ctx.schema().name(), ": group_size ",
              given, " but group '", group_name(ctx), "' has ", group_size(groups), " ranks");
}

// What an all_reduce / reduce_scatter of `reduce_op` ("sum", "avg", ...) does to values of `t`:
// the combiner, and whether the result is divided by the group size afterwards (avg).
struct Reduction {
  ReduceKind kind = ReduceKind::kSum;
  bool average = false;
};

Reduction reduction_of(const LoweringContext& ctx, const std::string& op, ElementType t) {
  const bool integral = shlo::is_integer(t) || t == ElementType::kPred;
  if (op == "sum") return {ReduceKind::kSum, false};
  if (op == "avg") {
    TORCH_CHECK(!integral, "torchtpu: ", ctx.schema().name(),
                ": ReduceOp.AVG needs a floating point tensor, got ",
                c10::toString(to_scalar_type(t)));
    return {ReduceKind::kSum, true};
  }
  if (op == "product") return {ReduceKind::kProduct, false};
  if (op == "min") return {ReduceKind::kMin, false};
  if (op == "max") return {ReduceKind::kMax, false};
  if (op == "band" || op == "bor" || op == "bxor") {
    TORCH_CHECK(integral, "torchtpu: ", ctx.schema().name(), ": ReduceOp.", op,
                " needs an integer or bool tensor, got ", c10::toString(to_scalar_type(t)));
    return {op == "band"  ? ReduceKind::kAnd
            : op == "bor" ? ReduceKind::kOr
                          : ReduceKind::kXor,
            false};
  }
  TORCH_CHECK(false, "torchtpu: ", ctx.schema().name(), ": unknown reduce op '", op, "'");
}

Value average(FunctionBuilder& b, Value sum, int64_t n) {
  return b.div(sum, b.constant(static_cast<double>(n), sum.type));
}

bool bitwise(ReduceKind kind) {
  return kind == ReduceKind::kAnd || kind == ReduceKind::kOr || kind == ReduceKind::kXor;
}

// A bitwise reduction over the group: XLA's CPU runtime has no bitwise all-reduce, so the group's
// operands are gathered (a new leading dim) and reduced here.
Value bitwise_reduce_all(FunctionBuilder& b, Value x, ReduceKind kind,
                         const ReplicaGroups& groups) {
  std::vector<int64_t> row = x.shape();
  row.insert(row.begin(), 1);
  Value all = shlo::all_gather(b, b.reshape(x, row), 0, groups);
  const char* op = kind == ReduceKind::kAnd  ? "stablehlo.and"
                   : kind == ReduceKind::kOr ? "stablehlo.or"
                                             : "stablehlo.xor";
  const TensorType scalar(x.dtype(), {});
  // and: all bits set (-1, or true); or, xor: none.
  Value init = kind != ReduceKind::kAnd ? b.constant_int(0, scalar)
               : x.dtype() == ElementType::kPred
                   ? b.constant_int(1, scalar)
                   : b.unary("stablehlo.not", b.constant_int(0, scalar));
  return b.reduce_simple(all, init, {0}, op);
}

Value reduce_all(LoweringContext& ctx, Value x, const std::string& op,
                 const ReplicaGroups& groups) {
  const Reduction r = reduction_of(ctx, op, x.dtype());
  if (bitwise(r.kind)) return bitwise_reduce_all(ctx.b, x, r.kind, groups);
  Value out = shlo::all_reduce(ctx.b, x, r.kind, groups);
  return r.average ? average(ctx.b, out, group_size(groups)) : out;
}

// This replica's position in its group (0-d s32), from a table indexed by replica_id.
Value position_in_group(FunctionBuilder& b, const ReplicaGroups& groups, int64_t num_replicas) {
  std::vector<double> pos(static_cast<size_t>(num_replicas), 0);
  for (const auto& g : groups) {
    for (size_t i = 0; i < g.size(); ++i) pos[static_cast<size_t>(g[i])] = static_cast<double>(i);
  }
  const TensorType s32(ElementType::kS32, {num_replicas});
  Value table = shlo::constant_values(b, pos, s32);
  Value id = b.convert(shlo::replica_id(b), ElementType::kS32);
  return b.reshape(shlo::dynamic_slice(b, table, {id}, {1}), {});
}

// Whether this replica's position in its group is `position` (0-d i1).
Value at_position(FunctionBuilder& b, const ReplicaGroups& groups, int64_t num_replicas,
                  int64_t position) {
  Value pos = position_in_group(b, groups, num_replicas);
  return b.compare(pos, b.constant_int(position, TensorType(ElementType::kS32, {})),
                   shlo::CompareDirection::kEQ);
}

// The unsigned integer type of `t`'s width, for moving values bit for bit.
ElementType bits_type(ElementType t) {
  switch (shlo::bit_width(t)) {
    case 8:
      return ElementType::kU8;
    case 16:
      return ElementType::kU16;
    case 32:
      return ElementType::kU32;
    default:
      return ElementType::kU64;
  }
}

// `sum` (an integer-sum collective) over the root's bits and the other ranks' zeros, back in x's
// type: the root's values bit for bit (no float rounding, NaN payloads and signed zeros kept).
// Shared by broadcast (all_reduce) and scatter (reduce_scatter).
template <typename IntegerSum>
Value sum_of_root_bits(LoweringContext& ctx, Value x, int64_t root, const ReplicaGroups& groups,
                       IntegerSum sum) {
  FunctionBuilder& b = ctx.b;
  const bool pred = x.dtype() == ElementType::kPred;
  Value bits = pred
                   ? b.convert(x, ElementType::kU8)
                   : (shlo::is_integer(x.dtype()) ? x : b.bitcast_convert(x, bits_type(x.dtype())));
  Value is_root = at_position(b, groups, ctx.num_replicas(), root);
  Value mine = b.select(b.broadcast_to(is_root, bits.shape()), bits, zeros(b, bits.type));
  Value got = sum(mine);
  if (pred) return b.compare(got, zeros(b, got.type), shlo::CompareDirection::kNE);
  return shlo::is_integer(x.dtype()) ? got : b.bitcast_convert(got, x.dtype());
}

// The group's `root` operand on every replica, bit for bit: the root contributes its bits and
// the others zeros to an integer sum (one collective, no float rounding, NaN payloads and
// signed zeros kept).
Value broadcast_from(LoweringContext& ctx, Value x, int64_t root, const ReplicaGroups& groups) {
  FunctionBuilder& b = ctx.b;
  TORCH_CHECK(root >= 0 && root < group_size(groups), "torchtpu: ", ctx.schema().name(),
              ": root rank ", root, " is not in a group of ", group_size(groups), " ranks");
  TORCH_CHECK_NOT_IMPLEMENTED(!shlo::is_complex(x.dtype()), "torchtpu: ", ctx.schema().name(),
                              " of complex tensors inside a program");
  return sum_of_root_bits(ctx, x, root, groups, [&](Value mine) {
    return shlo::all_reduce(b, mine, ReduceKind::kSum, groups);
  });
}

const std::string& string_arg(const LoweringContext& ctx, const char* name) {
  return ctx.arg(ctx.index_of(name)).ivalue.toStringRef();
}

// ---- _c10d_functional ----

std::vector<Value> lower_all_reduce(LoweringContext& ctx) {
  const ReplicaGroups& groups = groups_of(ctx);
  return {reduce_all(ctx, ctx.tensor(0), string_arg(ctx, "reduce_op"), groups)};
}

std::vector<Value> lower_all_reduce_coalesced(LoweringContext& ctx) {
  const ReplicaGroups& groups = groups_of(ctx);
  std::vector<Value> out;
  for (Value x : ctx.tensor_list(0)) {
    out.push_back(reduce_all(ctx, x, string_arg(ctx, "reduce_op"), groups));
  }
  return out;
}

// Gathers along dim 0 (a 0-d input gathers into a vector), shaped as torch says.
Value gather_one(LoweringContext& ctx, Value x, const ReplicaGroups& groups,
                 const TensorType& out) {
  if (x.rank() == 0) x = ctx.b.reshape(x, {1});
  return ctx.b.reshape(shlo::all_gather(ctx.b, x, 0, groups), out.shape);
}

std::vector<Value> lower_all_gather_into_tensor(LoweringContext& ctx) {
  const ReplicaGroups& groups = groups_of(ctx);
  check_group_size(ctx, groups);
  return {gather_one(ctx, ctx.tensor(0), groups, ctx.out_type())};
}

std::vector<Value> lower_all_gather_into_tensor_coalesced(LoweringContext& ctx) {
  const ReplicaGroups& groups = groups_of(ctx);
  check_group_size(ctx, groups);
  std::vector<Value> in = ctx.tensor_list(0), out;
  for (size_t i = 0; i < in.size(); ++i)
    out.push_back(gather_one(ctx, in[i], groups, ctx.out_type(i)));
  return out;
}

Value scatter_one(LoweringContext& ctx, Value x, const ReplicaGroups& groups) {
  const Reduction r = reduction_of(ctx, string_arg(ctx, "reduce_op"), x.dtype());
  TORCH_CHECK(x.rank() > 0 && x.shape()[0] % group_size(groups) == 0,
              "torchtpu: ", ctx.schema().name(), ": the input's first dimension (",
              x.rank() ? x.shape()[0] : 0, ") must split into ", group_size(groups),
              " equal parts");
  if (bitwise(r.kind)) {
    // The whole reduction, then this rank's part of it.
    Value all = bitwise_reduce_all(ctx.b, x, r.kind, groups);
    const int64_t part = x.shape()[0] / group_size(groups);
    Value start = ctx.b.mul(position_in_group(ctx.b, groups, ctx.num_replicas()),
                            ctx.b.constant_int(part, TensorType(ElementType::kS32, {})));
    std::vector<Value> starts = {start};
    std::vector<int64_t> sizes = x.shape();
    sizes[0] = part;
    for (size_t d = 1; d < sizes.size(); ++d) {
      starts.push_back(ctx.b.constant_int(0, TensorType(ElementType::kS32, {})));
    }
    return shlo::dynamic_slice(ctx.b, all, starts, sizes);
  }
  Value out = shlo::reduce_scatter(ctx.b, x, 0, r.kind, groups);
  return r.average ? average(ctx.b, out, group_size(groups)) : out;
}

std::vector<Value> lower_reduce_scatter_tensor(LoweringContext& ctx) {
  const ReplicaGroups& groups = groups_of(ctx);
  check_group_size(ctx, groups);
  return {scatter_one(ctx, ctx.tensor(0), groups)};
}

std::vector<Value> lower_reduce_scatter_tensor_coalesced(LoweringContext& ctx) {
  const ReplicaGroups& groups = groups_of(ctx);
  check_group_size(ctx, groups);
  std::vector<Value> out;
  for (Value x : ctx.tensor_list(0)) out.push_back(scatter_one(ctx, x, groups));
  return out;
}

// Even splits only: uneven ones give every rank a different output shape, which one module
// for all replicas cannot have (the eager backend pads them: distributed/xla_transport.cpp).
std::vector<Value> lower_all_to_all_single(LoweringContext& ctx) {
  const ReplicaGroups& groups = groups_of(ctx);
  Value x = ctx.tensor(0);
  const int64_t k = group_size(groups);
  TORCH_CHECK(x.rank() > 0, "torchtpu: all_to_all_single of a 0-d tensor");
  const int64_t rows = x.shape()[0];
  for (const char* name : {"output_split_sizes", "input_split_sizes"}) {
    std::vector<int64_t> splits = ctx.int_list(ctx.index_of(name));
    if (splits.empty()) continue;
    bool even = static_cast<int64_t>(splits.size()) == k;
    for (int64_t s : splits) even = even && s * k == rows;
    TORCH_CHECK_NOT_IMPLEMENTED(even, "torchtpu: all_to_all_single with uneven ", name,
                                " inside a program");
  }
  TORCH_CHECK(rows % k == 0, "torchtpu: all_to_all_single: the input's first dimension (", rows,
              ") must split into ", k, " equal parts");
  return {shlo::all_to_all(ctx.b, x, 0, 0, groups)};
}

std::vector<Value> lower_broadcast(LoweringContext& ctx) {
  const ReplicaGroups& groups = groups_of(ctx);
  return {broadcast_from(ctx, ctx.tensor(0), ctx.int_arg(ctx.index_of("src")), groups)};
}

// The collective's result, typed as torch says: the program holding the collective runs it, so
// waiting for it is nothing more.
std::vector<Value> lower_wait_tensor(LoweringContext& ctx) { return {finish(ctx, ctx.tensor(0))}; }

// ---- torchtpu::c10d_* (the eager backend's) ----

// Only the group's `root` receives the reduction; the others keep their input.
std::vector<Value> lower_c10d_reduce(LoweringContext& ctx) {
  const ReplicaGroups& groups = groups_of(ctx);
  Value x = ctx.tensor(0);
  const int64_t root = ctx.int_arg(ctx.index_of("root"));
  TORCH_CHECK(root >= 0 && root < group_size(groups), "torchtpu: reduce: root rank ", root,
              " is not in a group of ", group_size(groups), " ranks");
  Value reduced = reduce_all(ctx, x, string_arg(ctx, "reduce_op"), groups);
  Value is_root = at_position(ctx.b, groups, ctx.num_replicas(), root);
  return {ctx.b.select(ctx.b.broadcast_to(is_root, x.shape()), reduced, x)};
}

// `stacked` holds one row per group rank, meaningful on the group's `root` only: every rank gets
// the root's row of its own rank, bit for bit (the root contributes its bits, the others zeros, to
// an integer reduce-scatter).
std::vector<Value> lower_c10d_scatter(LoweringContext& ctx) {
  const ReplicaGroups& groups = groups_of(ctx);
  FunctionBuilder& b = ctx.b;
  Value x = ctx.tensor(0);
  const int64_t root = ctx.int_arg(ctx.index_of("root"));
  TORCH_CHECK(root >= 0 && root < group_size(groups), "torchtpu: scatter: root rank ", root,
              " is not in a group of ", group_size(groups), " ranks");
  TORCH_CHECK(x.rank() > 0 && x.shape()[0] == group_size(groups),
              "torchtpu: scatter: ", x.type.str(), " does not hold one row per rank of a group of ",
              group_size(groups));
  TORCH_CHECK_NOT_IMPLEMENTED(!shlo::is_complex(x.dtype()),
                              "torchtpu: scatter of complex tensors inside a program");
  return {sum_of_root_bits(ctx, x, root, groups, [&](Value mine) {
    return shlo::reduce_scatter(b, mine, 0, ReduceKind::kSum, groups);
  })};
}

// `pairs` = [source, target, ...] in group ranks: each target receives its source's input,
// every other rank keeps its own.
std::vector<Value> lower_c10d_permute(LoweringContext& ctx) {
  const ReplicaGroups& groups = groups_of(ctx);
  Value x = ctx.tensor(0);
  const std::vector<int64_t> flat = ctx.int_list(ctx.index_of("pairs"));
  TORCH_CHECK(!flat.empty() && flat.size() % 2 == 0, "torchtpu: c10d_permute needs pairs");
  const int64_t k = group_size(groups);
  std::vector<std::pair<int64_t, int64_t>> pairs;
  std::vector<double> is_target(static_cast<size_t>(ctx.num_replicas()), 0);
  for (const auto& g : groups) {
    for (size_t i = 0; i < flat.size(); i += 2) {
      TORCH_CHECK(flat[i] >= 0 && flat[i] < k && flat[i + 1] >= 0 && flat[i + 1] < k,
                  "torchtpu: send/recv peer out of range for a group of ", k, " ranks");
      const int64_t target = g[static_cast<size_t>(flat[i + 1])];
      pairs.emplace_back(g[static_cast<size_t>(flat[i])], target);
      is_target[static_cast<size_t>(target)] = 1;
    }
  }
  FunctionBuilder& b = ctx.b;
  Value moved;
  try {
    moved = shlo::collective_permute(b, x, pairs);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "torchtpu: send/recv: ", e.what());
  }
  Value table =
      shlo::constant_values(b, is_target, TensorType(ElementType::kS32, {ctx.num_replicas()}));
  Value id = b.convert(shlo::replica_id(b), ElementType::kS32);
  Value mine =
      b.compare(b.reshape(shlo::dynamic_slice(b, table, {id}, {1}), {}),
                b.constant_int(0, TensorType(ElementType::kS32, {})), shlo::CompareDirection::kNE);
  return {b.select(b.broadcast_to(mine, x.shape()), moved, x)};
}

constexpr uint32_t kFlags = kGraphOnly | kCollective;

TORCHTPU_LOWERING("_c10d_functional::all_reduce", lower_all_reduce, kFlags);
TORCHTPU_LOWERING("_c10d_functional::all_reduce_coalesced", lower_all_reduce_coalesced, kFlags);
TORCHTPU_LOWERING("_c10d_functional::all_gather_into_tensor", lower_all_gather_into_tensor, kFlags);
TORCHTPU_LOWERING("_c10d_functional::all_gather_into_tensor_coalesced",
                  lower_all_gather_into_tensor_coalesced, kFlags);
TORCHTPU_LOWERING("_c10d_functional::reduce_scatter_tensor", lower_reduce_scatter_tensor, kFlags);
TORCHTPU_LOWERING("_c10d_functional::reduce_scatter_tensor_coalesced",
                  lower_reduce_scatter_tensor_coalesced, kFlags);
TORCHTPU_LOWERING("_c10d_functional::all_to_all_single", lower_all_to_all_single, kFlags);
TORCHTPU_LOWERING("_c10d_functional::broadcast", lower_broadcast, kFlags);
TORCHTPU_LOWERING("_c10d_functional::wait_tensor", lower_wait_tensor, kGraphOnly | kComplex);
TORCHTPU_LOWERING("torchtpu::c10d_reduce", lower_c10d_reduce, kFlags);
TORCHTPU_LOWERING("torchtpu::c10d_permute", lower_c10d_permute, kFlags);
TORCHTPU_LOWERING("torchtpu::c10d_scatter", lower_c10d_scatter, kFlags);

}  // namespace
}  // namespace torchtpu::lowering
