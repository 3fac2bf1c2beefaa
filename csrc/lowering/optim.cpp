// Fused optimizer steps (torch.optim.Adam/AdamW/SGD(fused=True)): every parameter's update in
// ONE program. Follows PyTorch's CPU kernels (aten/src/ATen/native/cpu/FusedAdamKernel.cpp,
// FusedSGDKernel.cpp) in the parameter dtype's opmath type (float32 for half types). The
// in-place ops the optimizers call lower these functional forms; the eager kernel writes every
// returned list back into the parameters, gradients and state.
#include "lowering/common.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using shlo::CompareDirection;

// A 0-d operand in `acc` from a Tensor argument or a runtime float (eager `lr`: see
// exec/call_state.h's is_runtime_number), or a float attribute (a compiled graph's constant).
Value scalar_of(LoweringContext& ctx, size_t i, ElementType acc) {
  const LArg& a = ctx.arg(i);
  if (a.kind == LArg::Kind::kScalar) return ctx.b.convert(a.value, acc);
  if (a.kind == LArg::Kind::kTensor) {
    Value v = ctx.tensor(i);
    TORCH_CHECK(v.type.numel() == 1, "torchtpu: ", ctx.schema().name(), ": ",
                ctx.schema().arguments()[i].name(), " must have one element");
    return ctx.b.reshape(ctx.b.convert(v, acc), {});
  }
  return ctx.b.constant(ctx.double_arg(i), TensorType(acc, {}));
}

std::optional<Value> optional_scalar(LoweringContext& ctx, const char* name, ElementType acc) {
  size_t i = ctx.index_of(name);
  if (ctx.is_none(i)) return std::nullopt;
  return scalar_of(ctx, i, acc);
}

Value splat(FunctionBuilder& b, Value s, const Value& like) {
  return b.broadcast_to(s, like.shape());
}

