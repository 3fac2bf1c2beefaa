#include "lowering/checks.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <limits>

#include "config/config.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

thread_local CheckCollector* current_collector = nullptr;

}  // namespace

bool device_checks_enabled() {
  static const bool on = config::flag("TORCHTPU_INDEX_CHECKS", true);
  return on;
}

CheckCollector::CheckCollector() : previous_(current_collector) { current_collector = this; }
CheckCollector::~CheckCollector() { current_collector = previous_; }

void check(LoweringContext& ctx, Value ok, std::string message, bool index_error,
           std::optional<Value> value) {
  if (!device_checks_enabled() || current_collector == nullptr) return;
  TORCH_INTERNAL_ASSERT(ok.rank() == 0 && ok.dtype() == ElementType::kPred,
                        "torchtpu lowering: a device-side check must be an i1 scalar");
  FunctionBuilder& b = ctx.b;
  DeviceCheck c;
  c.failed = b.unary("stablehlo.not", ok);
  c.value = value ? b.convert(*value, ElementType::kS64)
                  : b.constant_int(0, TensorType(ElementType::kS64, {}));
  c.op = ctx.schema().name();
  c.message = std::move(message);
  c.index_error = index_error;
  current_collector->add(std::move(c));
}

Value all_true(FunctionBuilder& b, Value ok) {
  Value flat = b.reshape(ok, {ok.type.numel()});
  return b.reduce_simple(flat, b.constant(1, TensorType(ElementType::kPred, {})), {0},
                         "stablehlo.and");
}

void check_indices(LoweringContext& ctx, Value idx, int64_t lo, int64_t hi, std::string message,
                   bool index_error, std::optional<int64_t> except) {
  if (!device_checks_enabled() || current_collector == nullptr || idx.type.numel() == 0) return;
  FunctionBuilder& b = ctx.b;
  Value i = b.convert(idx, ElementType::kS64);
  if (i.rank() != 1) i = b.reshape(i, {i.type.numel()});
  const TensorType& t = i.type;
  Value bad = b.binary("stablehlo.or", b.compare(i, b.constant_int(lo, t), CompareDirection::kLT),
                       b.compare(i, b.constant_int(hi, t), CompareDirection::kGE));
  if (except) {
    bad = b.binary("stablehlo.and", bad,
                   b.compare(i, b.constant_int(*except, t), CompareDirection::kNE));
  }
  TensorType pred(ElementType::kPred, {});
  Value any = b.reduce_simple(bad, b.constant(0, pred), {0}, "stablehlo.or");
  // An offending value for the message: the largest bad one (a too-large index if any).
  TensorType s64(ElementType::kS64, {});
  Value lowest = b.constant_int(std::numeric_limits<int64_t>::min(), s64);
  Value culprit = b.reduce_simple(b.select(bad, i, b.broadcast_to(lowest, t.shape)), lowest, {0},
                                  "stablehlo.maximum");
  check(ctx, b.unary("stablehlo.not", any), std::move(message), index_error, culprit);
}

void check_dim_indices(LoweringContext& ctx, Value idx, int64_t dim, int64_t size,
                       bool allow_negative, bool index_error, const std::string& prefix) {
  check_indices(ctx, idx, allow_negative ? -size : 0, size,
                prefix + "index {} is out of bounds for dimension " + std::to_string(dim) +
                    " with size " + std::to_string(size),
                index_error);
}

Value pack_checks(FunctionBuilder& b, const std::vector<DeviceCheck>& checks) {
  std::vector<Value> parts;
  for (const DeviceCheck& c : checks) {
    parts.push_back(b.reshape(b.convert(c.failed, ElementType::kS64), {1}));
    parts.push_back(b.reshape(c.value, {1}));
  }
  return b.concatenate(parts, 0);
}

}  // namespace torchtpu::lowering
