// Argument checks the CPU kernels make on values the host already knows, raised at the call
// as on the CPU. A Scalar's value is a runtime argument of the program (never part of its
// signature), so a lowering cannot check it: it sees the value of the first call only. These
// kernels check on every call, then run the op through the ordinary tpu kernel. Values that
// live on the device are checked there instead (lowering/checks.h).
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "aten/boxed_kernel.h"
#include "exec/executor.h"
#include "lowering/scalar_fits.h"

namespace torchtpu::aten {
namespace {

std::optional<c10::IValue> arg_named(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                                     const char* name) {
  const auto& schema = op.schema();
  auto i = schema.argumentIndexWithName(name);
  if (!i) return std::nullopt;
  return stack[stack.size() - schema.arguments().size() + *i];
}

// The value of a divisor/exponent the host holds: a Scalar, or a 0-d CPU tensor (a Python number
// wrapped by the arg parser). nullopt for device tensors.
std::optional<c10::Scalar> host_value(const c10::IValue& v) {
  if (v.isScalar()) return v.toScalar();
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (t.defined() && t.device().is_cpu() && t.dim() == 0) return t.item();
  }
  return std::nullopt;
}

at::ScalarType result_type_of(const at::Tensor& self, const c10::IValue& other) {
  if (other.isTensor()) return at::result_type(self, other.toTensor());
  return at::result_type(self, other.toScalar());
}

// Integer division and remainder by zero (floor_divide, div with rounding_mode, remainder,
// fmod): the CPU raises "ZeroDivisionError" (a RuntimeError); XLA returns -1 or the dividend.
void zero_division_checked(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto self = arg_named(op, *stack, "self");
  auto other = arg_named(op, *stack, "other");
  auto mode = arg_named(op, *stack, "rounding_mode");
  bool integer_division = !mode || !mode->isNone();
  if (integer_division && self && other && self->isTensor()) {
    auto divisor = host_value(*other);
    if (divisor && c10::isIntegralType(result_type_of(self->toTensor(), *other),
                                       /*includeBool=*/false)) {
      TORCH_CHECK(!(divisor->isIntegral(/*includeBool=*/false) && divisor->toLong() == 0),
                  "ZeroDivisionError");
    }
  }
  tpu_boxed_kernel(op, stack);
}

// Integer tensors to a negative integer Scalar power: the CPU refuses (1/2 is 0 in integers).
void pow_checked(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto self = arg_named(op, *stack, "self");
  auto exponent = arg_named(op, *stack, "exponent");
  if (self && exponent && self->isTensor() && exponent->isScalar()) {
    c10::Scalar e = exponent->toScalar();
    TORCH_CHECK(!(c10::isIntegralType(self->toTensor().scalar_type(), /*includeBool=*/false) &&
                  e.isIntegral(/*includeBool=*/false) && e.toLong() < 0),
                "Integers to negative integer powers are not allowed.");
  }
  tpu_boxed_kernel(op, stack);
}

// Fill values that do not fit the tensor's dtype (torch.full((2,), 300, dtype=torch.uint8)):
// the CPU's checked conversion raises "value cannot be converted to type uint8_t without
// overflow"; the device would wrap the value around.
void fill_value_checked(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto self = arg_named(op, *stack, "self");
  auto value = arg_named(op, *stack, "value");
  if (self && value && self->isTensor() && value->isScalar()) {
    const at::Tensor& t = self->toTensor();
    // The CPU fills a one-element float8 tensor through a path that converts (saturating
    // e4m3fn) without the check; every other case is checked.
    if (!(c10::isFloat8Type(t.scalar_type()) && t.numel() == 1)) {
      lowering::check_scalar_fits(value->toScalar(), t.scalar_type());
    }
  }
  tpu_boxed_kernel(op, stack);
}

// Distribution parameters given as Python floats: the CPU's checks and wording.
void distribution_checked(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string& name = op.schema().name();
  if (name == "aten::normal_" || name == "aten::normal") {
    auto std_dev = arg_named(op, *stack, "std");
    if (std_dev && std_dev->isDouble()) {
      TORCH_CHECK(std_dev->toDouble() >= 0.0, "normal expects std >= 0.0, but found std ",
                  std_dev->toDouble());
    }
  } else if (name == "aten::uniform_") {
    double from = arg_named(op, *stack, "from")->toDouble();
    double to = arg_named(op, *stack, "to")->toDouble();
    TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from,
                " > to=", to);
  } else if (name == "aten::exponential_") {
    double lambd = arg_named(op, *stack, "lambd")->toDouble();
    TORCH_CHECK(lambd > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
  } else if (name == "aten::geometric_") {
    double p = arg_named(op, *stack, "p")->toDouble();
    TORCH_CHECK(p > 0 && p < 1, "geometric_ expects p to be in (0, 1), but got p=", p);
  } else if (name == "aten::log_normal_") {
    double std_dev = arg_named(op, *stack, "std")->toDouble();
    TORCH_CHECK(std_dev > 0.0, "log_normal_ expects std > 0.0, but found std=", std_dev);
  } else if (name == "aten::cauchy_") {
    double sigma = arg_named(op, *stack, "sigma")->toDouble();
    TORCH_CHECK(sigma > 0.0, "cauchy_ expects sigma > 0.0, but found sigma=", sigma);
  } else if (name == "aten::random_") {
    auto from = arg_named(op, *stack, "from");
    auto to = arg_named(op, *stack, "to");
    int64_t lo = from && from->isInt() ? from->toInt() : 0;
    if (to && to->isInt()) {
      TORCH_CHECK(lo < to->toInt(),
                  "random_ expects 'from' to be less than 'to', but got from=", lo,
                  " >= to=", to->toInt());
    }
  } else if (name == "aten::native_dropout") {
    // The CPU kernel draws bernoulli_(1 - p) and raises its message.
    double keep = 1.0 - arg_named(op, *stack, "p")->toDouble();
    auto train = arg_named(op, *stack, "train");
    if (!train || train->isNone() || train->toBool()) {
      TORCH_CHECK(keep >= 0 && keep <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", keep);
    }
  } else {
    auto p = arg_named(op, *stack, "p");
    if (p && p->isDouble()) {
      TORCH_CHECK(p->toDouble() >= 0 && p->toDouble() <= 1,
                  "bernoulli_ expects p to be in [0, 1], but got p=", p->toDouble());
    }
  }
  tpu_boxed_kernel(op, stack);
}

// The convolution parameter checks of the CPU's at::_convolution (groups, then
// check_shape_forward's padding, output_padding, stride, dilation), which aten::convolution's
// tpu kernel skipped: negative padding was accepted, stride 0 raised ZeroDivisionError from the
// meta kernel's shape arithmetic and dilation 0 failed in XLA's compiler (issue 32). A dilation of
// 0 passes the CPU's check (it refuses negative ones) and is refused by whichever kernel the CPU
// then picks, each in its own words ("dilation should be greater than zero, but got [0, 0]",
// "non-positive dilation is not supported"); tpu says the first.
void convolution_checked(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto weight = arg_named(op, *stack, "weight");
  const int64_t nd = weight && weight->isTensor() ? weight->toTensor().dim() - 2 : 0;
  auto ints = [&](const char* name) {
    std::vector<int64_t> v = arg_named(op, *stack, name)->toIntVector();
    if (v.size() == 1 && nd > 1) v.assign(static_cast<size_t>(nd), v[0]);
    return v;
  };
  auto any = [](const std::vector<int64_t>& v, bool (*bad)(int64_t)) {
    return std::any_of(v.begin(), v.end(), bad);
  };
  TORCH_CHECK(arg_named(op, *stack, "groups")->toInt() > 0, "non-positive groups is not supported");
  TORCH_CHECK(!any(ints("padding"), [](int64_t x) { return x < 0; }),
              "negative padding is not supported");
  TORCH_CHECK(!any(ints("output_padding"), [](int64_t x) { return x < 0; }),
              "negative output_padding is not supported");
  TORCH_CHECK(!any(ints("stride"), [](int64_t x) { return x <= 0; }),
              "non-positive stride is not supported");
  std::vector<int64_t> dilation = ints("dilation");
  TORCH_CHECK(!any(dilation, [](int64_t x) { return x < 0; }),
              "dilation should be greater than zero");
  TORCH_CHECK(!any(dilation, [](int64_t x) { return x == 0; }),
              "dilation should be greater than zero, but got ", c10::IntArrayRef(dilation));
  tpu_boxed_kernel(op, stack);
}

// The tensor a call writes: `out` for out= forms, else `self` (in-place forms).
at::Tensor written_tensor(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  auto out = arg_named(op, stack, "out");
  if (out && out->isTensor()) return out->toTensor();
  return arg_named(op, stack, "self")->toTensor();
}

// Inputs that the written tensor must not overlap, as the CPU's kernels assert (at::
// assert_no_overlap: "unsupported operation: some elements of the input tensor and the
// written-to tensor refer to a single memory location"); on tpu the op read the written tensor
// as it was and returned a result the CPU refuses to compute (torch.gather(x, 1, i, out=x)).
// `self` may be the written tensor of scatter/index_add/index_copy (their out= is self's
// update); gather's index may be it exactly, not in part.
void overlap_checked(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string& name = op.schema().name();
  const at::Tensor written = written_tensor(op, *stack);
  auto no_overlap = [&](const char* arg) {
    auto v = arg_named(op, *stack, arg);
    if (!v) return;
    if (v->isTensor() && v->toTensor().defined()) {
      at::assert_no_overlap(written, v->toTensor());
    } else if (v->isTensorList()) {
      for (const at::Tensor& t : v->toTensorVector()) at::assert_no_overlap(written, t);
    }
  };
  if (name == "aten::gather") {
    no_overlap("self");
    at::assert_no_partial_overlap(written, arg_named(op, *stack, "index")->toTensor());
  } else if (name == "aten::index_select" || name == "aten::take") {
    no_overlap("self");
    no_overlap("index");
  } else if (name == "aten::cat") {
    no_overlap("tensors");
  } else {  // scatter, scatter_add, scatter_reduce, index_add, index_copy, put_
    no_overlap("index");
    no_overlap("src");
    no_overlap("source");
  }
  tpu_boxed_kernel(op, stack);
}

// masked_scatter with a mask that is not bool: the CPU refuses uint8 masks too (after a
// deprecation warning), where PyTorch's meta kernel, which tpu sized the op with, accepts them
// ("Mask must be bool or uint8").
void masked_scatter_checked(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const at::Tensor mask = arg_named(op, *stack, "mask")->toTensor();
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  tpu_boxed_kernel(op, stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"convolution", "convolution_overrideable"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&convolution_checked>());
  }
  for (const char* name : {"gather.out",
                           "index_select.out",
                           "take.out",
                           "cat.out",
                           "scatter.src_out",
                           "scatter.value_out",
                           "scatter.reduce_out",
                           "scatter.value_reduce_out",
                           "scatter_.src",
                           "scatter_.value",
                           "scatter_.reduce",
                           "scatter_.value_reduce",
                           "scatter_add.out",
                           "scatter_add_",
                           "scatter_reduce.two_out",
                           "scatter_reduce_.two",
                           "index_add.out",
                           "index_add_",
                           "index_copy.out",
                           "index_copy_",
                           "put_"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&overlap_checked>());
  }
  for (const char* name : {"masked_scatter", "masked_scatter_", "masked_scatter.out"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&masked_scatter_checked>());
  }
  // Every op whose distribution parameters travel at run time (exec/call_state.h's
  // is_runtime_number): the program cannot check a value it only receives.
  for (const char* name :
       {"normal_", "normal.Tensor_float", "normal.Tensor_float_out", "uniform_", "bernoulli_.float",
        "bernoulli.p", "exponential_", "geometric_", "log_normal_", "cauchy_", "random_.from",
        "random_.to", "native_dropout"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&distribution_checked>());
  }
  for (const char* name : {"floor_divide",
                           "floor_divide.Scalar",
                           "floor_divide.out",
                           "floor_divide_.Tensor",
                           "floor_divide_.Scalar",
                           "div.Tensor_mode",
                           "div.Scalar_mode",
                           "div.out_mode",
                           "div_.Tensor_mode",
                           "div_.Scalar_mode",
                           "remainder.Tensor",
                           "remainder.Scalar",
                           "remainder.Tensor_out",
                           "remainder_.Tensor",
                           "remainder_.Scalar",
                           "fmod.Tensor",
                           "fmod.Scalar",
                           "fmod.Tensor_out",
                           "fmod_.Tensor",
                           "fmod_.Scalar",
                           "remainder.Scalar_out",
                           "fmod.Scalar_out",
                           "floor_divide.Scalar_out",
                           "div.Scalar_mode_out"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&zero_division_checked>());
  }
  for (const char* name : {"pow.Tensor_Scalar", "pow.Tensor_Scalar_out", "pow_.Scalar"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&pow_checked>());
  }
  for (const char* name :
       {"fill_.Scalar", "fill.Scalar", "masked_fill.Scalar", "masked_fill_.Scalar"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&fill_value_checked>());
  }
}

}  // namespace
}  // namespace torchtpu::aten
