// Why a signature missed the program cache, for TORCHTPU_LOG_COMPILES=1: the nearest signature
// of the same op (or graph) compiled before, and which arguments differ from it. The previous
// miss is often an unrelated call; the nearest signature is the one the user expected to hit.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace torchtpu::runtime {

class MissExplainer {
 public:
  // `args` describes one argument each ("self=Float[8, 16]"). Returns the explanation and
  // remembers `args` as compiled for `op`.
  std::string explain_and_record(const std::string& op, const std::vector<std::string>& args);

 private:
  // Per op, the most recent signatures, bounded so that a sweep of shapes stays cheap.
  static constexpr size_t kKeptPerOp = 64;
  std::mutex mutex_;
  std::unordered_map<std::string, std::deque<std::vector<std::string>>> seen_;
};

}  // namespace torchtpu::runtime
