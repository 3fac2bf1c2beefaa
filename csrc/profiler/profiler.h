// torch.profiler integration (kineto_session.cpp) and its Python entry points.
#pragma once

namespace torchtpu::profiler {

// True when this build registered the tpu activity profiler with PyTorch's PrivateUse1 profiler
// registry (torch builds whose headers have it; torch 2.11's do not).
bool kineto_profiler_registered();

}  // namespace torchtpu::profiler
