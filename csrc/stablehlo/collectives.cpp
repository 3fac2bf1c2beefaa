// Typed cross-replica collectives (collectives.h): their attribute text is printed here, once.
#include "stablehlo/collectives.h"

#include <set>
#include <stdexcept>
#include <string>

namespace torchtpu::shlo {
namespace {

// "dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>".
std::string pairs_attr(const std::vector<std::vector<int64_t>>& rows, size_t width) {
  std::string s = "dense<[";
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i) s += ", ";
    s += dims_list(rows[i]);
  }
  return s + "]> : tensor<" + std::to_string(rows.size()) + "x" + std::to_string(width) + "xi64>";
}

std::string groups_attr(const ReplicaGroups& groups) {
  if (groups.empty()) throw std::invalid_argument("stablehlo collective: no replica groups");
  const size_t size = groups[0].size();
  std::set<int64_t> seen;
  for (const auto& g : groups) {
    if (g.size() != size || g.empty()) {
      throw std::invalid_argument(
          "stablehlo collective: replica groups must all have the same, non-zero size");
    }
    for (int64_t r : g) {
      if (r < 0 || !seen.insert(r).second) {
        throw std::invalid_argument("stablehlo collective: replica " + std::to_string(r) +
                                    " is negative or in two groups");
      }
    }
  }
  return "replica_groups = " + pairs_attr(groups, size);
}

const char* combiner(ReduceKind kind, ElementType t) {
  switch (kind) {
    case ReduceKind::kSum:
      return t == ElementType::kPred ? "stablehlo.or" : "stablehlo.add";
    case ReduceKind::kProduct:
      return t == ElementType::kPred ? "stablehlo.and" : "stablehlo.multiply";
    case ReduceKind::kMin:
      return "stablehlo.minimum";
    case ReduceKind::kMax:
      return "stablehlo.maximum";
    case ReduceKind::kAnd:
      return "stablehlo.and";
    case ReduceKind::kOr:
      return "stablehlo.or";
    case ReduceKind::kXor:
      return "stablehlo.xor";
  }
  return "stablehlo.add";
}

RegionFn scalar_combiner(ReduceKind kind, ElementType t) {
  const char* name = combiner(kind, t);
  return [name](FunctionBuilder& r, const std::vector<Value>& args) {
    return std::vector<Value>{r.binary(name, args[0], args[1])};
  };
}

int64_t group_size(const ReplicaGroups& groups) {
  return groups.empty() ? 0 : static_cast<int64_t>(groups[0].size());
}

void check_dim(const char* op, Value v, int64_t dim) {
  if (dim < 0 || dim >= v.rank()) {
    throw std::invalid_argument(std::string("stablehlo.") + op + ": dimension " +
                                std::to_string(dim) + " out of range for " + v.type.str());
  }
}

}  // namespace

void check_replica_groups(const ReplicaGroups& groups, int64_t num_replicas) {
  groups_attr(groups);  // one size, disjoint
  int64_t covered = 0;
  for (const auto& g : groups) {
    for (int64_t r : g) {
      if (r >= num_replicas) {
        throw std::invalid_argument("stablehlo collective: replica " + std::to_string(r) +
                                    " of a group is not among the program's " +
                                    std::to_string(num_replicas) + " replicas");
      }
      ++covered;
    }
  }
  if (covered != num_replicas) {
    throw std::invalid_argument("stablehlo collective: the replica groups cover " +
                                std::to_string(covered) + " of the program's " +
                                std::to_string(num_replicas) + " replicas; they must cover all");
  }
}

Value all_reduce(FunctionBuilder& b, Value operand, ReduceKind kind, const ReplicaGroups& groups) {
  const TensorType scalar(operand.dtype(), {});
  return b.op_multi("stablehlo.all_reduce", {operand}, {operand.type}, groups_attr(groups),
                    {{{scalar, scalar}, scalar_combiner(kind, operand.dtype())}})[0];
}

Value all_gather(FunctionBuilder& b, Value operand, int64_t dim, const ReplicaGroups& groups) {
  check_dim("all_gather", operand, dim);
  std::vector<int64_t> shape = operand.shape();
  shape[static_cast<size_t>(dim)] *= group_size(groups);
  return b.op("stablehlo.all_gather", {operand}, operand.type.with_shape(shape),
              "all_gather_dim = " + std::to_string(dim) + " : i64, " + groups_attr(groups));
}

Value reduce_scatter(FunctionBuilder& b, Value operand, int64_t dim, ReduceKind kind,
                     const ReplicaGroups& groups) {
  check_dim("reduce_scatter", operand, dim);
  std::vector<int64_t> shape = operand.shape();
  const int64_t k = group_size(groups);
  if (k == 0 || shape[static_cast<size_t>(dim)] % k != 0) {
    throw std::invalid_argument("stablehlo.reduce_scatter: dimension " + std::to_string(dim) +
                                " of " + operand.type.str() + " does not split into " +
                                std::to_string(k) + " equal parts");
  }
  shape[static_cast<size_t>(dim)] /= k;
  const TensorType scalar(operand.dtype(), {});
  return b.op_multi("stablehlo.reduce_scatter", {operand}, {operand.type.with_shape(shape)},
                    "scatter_dimension = " + std::to_string(dim) + " : i64, " + groups_attr(groups),
                    {{{scalar, scalar}, scalar_combiner(kind, operand.dtype())}})[0];
}

Value all_to_all(FunctionBuilder& b, Value operand, int64_t split_dim, int64_t concat_dim,
                 const ReplicaGroups& groups) {
  check_dim("all_to_all", operand, split_dim);
  check_dim("all_to_all", operand, concat_dim);
  std::vector<int64_t> shape = operand.shape();
  const int64_t k = group_size(groups);
  if (k == 0 || shape[static_cast<size_t>(split_dim)] % k != 0) {
    throw std::invalid_argument("stablehlo.all_to_all: dimension " + std::to_string(split_dim) +
                                " of " + operand.type.str() + " does not split into " +
                                std::to_string(k) + " equal parts");
  }
  shape[static_cast<size_t>(split_dim)] /= k;
  shape[static_cast<size_t>(concat_dim)] *= k;
  return b.op("stablehlo.all_to_all", {operand}, operand.type.with_shape(shape),
              "split_dimension = " + std::to_string(split_dim) +
                  " : i64, concat_dimension = " + std::to_string(concat_dim) +
                  " : i64, split_count = " + std::to_string(k) + " : i64, " + groups_attr(groups));
}

Value collective_permute(FunctionBuilder& b, Value operand,
                         const std::vector<std::pair<int64_t, int64_t>>& source_target_pairs) {
  if (source_target_pairs.empty()) {
    throw std::invalid_argument("stablehlo.collective_permute: no source-target pairs");
  }
  std::set<int64_t> sources, targets;
  std::vector<std::vector<int64_t>> rows;
  for (const auto& [s, t] : source_target_pairs) {
    if (s < 0 || t < 0 || !sources.insert(s).second || !targets.insert(t).second) {
      throw std::invalid_argument(
          "stablehlo.collective_permute: each replica may be the source of one pair and the "
          "target of one pair (got a repeated or negative replica " +
          std::to_string(s) + " -> " + std::to_string(t) + ")");
    }
    rows.push_back({s, t});
  }
  return b.op("stablehlo.collective_permute", {operand}, operand.type,
              "source_target_pairs = " + pairs_attr(rows, 2));
}

Value replica_id(FunctionBuilder& b) {
  return b.op("stablehlo.replica_id", {}, TensorType(ElementType::kU32, {}));
}

}  // namespace torchtpu::shlo
