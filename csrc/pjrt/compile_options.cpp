#include "pjrt/pjrt.h"

namespace torchtpu::pjrt {
namespace {

// Protobuf wire types used below.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kLengthDelimited = 2;

void put_varint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void put_tag(std::string* out, uint32_t field, uint32_t wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | wire_type);
}

// int64 fields encode negatives as their 64-bit two's complement (10 varint bytes).
void put_int64(std::string* out, uint32_t field, int64_t value) {
  put_tag(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(value));
}

void put_message(std::string* out, uint32_t field, const std::string& message) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, message.size());
  out->append(message);
}

void put_packed_int64s(std::string* out, uint32_t field, const std::vector<int64_t>& values) {
  std::string packed;
  for (int64_t v : values) put_varint(&packed, static_cast<uint64_t>(v));
  put_message(out, field, packed);
}

void put_string(std::string* out, uint32_t field, const std::string& value) {
  put_message(out, field, value);  // the same wire form as a nested message
}

// env_option_overrides (field 7) is a map<string, xla.OptionOverrideProto>: one entry message
// per override, key = 1, value = 2; the value is a oneof whose bool_field is 2 and int_field 3.
void put_overrides(std::string* out, const std::vector<OptionOverride>& overrides) {
  for (const OptionOverride& o : overrides) {
    std::string value;
    if (o.is_integer) {
      put_int64(&value, 3, o.integer_value);
    } else {
      put_tag(&value, 2, kVarint);
      put_varint(&value, o.value ? 1 : 0);
    }
    std::string entry;
    put_string(&entry, 1, o.name);
    put_message(&entry, 2, value);
    put_message(out, 7, entry);
  }
}

}  // namespace

std::string portable_compile_options(const std::vector<OptionOverride>& overrides) {
  // Field numbers from xla/pjrt/proto/compile_options.proto and xla/xla.proto.
  std::string build_options;                // xla.ExecutableBuildOptionsProto
  put_int64(&build_options, 1, -1);         // device_ordinal: none, the executable is portable
  put_int64(&build_options, 4, 1);          // num_replicas
  put_int64(&build_options, 5, 1);          // num_partitions
  std::string options;                      // xla.CompileOptionsProto
  put_message(&options, 3, build_options);  // executable_build_options
  put_int64(&options, 4, 1);                // compile_portable_executable = true
  put_overrides(&options, overrides);
  return options;
}

std::string replicated_compile_options(const std::vector<int64_t>& device_ids,
                                       const std::vector<OptionOverride>& overrides) {
  if (device_ids.empty()) throw Error("replicated_compile_options: no devices");
  const auto replicas = static_cast<int64_t>(device_ids.size());
  std::string computation;                         // xla.DeviceAssignmentProto.ComputationDevice
  put_packed_int64s(&computation, 1, device_ids);  // replica_device_ids, replica order
  std::string assignment;                          // xla.DeviceAssignmentProto
  put_int64(&assignment, 1, replicas);             // replica_count
  put_int64(&assignment, 2, 1);                    // computation_count
  put_message(&assignment, 3, computation);        // computation_devices
  std::string build_options;                       // xla.ExecutableBuildOptionsProto
  put_int64(&build_options, 1, -1);                // device_ordinal: the assignment decides
  put_int64(&build_options, 4, replicas);          // num_replicas
  put_int64(&build_options, 5, 1);                 // num_partitions
  put_message(&build_options, 9, assignment);      // device_assignment
  std::string options;                             // xla.CompileOptionsProto
  put_message(&options, 3, build_options);         // executable_build_options
  put_overrides(&options, overrides);
  return options;
}

}  // namespace torchtpu::pjrt
