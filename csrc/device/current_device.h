#pragma once

namespace torchtpu::device {
// The calling thread's current tpu device (torch.tpu.set_device / device guards).
int current_device();
void set_current_device(int index);
// Whether any thread other than the one that loaded the extension ever selected a tpu device
// (true once the autograd engine has started its tpu worker threads).
bool other_threads_selected_a_device();
}  // namespace torchtpu::device
