// Counting a plugin's devices in a child process; see count_devices_in_child in pjrt.h.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "pjrt/pjrt.h"

extern char** environ;

namespace torchtpu::pjrt {
namespace {

// The helper prints one of these lines on stdout; anything else there (a plugin's own output)
// is ignored.
constexpr char kCountLine[] = "torchtpu-device-count ";
constexpr char kErrorLine[] = "torchtpu-device-error ";

std::string line_after(const std::string& out, const char* marker) {
  const size_t at = out.find(marker);
  if (at == std::string::npos || (at != 0 && out[at - 1] != '\n')) return "";
  const size_t begin = at + std::char_traits<char>::length(marker);
  const size_t end = out.find('\n', begin);
  return out.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

}  // namespace

ChildDeviceCount count_devices_in_child(const std::string& helper, const std::string& plugin_path,
                                        int timeout_ms) {
  ChildDeviceCount result;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    result.error = "pipe failed: " + std::to_string(errno);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // The child's stdout is the pipe (dup2 clears O_CLOEXEC on the copy); its stderr, where
  // plugins log their start-up, goes nowhere: the process that asked only wanted a number, and
  // the plugin logs again when this process really creates its client.
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  char* argv[] = {const_cast<char*>(helper.c_str()), const_cast<char*>(plugin_path.c_str()),
                  nullptr};
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, helper.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (spawned != 0) {
    close(fds[0]);
    result.error = "cannot run " + helper + " (errno " + std::to_string(spawned) + ")";
    return result;
  }

  // Read until the child closes its stdout (it exits), or the deadline.
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = ready == 0;
      break;
    }
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child is exiting
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  // Waiting for the exit means the devices are released when this returns: a launcher starts
  // the processes that use them right after asking. ECHILD (SIGCHLD ignored) leaves status
  // unknown; the printed line still decides.
  int status = 0;
  pid_t waited;
  do {
    waited = waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);

  if (timed_out) {
    result.error = helper + " did not answer within " + std::to_string(timeout_ms / 1000) + " s";
    return result;
  }
  const std::string count = line_after(out, kCountLine);
  if (!count.empty()) {
    char* end = nullptr;
    const long n = std::strtol(count.c_str(), &end, 10);
    if (end != count.c_str() && n >= 0 && n < (1 << 20)) {
      result.outcome = ChildDeviceCount::kCounted;
      result.count = static_cast<int>(n);
      return result;
    }
  }
  const std::string error = line_after(out, kErrorLine);
  if (!error.empty()) {
    result.outcome = ChildDeviceCount::kClientFailed;
    result.error = error;
    return result;
  }
  if (waited == pid && WIFSIGNALED(status)) {
    result.error = helper + " was killed by signal " + std::to_string(WTERMSIG(status));
  } else {
    result.error = helper + " printed no device count";
  }
  return result;
}

}  // namespace torchtpu::pjrt
