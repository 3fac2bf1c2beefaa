#include "runtime/miss_log.h"

namespace torchtpu::runtime {

std::string MissExplainer::explain_and_record(const std::string& op,
                                              const std::vector<std::string>& args) {
  std::lock_guard<std::mutex> g(mutex_);
  std::deque<std::vector<std::string>>& seen = seen_[op];
  std::string why;
  if (seen.empty()) {
    why = "first call of " + op;
  } else {
    // Fewest differing arguments wins; among equals, the most recent.
    const std::vector<std::string>* nearest = nullptr;
    size_t best = 0;
    for (auto it = seen.rbegin(); it != seen.rend(); ++it) {
      size_t n = it->size() > args.size() ? it->size() - args.size() : args.size() - it->size();
      for (size_t i = 0; i < it->size() && i < args.size(); ++i) n += (*it)[i] != args[i];
      if (!nearest || n < best) nearest = &*it, best = n;
    }
    why = "nearest compiled signature differs in ";
    size_t shown = 0;
    for (size_t i = 0; i < nearest->size() || i < args.size(); ++i) {
      const std::string now = i < args.size() ? args[i] : "(none)";
      const std::string was = i < nearest->size() ? (*nearest)[i] : "(none)";
      if (now == was) continue;
      why += (shown++ ? "; " : "") + now + " (compiled: " + was + ")";
    }
    if (shown == 0)
      why = "same described signature as one compiled before (evicted, or an " +
            std::string("aliasing or layout detail the description leaves out)");
  }
  if (seen.size() == kKeptPerOp) seen.pop_front();
  seen.push_back(args);
  return why;
}

}  // namespace torchtpu::runtime
