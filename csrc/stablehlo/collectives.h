// Typed emission of StableHLO's cross-replica collectives. A program holding them is compiled
// for several replicas (pjrt::replicated_compile_options) and launched once per replica, each on
// its own device; replica ids index the compile options' device list.
//
// What is checked here, before any plugin sees the module: XLA requires replica groups that are
// disjoint, of one size and (together) cover every replica, and source-target pairs with unique
// sources and targets; the XLA CPU runtime aborts the process on some violations (a
// collective_permute with a channel handle), so nothing here emits channel handles and every
// violation is a std::invalid_argument naming it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "stablehlo/builder.h"

namespace torchtpu::shlo {

// Each inner list holds the replica ids of one group, in the group's rank order.
using ReplicaGroups = std::vector<std::vector<int64_t>>;

// Throws std::invalid_argument unless `groups` partition replicas 0..num_replicas-1 into groups
// of one size.
void check_replica_groups(const ReplicaGroups& groups, int64_t num_replicas);

// The combiner of all_reduce / reduce_scatter, applied elementwise.
enum class ReduceKind { kSum, kProduct, kMin, kMax, kAnd, kOr, kXor };

// Elementwise reduction over each group; the result has the operand's type.
Value all_reduce(FunctionBuilder& b, Value operand, ReduceKind kind, const ReplicaGroups& groups);
// The group's operands concatenated along `dim`, in group rank order.
Value all_gather(FunctionBuilder& b, Value operand, int64_t dim, const ReplicaGroups& groups);
// all_reduce, then the i-th of the group's equal parts along `dim` for group rank i.
Value reduce_scatter(FunctionBuilder& b, Value operand, int64_t dim, ReduceKind kind,
                     const ReplicaGroups& groups);
// Splits the operand into group-size equal parts along `split_dim`, sends part j to group rank j
// and concatenates the received parts along `concat_dim`.
Value all_to_all(FunctionBuilder& b, Value operand, int64_t split_dim, int64_t concat_dim,
                 const ReplicaGroups& groups);
// Replica `target` receives replica `source`'s operand for each (source, target) pair; replicas
// that are no pair's target receive zeros.
Value collective_permute(FunctionBuilder& b, Value operand,
                         const std::vector<std::pair<int64_t, int64_t>>& source_target_pairs);
// This replica's id, tensor<ui32>.
Value replica_id(FunctionBuilder& b);

}  // namespace torchtpu::shlo
