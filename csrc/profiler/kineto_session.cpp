// torch.profiler's tpu activities: a Kineto child profiler registered through PyTorch's
// PrivateUse1 profiler registry. While a trace runs it switches on runtime/trace.h's recording;
// when the trace is processed it turns the records into Kineto activities: one device activity
// per executed program (on a "tpu:N" track, linked to the CPU op that launched it), host copies
// on the same track, and host-side launches, compiles, syncs and CPU fallbacks beside the op.
#include "profiler/profiler.h"

#if TORCHTPU_KINETO_PROFILER

// GenericTraceActivity::addMetadata formats with fmt, whose compiled part torch does not export.
#define FMT_HEADER_ONLY
#include <IActivityProfiler.h>
#include <ThreadUtil.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <algorithm>
#include <map>
#include <set>

#include "pjrt/profiler_extension.h"
#include "runtime/runtime.h"
#include "runtime/trace.h"

namespace torchtpu::profiler {
namespace {

using libkineto::ActivityType;
using runtime::trace::Kind;
using runtime::trace::Record;

const std::set<ActivityType>& tpu_activity_types() {
  static const std::set<ActivityType> types = {
      ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY, ActivityType::PRIVATEUSE1_RUNTIME};
  return types;
}

ActivityType activity_type(Kind kind) {
  switch (kind) {
    case Kind::kExecution:
      return ActivityType::CONCURRENT_KERNEL;
    case Kind::kH2D:
    case Kind::kD2H:
      return ActivityType::GPU_MEMCPY;
    default:
      return ActivityType::PRIVATEUSE1_RUNTIME;
  }
}

bool on_device_track(Kind kind) {
  return kind == Kind::kExecution || kind == Kind::kH2D || kind == Kind::kD2H;
}

// The device runs one device's programs in launch order, so an execution starts when it was
// launched or when the one before it finished, whichever is later. The plugin gives no device
// clock (XLA:CPU has none), so completion times are the host's, seen from PJRT's callbacks.
void estimate_device_starts(std::vector<Record>& records) {
  std::map<int, std::vector<Record*>> by_device;
  for (Record& r : records) {
    if (r.kind == Kind::kExecution) by_device[r.device].push_back(&r);
  }
  for (auto& [device, runs] : by_device) {
    std::sort(runs.begin(), runs.end(),
              [](const Record* a, const Record* b) { return a->seq < b->seq; });
    int64_t previous_end = 0;
    for (Record* r : runs) {
      // Out-of-order completion (XLA:CPU may overlap independent programs): keep the launch.
      if (previous_end > r->start_ns && previous_end <= r->end_ns) r->start_ns = previous_end;
      r->start_ns = std::min(r->start_ns, r->end_ns);
      previous_end = std::max(previous_end, r->end_ns);
    }
  }
}

// The plugin's own device profiler (PJRT's profiler extension: libtpu, the XLA GPU plugin), or
// null: no extension (the XLA CPU plugin), or the runtime has not started (no plugin loaded).
const pjrt::plugin_profiler::Api* device_profiler_api() {
  if (!runtime::is_initialized()) return nullptr;
  std::shared_ptr<pjrt::Plugin> plugin = pjrt::Plugin::load(runtime::get().plugin_path());
  return pjrt::find_profiler_api(plugin->api()->extension_start);
}

// "/device:GPU:3" -> 3.
int device_of_plane(const std::string& plane) {
  const size_t colon = plane.rfind(':');
  try {
    return colon == std::string::npos ? 0 : std::stoi(plane.substr(colon + 1));
  } catch (const std::exception&) {
    return 0;
  }
}

class TpuSession : public libkineto::IActivityProfilerSession {
 public:
  TpuSession() : buffer_(std::make_unique<libkineto::CpuTraceBuffer>()) {}

