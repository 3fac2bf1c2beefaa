// Copies into tpu tensors that other layers (distributed/) call directly.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchtpu::aten {

// self.copy_(host) through upload_lent (host: contiguous, self's sizes and dtype).
void copy_from_lent_host(const at::Tensor& self, const at::Tensor& host);

}  // namespace torchtpu::aten
