// fork() copies a process's memory but not the PJRT plugin's threads: in a child forked after
// the parent created a client, a plugin call may wait forever for a thread that is gone. The
// runtime's atfork handler marks such a child; the wrapper then never calls the plugin there:
// the parent's objects are leaked rather than destroyed, and blocking calls throw Error with
// forked_child_message() (PyTorch's bad-fork wording).
#pragma once

namespace torchtpu::pjrt {

void mark_forked_child();
bool in_forked_child();
const char* forked_child_message();

}  // namespace torchtpu::pjrt
