#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <string>

#include "pjrt/fork_state.h"
#include "pjrt/pjrt.h"

namespace torchtpu::pjrt {
namespace {

std::string version_string(int major, int minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

Attribute to_attribute(const PJRT_NamedValue& value) {
  switch (value.type) {
    case PJRT_NamedValue_kString:
      return std::string(value.string_value, value.value_size);
    case PJRT_NamedValue_kInt64:
      return value.int64_value;
    case PJRT_NamedValue_kInt64List:
      return std::vector<int64_t>(value.int64_array_value,
                                  value.int64_array_value + value.value_size);
    case PJRT_NamedValue_kFloat:
      return value.float_value;
    case PJRT_NamedValue_kBool:
      return value.bool_value;
  }
  // A newer plugin may add value types; surfacing the raw type beats failing the whole load.
  return "<unknown attribute type " + std::to_string(static_cast<int>(value.type)) + ">";
}

// Paths naming a file are canonicalized so that two spellings of one plugin share one load
// (a second PJRT_Plugin_Initialize fails on some plugins). Bare library names are left for
// dlopen's search.
std::string cache_key(const std::string& path) {
  if (path.find('/') == std::string::npos) return path;
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) return path;
  return resolved;
}

// dlopen + GetPjrtApi + version check, shared by load() and probe(). Throws Error with the
// reason; on success the library stays loaded (see below).
const PJRT_Api* open_api(const std::string& path, void** handle_out) {
  struct stat info;
  if (path.find('/') != std::string::npos && stat(path.c_str(), &info) != 0) {
    throw Error("PJRT plugin not found: " + path);
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    if (path.find('/') == std::string::npos) {
      throw Error("PJRT plugin not found: " + path + " (" + (reason ? reason : "") + ")");
    }
    throw Error("cannot load PJRT plugin " + path + ": " + (reason ? reason : "dlopen failed"));
  }
  using GetPjrtApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetPjrtApiFn>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    // No plugin code has run yet, so unloading is safe.
    dlclose(handle);
    throw Error(path + " is not a PJRT plugin: it exports no GetPjrtApi symbol");
  }
  const PJRT_Api* api = get_api();
  if (api == nullptr) throw Error(path + " is not a PJRT plugin: GetPjrtApi returned null");
  // From here on the library stays loaded even on failure: GetPjrtApi ran plugin code whose
  // static state may not survive dlclose.
  const int major = api->pjrt_api_version.major_version;
  const int minor = api->pjrt_api_version.minor_version;
  if (major != PJRT_API_MAJOR || minor < PJRT_API_MINOR) {
    throw Error(path + " implements PJRT C API " + version_string(major, minor) +
                ", but torchtpu was built against PJRT C API " +
                version_string(PJRT_API_MAJOR, PJRT_API_MINOR) +
                " and needs the same major version and at least that minor version");
  }
  *handle_out = handle;
  return api;
}

std::mutex plugin_cache_mutex;
// Plugins stay loaded for the life of the process: PJRT plugins are not written to be
// unloaded, and re-initializing one is an error on some of them.
std::map<std::string, std::shared_ptr<Plugin>>& plugin_cache() {
  static std::map<std::string, std::shared_ptr<Plugin>> cache;
  return cache;
}

}  // namespace

std::pair<int, int> Plugin::probe(const std::string& path) {
  std::lock_guard<std::mutex> lock(plugin_cache_mutex);
  auto it = plugin_cache().find(cache_key(path));
  if (it != plugin_cache().end()) return {it->second->api_major(), it->second->api_minor()};
  // A later load() dlopens the same file again, which only raises the library's reference
  // count, and initializes it then.
  void* handle = nullptr;
  const PJRT_Api* api = open_api(path, &handle);
  return {api->pjrt_api_version.major_version, api->pjrt_api_version.minor_version};
}

std::shared_ptr<Plugin> Plugin::load(const std::string& path) {
  std::lock_guard<std::mutex> lock(plugin_cache_mutex);
  auto& cache = plugin_cache();
  const std::string key = cache_key(path);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;

  void* handle = nullptr;
  const PJRT_Api* api = open_api(path, &handle);

  std::shared_ptr<Plugin> plugin(new Plugin());
  plugin->handle_ = handle;
  plugin->api_ = api;
  plugin->path_ = path;

  PJRT_Plugin_Initialize_Args init{};
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  plugin->call(&PJRT_Api::PJRT_Plugin_Initialize, &init, "PJRT_Plugin_Initialize");
  // Cache right after initialization so a failure below cannot lead to a second Initialize.
  cache.emplace(key, plugin);

  if (api->PJRT_Plugin_Attributes != nullptr) {
    PJRT_Plugin_Attributes_Args attrs{};
    attrs.struct_size = PJRT_Plugin_Attributes_Args_STRUCT_SIZE;
    plugin->call(&PJRT_Api::PJRT_Plugin_Attributes, &attrs, "PJRT_Plugin_Attributes");
    for (size_t i = 0; i < attrs.num_attributes; ++i) {
      const PJRT_NamedValue& value = attrs.attributes[i];
      plugin->attributes_[std::string(value.name, value.name_size)] = to_attribute(value);
    }
  }
  return plugin;
}

namespace {
std::atomic<bool> forked_child{false};
}  // namespace

void mark_forked_child() { forked_child.store(true); }
bool in_forked_child() { return forked_child.load(std::memory_order_relaxed); }
const char* forked_child_message() {
  return "Cannot re-initialize tpu in forked subprocess. To use tpu with multiprocessing, you "
         "must use the 'spawn' start method";
}

int Plugin::api_major() const { return api_->pjrt_api_version.major_version; }

int Plugin::api_minor() const { return api_->pjrt_api_version.minor_version; }

Error Plugin::to_error(PJRT_Error* err, const char* what) const {
  PJRT_Error_Message_Args message{};
  message.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  message.error = err;
  api_->PJRT_Error_Message(&message);
  std::string text(message.message, message.message_size);

  int code = -1;
  PJRT_Error_GetCode_Args get_code{};
  get_code.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE;
  get_code.error = err;
  PJRT_Error* code_err = api_->PJRT_Error_GetCode(&get_code);
  if (code_err == nullptr) {
    code = get_code.code;
  } else {
    PJRT_Error_Destroy_Args destroy{};
    destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
    destroy.error = code_err;
    api_->PJRT_Error_Destroy(&destroy);
  }

  PJRT_Error_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = err;
  api_->PJRT_Error_Destroy(&destroy);

  if (what != nullptr && *what != '\0') text = std::string(what) + ": " + text;
  return Error(text, code);
}

void Plugin::check(PJRT_Error* err, const char* what) const {
  if (err != nullptr) throw to_error(err, what);
}

size_t element_size(PJRT_Buffer_Type type) {
  switch (type) {
    case PJRT_Buffer_Type_PRED:
    case PJRT_Buffer_Type_S8:
    case PJRT_Buffer_Type_U8:
      return 1;
    case PJRT_Buffer_Type_S16:
    case PJRT_Buffer_Type_U16:
    case PJRT_Buffer_Type_F16:
    case PJRT_Buffer_Type_BF16:
      return 2;
    case PJRT_Buffer_Type_S32:
    case PJRT_Buffer_Type_U32:
    case PJRT_Buffer_Type_F32:
      return 4;
    case PJRT_Buffer_Type_S64:
    case PJRT_Buffer_Type_U64:
    case PJRT_Buffer_Type_F64:
    case PJRT_Buffer_Type_C64:
      return 8;
    case PJRT_Buffer_Type_C128:
      return 16;
    default:
      return 0;
  }
}

}  // namespace torchtpu::pjrt
