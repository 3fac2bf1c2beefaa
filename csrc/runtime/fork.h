// A child forked after the parent initialized the runtime cannot use it (the PJRT plugin's
// threads did not survive the fork): any use raises PyTorch's bad-fork RuntimeError, as CUDA's
// does. A pthread_atfork handler (runtime.cpp) marks such a child.
#pragma once

namespace torchtpu::runtime {

// True in such a child (torch.tpu._is_in_bad_fork()).
bool in_bad_fork();

}  // namespace torchtpu::runtime
