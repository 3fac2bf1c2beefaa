// uint8 bilinear / bicubic resampling (interpolate on uint8 images, with or without antialias)
// exactly as ATen's CPU kernels compute it: separable passes (width, then height) with an
// intermediate uint8 image, double filter weights quantized to int16 at a per-pass precision,
// int32 accumulation from a rounding offset, then clamp(acc >> precision, 0, 255).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "stablehlo/builder.h"

namespace torchtpu::lowering {

// x: (N, C, H, W) u8; `scales` are the optional (h, w) scale arguments.
shlo::Value resample_u8(shlo::FunctionBuilder& b, shlo::Value x, const std::vector<int64_t>& out,
                        bool cubic, bool antialias, bool align_corners,
                        const std::vector<std::optional<double>>& scales);

}  // namespace torchtpu::lowering