// (Tensor[] self, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs,
//  Tensor[] max_exp_avg_sqs, Tensor[] state_steps, *, float|Tensor lr, float beta1, float beta2,
//  float weight_decay, float eps, bool amsgrad, bool maximize, Tensor? grad_scale,
//  Tensor? found_inf) -> 5 lists
std::vector<Value> lower_fused_adam(LoweringContext& ctx, bool adamw) {
  auto& b = ctx.b;
  std::vector<Value> params = ctx.tensor_list(0), grads = ctx.tensor_list(1),
                     exp_avgs = ctx.tensor_list(2), exp_avg_sqs = ctx.tensor_list(3),
                     max_sqs = ctx.tensor_list(4), steps = ctx.tensor_list(5);
  const size_t n = params.size();
  const char* op = adamw ? "_fused_adamw_" : "_fused_adam_";
  TORCH_CHECK(
      grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && steps.size() == n, op,
      ": all tensor lists must have the same length");
  double beta1 = ctx.double_arg(ctx.index_of("beta1"));
  double beta2 = ctx.double_arg(ctx.index_of("beta2"));
  double weight_decay = ctx.double_arg(ctx.index_of("weight_decay"));
  double eps = ctx.double_arg(ctx.index_of("eps"));
  bool amsgrad = ctx.bool_arg(ctx.index_of("amsgrad"));
  bool maximize = ctx.bool_arg(ctx.index_of("maximize"));
  TORCH_CHECK(!amsgrad || max_sqs.size() == n, op,
              ": amsgrad needs one max_exp_avg_sq per parameter");
  std::vector<Value> out_params, out_grads, out_avgs, out_sqs, out_max;
  for (size_t i = 0; i < n; ++i) {
    Value p = params[i], g = grads[i];
    TORCH_CHECK(shlo::is_float(p.dtype()), op, ": parameters must be floating point");
    ElementType acc = f32_or_f64(p.dtype());
    Value lr = scalar_of(ctx, ctx.index_of("lr"), acc);
    std::optional<Value> grad_scale = optional_scalar(ctx, "grad_scale", acc);
    std::optional<Value> found_inf = optional_scalar(ctx, "found_inf", acc);
    Value step = b.reshape(b.convert(steps[i], acc), {});
    Value bc1 = b.sub(cst(b, 1, acc), b.binary("stablehlo.power", cst(b, beta1, acc), step));
    Value bc2 = b.sub(cst(b, 1, acc), b.binary("stablehlo.power", cst(b, beta2, acc), step));
    Value step_size = b.div(lr, bc1);
    Value bc2_sqrt = b.unary("stablehlo.sqrt", bc2);

    Value pv = b.convert(p, acc);
    Value gv = b.convert(g, acc);
    Value g_out = g;
    if (grad_scale) {
      gv = b.div(gv, splat(b, *grad_scale, gv));
      g_out = b.convert(gv, g.dtype());
    }
    if (maximize) gv = b.neg(gv);
    if (weight_decay != 0) {
      if (adamw) {
        // param * (1 - lr * weight_decay)
        Value f = b.sub(cst(b, 1, acc), b.mul(lr, cst(b, weight_decay, acc)));
        pv = b.mul(pv, splat(b, f, pv));
      } else {
        gv = b.add(gv, b.mul(pv, splat(b, cst(b, weight_decay, acc), pv)));
      }
    }
    Value m = b.convert(exp_avgs[i], acc);
    m = b.add(m, b.mul(b.sub(gv, m), splat(b, cst(b, 1 - beta1, acc), m)));
    Value v = b.convert(exp_avg_sqs[i], acc);
    v = b.add(b.mul(v, splat(b, cst(b, beta2, acc), v)),
              b.mul(b.mul(splat(b, cst(b, 1 - beta2, acc), gv), gv), gv));
    Value m_store = b.convert(m, exp_avgs[i].dtype());
    Value v_store = b.convert(v, exp_avg_sqs[i].dtype());
    Value denom_src = v;
    std::optional<Value> max_store;
    if (amsgrad) {
      Value mx = b.max(b.convert(max_sqs[i], acc), v);
      max_store = b.convert(mx, max_sqs[i].dtype());
      denom_src = mx;
    }
    Value denom = b.add(b.div(b.unary("stablehlo.sqrt", denom_src), splat(b, bc2_sqrt, v)),
                        splat(b, cst(b, eps, acc), v));
    Value new_p = b.sub(pv, b.div(b.mul(splat(b, step_size, m), m), denom));
    Value p_store = b.convert(new_p, p.dtype());
    if (found_inf) {
      // An inf/nan step leaves everything untouched (the CPU kernel returns early).
      Value skip = b.compare(*found_inf, cst(b, 1, acc), CompareDirection::kEQ);
      auto keep = [&](Value fresh, Value old) {
        return b.select(b.broadcast_to(skip, old.shape()), old, fresh);
      };
      p_store = keep(p_store, p);
      g_out = keep(g_out, g);
      m_store = keep(m_store, exp_avgs[i]);
      v_store = keep(v_store, exp_avg_sqs[i]);
      if (max_store) max_store = keep(*max_store, max_sqs[i]);
    }
    out_params.push_back(p_store);
    out_grads.push_back(g_out);
    out_avgs.push_back(m_store);
    out_sqs.push_back(v_store);
    if (max_store) out_max.push_back(*max_store);
  }
  if (!amsgrad) out_max = max_sqs;  // passed through untouched
  std::vector<Value> out;
  for (auto* list : {&out_params, &out_grads, &out_avgs, &out_sqs, &out_max}) {
    out.insert(out.end(), list->begin(), list->end());
  }
  return out;
}