  void start() override {
    start_ns_ = runtime::trace::now_ns();
    runtime::trace::take_records();  // drop what an earlier, unprocessed trace left
    runtime::trace::start_recording();
    // Device timestamps where the plugin records them; the host-clock records stay either way.
    try {
      if (const pjrt::plugin_profiler::Api* api = device_profiler_api()) {
        device_profiler_ = std::make_unique<pjrt::DeviceProfiler>(api);
        device_profiler_->start();
      }
    } catch (const std::exception& e) {
      device_profiler_.reset();
      errors_.push_back(std::string("torchtpu: the plugin's device profiler did not start: ") +
                        e.what());
    }
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (device_profiler_) {
      try {
        device_events_ = pjrt::device_events(device_profiler_->stop_and_collect());
      } catch (const std::exception& e) {
        errors_.push_back(std::string("torchtpu: the plugin's device trace was lost: ") + e.what());
      }
      device_profiler_.reset();
    }
    runtime::trace::stop_recording();
    // Programs launched inside the trace but still running: wait so their end is known.
    if (!runtime::trace::wait_for_traced_executions(std::chrono::seconds(30))) {
      errors_.push_back("torchtpu: some tpu executions had not finished when the trace stopped");
    }
    end_ns_ = runtime::trace::now_ns();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity, int64_t window_start,
                    int64_t window_end) override {
    buffer_->span = libkineto::TraceSpan(start_ns_, end_ns_, "tpu");
    buffer_->gpuOpCount = 0;
    std::vector<Record> records = runtime::trace::take_records();
    estimate_device_starts(records);
    const int32_t pid = libkineto::processId();
    for (const Record& r : records) {
      if (window_end > window_start && (r.end_ns < window_start || r.start_ns > window_end)) {
        continue;
      }
      buffer_->emplace_activity(buffer_->span, activity_type(r.kind), r.name);
      libkineto::GenericTraceActivity& act = *buffer_->activities.back();
      act.startTime = r.start_ns;
      act.endTime = std::max(r.end_ns, r.start_ns);
      act.id = static_cast<int32_t>(r.correlation);
      if (on_device_track(r.kind)) {
        act.device = std::max(r.device, 0);
        act.resource = 0;
        devices_.insert(act.device);
        buffer_->gpuOpCount++;
      } else {
        act.device = pid;
        act.resource = static_cast<int32_t>(r.thread);
        act.threadId = static_cast<int32_t>(r.thread);
      }
      if (r.correlation != 0 && linked_activity) {
        act.linked = linked_activity(static_cast<int32_t>(r.correlation));
      }
      if (r.kind == Kind::kExecution || r.kind == Kind::kLaunch) {
        // The arrow from the host launch to the device execution in trace viewers.
        act.flow.id = static_cast<uint32_t>(r.seq);
        act.flow.type = libkineto::kLinkAsyncCpuGpu;
        act.flow.start = r.kind == Kind::kLaunch;
      }
      if (!r.detail.empty()) act.addMetadataQuoted(detail_key(r.kind), r.detail);
      if (r.bytes > 0) act.addMetadata("bytes", r.bytes);
      if (r.device >= 0) act.addMetadata("device", r.device);
      logger.handleActivity(act);
    }
    process_device_events(logger, window_start, window_end);
  }

  // The plugin's device spans (XLA modules, ops, kernels: one track per XLine), timed by the
  // device. Their clock is the host's wall clock, as runtime::trace::now_ns's (c10::getTime): the
  // plugin's tracer converts device timestamps to it.
  void process_device_events(libkineto::ActivityLogger& logger, int64_t window_start,
                             int64_t window_end) {
    std::map<std::pair<int, std::string>, int32_t> lines;  // (device, line) -> resource
    for (const pjrt::DeviceEvent& ev : device_events_) {
      const int64_t end = ev.start_ns + ev.duration_ns;
      if (window_end > window_start && (end < window_start || ev.start_ns > window_end)) continue;
      const int device = device_of_plane(ev.plane);
      auto line =
          lines.emplace(std::make_pair(device, ev.line), static_cast<int32_t>(lines.size() + 1));
      if (line.second) line_names_.push_back({device, line.first->second, ev.line});
      buffer_->emplace_activity(buffer_->span, ActivityType::CONCURRENT_KERNEL, ev.name);
      libkineto::GenericTraceActivity& act = *buffer_->activities.back();
      act.startTime = ev.start_ns;
      act.endTime = end;
      act.device = device;
      act.resource = line.first->second;
      devices_.insert(device);
      buffer_->gpuOpCount++;
      act.addMetadataQuoted("clock", "device");
      act.addMetadataQuoted("plane", ev.plane);
      logger.handleActivity(act);
    }
    device_events_.clear();
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    int first = devices_.empty() ? 0 : *devices_.begin();
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{
        first, first, "tpu:" + std::to_string(first), "TPU " + std::to_string(first)});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (int d : devices_) out.push_back({0, 0, d, "tpu:" + std::to_string(d) + " queue"});
    for (const LineName& l : line_names_) {
      out.push_back(
          {l.resource, l.resource, l.device, "tpu:" + std::to_string(l.device) + " " + l.name});
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    // Handed over whole: the activities point at this buffer's span.
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override { runtime::trace::push_correlation(id); }
  void popCorrelationId() override { runtime::trace::pop_correlation(); }

 private:
  static const char* detail_key(Kind kind) {
    switch (kind) {
      case Kind::kCompile:
        return "program";
      case Kind::kFallback:
        return "op";
      default:
        return "signature";
    }
  }

  struct LineName {
    int device;
    int32_t resource;
    std::string name;
  };
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::unique_ptr<pjrt::DeviceProfiler> device_profiler_;
  std::vector<pjrt::DeviceEvent> device_events_;
  std::vector<LineName> line_names_;
  std::vector<std::string> errors_;
  std::set<int> devices_;
  int64_t start_ns_ = 0;
  int64_t end_ns_ = 0;
};

class TpuActivityProfiler : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override {
    return tpu_activity_types();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& activity_types, const libkineto::Config&) override {
    // A CPU-only trace records nothing of the device: its activity set may hold the host-side
    // PRIVATEUSE1_RUNTIME type, but only a device trace asks for kernels.
    if (activity_types.count(ActivityType::CONCURRENT_KERNEL) == 0) return nullptr;
    return std::make_unique<TpuSession>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_ = "torchtpu";
};

REGISTER_PRIVATEUSE1_PROFILER(TpuActivityProfiler);

}  // namespace

bool kineto_profiler_registered() {
  return torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().hasFactory();
}

}  // namespace torchtpu::profiler

#else

namespace torchtpu::profiler {
bool kineto_profiler_registered() { return false; }
}  // namespace torchtpu::profiler

#endif
