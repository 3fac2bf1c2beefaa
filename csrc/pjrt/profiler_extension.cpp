#include "pjrt/profiler_extension.h"

#include <map>
#include <string_view>

#include "pjrt/pjrt.h"

namespace torchtpu::pjrt {

const plugin_profiler::Api* find_profiler_api(const PJRT_Extension_Base* first) {
  for (const PJRT_Extension_Base* e = first; e != nullptr; e = e->next) {
    if (e->type != PJRT_Extension_Type_Profiler) continue;
    if (e->struct_size < offsetof(ProfilerExtension, profiler_api) + sizeof(void*)) return nullptr;
    const plugin_profiler::Api* api = reinterpret_cast<const ProfilerExtension*>(e)->profiler_api;
    if (api == nullptr || api->struct_size < sizeof(plugin_profiler::Api)) return nullptr;
    return api;
  }
  return nullptr;
}

std::vector<int> extension_types(const PJRT_Extension_Base* first) {
  std::vector<int> types;
  for (const PJRT_Extension_Base* e = first; e != nullptr; e = e->next) {
    types.push_back(static_cast<int>(e->type));
  }
  return types;
}

DeviceProfiler::DeviceProfiler(const plugin_profiler::Api* api) : api_(api) {
  if (api_ == nullptr) throw Error("DeviceProfiler: the plugin has no profiler extension");
  plugin_profiler::CreateArgs args{sizeof(args), "", 0, nullptr};
  check(api_->create(&args), "PLUGIN_Profiler_Create");
  profiler_ = args.profiler;
}

DeviceProfiler::~DeviceProfiler() {
  if (profiler_ == nullptr) return;
  plugin_profiler::ProfilerArgs args{sizeof(args), profiler_};
  if (started_) {
    if (plugin_profiler::Error* err = api_->stop(&args)) {
      plugin_profiler::ErrorDestroyArgs d{sizeof(d), nullptr, err};
      api_->error_destroy(&d);
    }
  }
  if (plugin_profiler::Error* err = api_->destroy(&args)) {
    plugin_profiler::ErrorDestroyArgs d{sizeof(d), nullptr, err};
    api_->error_destroy(&d);
  }
}

void DeviceProfiler::check(plugin_profiler::Error* err, const char* what) const {
  if (err == nullptr) return;
  plugin_profiler::ErrorMessageArgs m{sizeof(m), nullptr, err, nullptr, 0};
  api_->error_message(&m);
  std::string message = std::string(what) + ": " + std::string(m.message, m.message_size);
  plugin_profiler::ErrorGetCodeArgs c{sizeof(c), nullptr, err, -1};
  int code = -1;
  if (api_->error_get_code(&c) == nullptr) code = c.code;
  plugin_profiler::ErrorDestroyArgs d{sizeof(d), nullptr, err};
  api_->error_destroy(&d);
  throw Error(message, code);
}

void DeviceProfiler::start() {
  plugin_profiler::ProfilerArgs args{sizeof(args), profiler_};
  check(api_->start(&args), "PLUGIN_Profiler_Start");
  started_ = true;
}

std::string DeviceProfiler::stop_and_collect() {
  plugin_profiler::ProfilerArgs args{sizeof(args), profiler_};
  if (started_) {
    started_ = false;
    check(api_->stop(&args), "PLUGIN_Profiler_Stop");
  }
  // Twice: once for the size, once into a buffer of that size.
  plugin_profiler::CollectDataArgs collect{sizeof(collect), profiler_, nullptr, 0};
  check(api_->collect_data(&collect), "PLUGIN_Profiler_CollectData");
  std::string bytes(collect.buffer_size_in_bytes, '\0');
  if (bytes.empty()) return bytes;
  collect.buffer = reinterpret_cast<uint8_t*>(bytes.data());
  check(api_->collect_data(&collect), "PLUGIN_Profiler_CollectData");
  bytes.resize(collect.buffer_size_in_bytes);
  return bytes;
}

// ---- XSpace (tsl/profiler/protobuf/xplane.proto), read by hand: no protobuf dependency ----
namespace {

// One protobuf message's fields, read in order.
class Fields {
 public:
  explicit Fields(std::string_view bytes) : in_(bytes) {}
  // Advances to the next field; false at the end. A truncated or unknown wire type throws.
  bool next() {
    if (pos_ >= in_.size()) return false;
    const uint64_t tag = varint();
    field_ = static_cast<int>(tag >> 3);
    wire_ = static_cast<int>(tag & 7);
    switch (wire_) {
      case 0:
        value_ = varint();
        break;
      case 1:
        skip(8);
        break;
      case 2: {
        const uint64_t n = varint();
        if (n > in_.size() - pos_) throw Error("XSpace: a field runs past the buffer");
        bytes_ = in_.substr(pos_, n);
        pos_ += n;
        break;
      }
      case 5:
        skip(4);
        break;
      default:
        throw Error("XSpace: unknown protobuf wire type " + std::to_string(wire_));
    }
    return true;
  }
  int field() const { return field_; }
  bool is_varint() const { return wire_ == 0; }
  bool is_bytes() const { return wire_ == 2; }
  int64_t int64() const { return static_cast<int64_t>(value_); }
  std::string_view bytes() const { return bytes_; }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= in_.size()) throw Error("XSpace: a varint runs past the buffer");
      const auto b = static_cast<uint8_t>(in_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    throw Error("XSpace: a varint is longer than 10 bytes");
  }
  void skip(size_t n) {
    if (n > in_.size() - pos_) throw Error("XSpace: a field runs past the buffer");
    pos_ += n;
  }
  std::string_view in_;
  size_t pos_ = 0;
  int field_ = 0, wire_ = 0;
  uint64_t value_ = 0;
  std::string_view bytes_;
};

// XEventMetadata: id = 1, name = 2, display_name = 4.
std::pair<int64_t, std::string> event_metadata(std::string_view bytes) {
  int64_t id = 0;
  std::string name, display;
  for (Fields f(bytes); f.next();) {
    if (f.field() == 1 && f.is_varint()) id = f.int64();
    if (f.field() == 2 && f.is_bytes()) name = std::string(f.bytes());
    if (f.field() == 4 && f.is_bytes()) display = std::string(f.bytes());
  }
  return {id, display.empty() ? name : display};
}

struct RawEvent {
  int64_t metadata_id = 0, offset_ps = 0, duration_ps = 0;
  bool aggregate = false;  // num_occurrences instead of offset_ps: no place on a timeline
};

// XLine: name = 2, timestamp_ns = 3, events = 4, display_name = 11. XEvent: metadata_id = 1,
// offset_ps = 2, duration_ps = 3.
void read_line(std::string_view bytes, const std::string& plane,
               const std::map<int64_t, std::string>& names, std::vector<DeviceEvent>* out) {
  std::string name, display;
  int64_t timestamp_ns = 0;
  std::vector<RawEvent> events;
  for (Fields f(bytes); f.next();) {
    if (f.field() == 2 && f.is_bytes()) name = std::string(f.bytes());
    if (f.field() == 11 && f.is_bytes()) display = std::string(f.bytes());
    if (f.field() == 3 && f.is_varint()) timestamp_ns = f.int64();
    if (f.field() == 4 && f.is_bytes()) {
      RawEvent e;
      for (Fields g(f.bytes()); g.next();) {
        if (!g.is_varint()) continue;
        if (g.field() == 1) e.metadata_id = g.int64();
        if (g.field() == 2) e.offset_ps = g.int64();
        if (g.field() == 3) e.duration_ps = g.int64();
        if (g.field() == 5) e.aggregate = true;
      }
      events.push_back(e);
    }
  }
  for (const RawEvent& e : events) {
    if (e.aggregate) continue;
    DeviceEvent d;
    d.plane = plane;
    d.line = display.empty() ? name : display;
    auto it = names.find(e.metadata_id);
    d.name = it != names.end() ? it->second : "event " + std::to_string(e.metadata_id);
    d.start_ns = timestamp_ns + e.offset_ps / 1000;
    d.duration_ns = e.duration_ps / 1000;
    out->push_back(std::move(d));
  }
}

// XPlane: name = 2, lines = 3, event_metadata = 4 (map<int64, XEventMetadata>: key 1, value 2).
void read_plane(std::string_view bytes, std::vector<DeviceEvent>* out) {
  std::string name;
  std::map<int64_t, std::string> names;
  std::vector<std::string_view> lines;
  for (Fields f(bytes); f.next();) {
    if (f.field() == 2 && f.is_bytes()) name = std::string(f.bytes());
    if (f.field() == 3 && f.is_bytes()) lines.push_back(f.bytes());
    if (f.field() == 4 && f.is_bytes()) {
      int64_t key = 0;
      std::pair<int64_t, std::string> meta{0, std::string()};
      bool has_meta = false;
      for (Fields g(f.bytes()); g.next();) {
        if (g.field() == 1 && g.is_varint()) key = g.int64();
        if (g.field() == 2 && g.is_bytes()) {
          meta = event_metadata(g.bytes());
          has_meta = true;
        }
      }
      if (has_meta) names[key] = meta.second;
    }
  }
  if (name.rfind("/device:", 0) != 0) return;  // host threads, the task environment...
  for (std::string_view line : lines) read_line(line, name, names, out);
}

}  // namespace

std::vector<DeviceEvent> device_events(const std::string& xspace) {
  std::vector<DeviceEvent> out;
  for (Fields f(xspace); f.next();) {  // XSpace: planes = 1
    if (f.field() == 1 && f.is_bytes()) read_plane(f.bytes(), &out);
  }
  return out;
}

}  // namespace torchtpu::pjrt