// (Tensor[] self, Tensor[] grads, Tensor[] momentum_buffer_list, *, float weight_decay,
//  float momentum, float|Tensor lr, float dampening, bool nesterov, bool maximize,
//  bool is_first_step, Tensor? grad_scale, Tensor? found_inf) -> 3 lists
std::vector<Value> lower_fused_sgd(LoweringContext& ctx) {
  auto& b = ctx.b;
  std::vector<Value> params = ctx.tensor_list(0), grads = ctx.tensor_list(1),
                     bufs = ctx.tensor_list(2);
  const size_t n = params.size();
  double weight_decay = ctx.double_arg(ctx.index_of("weight_decay"));
  double momentum = ctx.double_arg(ctx.index_of("momentum"));
  double dampening = ctx.double_arg(ctx.index_of("dampening"));
  bool nesterov = ctx.bool_arg(ctx.index_of("nesterov"));
  bool maximize = ctx.bool_arg(ctx.index_of("maximize"));
  bool first = ctx.bool_arg(ctx.index_of("is_first_step"));
  TORCH_CHECK(grads.size() == n, "_fused_sgd_: params and grads must have the same length");
  TORCH_CHECK(momentum == 0 || bufs.size() == n,
              "_fused_sgd_: momentum needs one momentum buffer per parameter");
  std::vector<Value> out_params, out_grads, out_bufs;
  for (size_t i = 0; i < n; ++i) {
    Value p = params[i], g = grads[i];
    TORCH_CHECK(shlo::is_float(p.dtype()), "_fused_sgd_: parameters must be floating point");
    ElementType acc = f32_or_f64(p.dtype());
    Value lr = scalar_of(ctx, ctx.index_of("lr"), acc);
    std::optional<Value> grad_scale = optional_scalar(ctx, "grad_scale", acc);
    std::optional<Value> found_inf = optional_scalar(ctx, "found_inf", acc);
    Value pv = b.convert(p, acc);
    Value gv = b.convert(g, acc);
    Value g_out = g;
    if (grad_scale) {
      gv = b.div(gv, splat(b, *grad_scale, gv));
      g_out = b.convert(gv, g.dtype());
    }
    if (maximize) gv = b.neg(gv);
    if (weight_decay != 0) gv = b.add(gv, b.mul(pv, splat(b, cst(b, weight_decay, acc), pv)));
    std::optional<Value> buf_store;
    if (momentum != 0) {
      Value buf = first ? gv
                        : b.add(b.mul(b.convert(bufs[i], acc), splat(b, cst(b, momentum, acc), gv)),
                                b.mul(gv, splat(b, cst(b, 1 - dampening, acc), gv)));
      buf_store = b.convert(buf, bufs[i].dtype());
      gv = nesterov ? b.add(gv, b.mul(buf, splat(b, cst(b, momentum, acc), gv))) : buf;
    }
    Value p_store = b.convert(b.sub(pv, b.mul(gv, splat(b, lr, gv))), p.dtype());
    if (found_inf) {
      Value skip = b.compare(*found_inf, cst(b, 1, acc), CompareDirection::kEQ);
      auto keep = [&](Value fresh, Value old) {
        return b.select(b.broadcast_to(skip, old.shape()), old, fresh);
      };
      p_store = keep(p_store, p);
      g_out = keep(g_out, g);
      if (buf_store) buf_store = keep(*buf_store, bufs[i]);
    }
    out_params.push_back(p_store);
    out_grads.push_back(g_out);
    if (buf_store) out_bufs.push_back(*buf_store);
  }
  if (momentum == 0) out_bufs = bufs;
  std::vector<Value> out = out_params;
  out.insert(out.end(), out_grads.begin(), out_grads.end());
  out.insert(out.end(), out_bufs.begin(), out_bufs.end());
  return out;
}

std::vector<Value> lower_adam(LoweringContext& ctx) { return lower_fused_adam(ctx, false); }
std::vector<Value> lower_adamw(LoweringContext& ctx) { return lower_fused_adam(ctx, true); }

TORCHTPU_LOWERING("aten::_fused_adam", lower_adam);
TORCHTPU_LOWERING("aten::_fused_adam.tensor_lr", lower_adam);
TORCHTPU_LOWERING("aten::_fused_adamw", lower_adamw);
TORCHTPU_LOWERING("aten::_fused_adamw.tensor_lr", lower_adamw);
TORCHTPU_LOWERING("aten::_fused_sgd", lower_fused_sgd);
TORCHTPU_LOWERING("aten::_fused_sgd.tensor_lr", lower_fused_sgd);

}  // namespace
}  // namespace torchtpu::lowering
