#include "runtime/plugin_log.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace torchtpu::runtime {
namespace {

// "E0000 00:00:1796351391.764469   24650 wire_format_lite.cc:578] ..." (absl/glog prefix).
bool is_plugin_log_line(const std::string& line) {
  if (line.size() < 6 || std::string("IWEF").find(line[0]) == std::string::npos) return false;
  for (int i = 1; i <= 4; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(line[static_cast<size_t>(i)]))) return false;
  }
  return line[5] == ' ';
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Reads back what went to the temporary file and restores fd 2.
std::string restore(int saved, FILE* tmp) {
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::string text;
  std::rewind(tmp);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), tmp)) > 0) text.append(buf, n);
  std::fclose(tmp);
  return text;
}

}  // namespace

void without_plugin_log_on_failure(const std::function<void()>& fn) {
  static std::mutex m;
  std::lock_guard<std::mutex> g(m);
  std::fflush(stderr);
  FILE* tmp = std::tmpfile();
  int saved = tmp ? ::dup(2) : -1;
  if (saved < 0 || ::dup2(::fileno(tmp), 2) < 0) {
    if (saved >= 0) ::close(saved);
    if (tmp) std::fclose(tmp);
    fn();  // no capture possible: the plugin's lines go where they always went
    return;
  }
  try {
    fn();
  } catch (...) {
    // The plugin's message may continue over lines of its own (a stack trace): from its first
    // log line on, everything captured is the plugin's.
    std::string text = restore(saved, tmp), kept;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      end = end == std::string::npos ? text.size() : end + 1;
      std::string line = text.substr(start, end - start);
      if (is_plugin_log_line(line)) break;
      kept += line;
      start = end;
    }
    write_all(2, kept);
    throw;
  }
  write_all(2, restore(saved, tmp));
}

}  // namespace torchtpu::runtime
