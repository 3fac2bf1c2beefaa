#pragma once

namespace torchtpu::device {
// The calling thread's current tpu device (torch.tpu.set_device / device guards).
int current_device();
void set_current_device(int index);
}  // namespace torchtpu::device
