// The key-value store a plugin's multi-process client exchanges its topology through
// (PJRT_Client_Create_Args kv_get_callback / kv_try_get_callback / kv_put_callback): an abstract
// store here, so this layer stays free of torch; csrc/distributed/c10d_kv_store.h serves it with
// a c10d store, as JAX serves it with its coordination service.
#pragma once

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

#include "pjrt_c_api.h"

namespace torchtpu::pjrt {

// Called by the plugin from any of its threads at once: implementations must be thread-safe,
// and get() must block (up to `timeout`) until some process puts `key`.
class KvStore {
 public:
  virtual ~KvStore() = default;
  // The value of `key`; throws KvTimeout when no process put it within `timeout`.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // The value of `key`, or nullopt at once when nobody put it yet.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  virtual void put(const std::string& key, const std::string& value) = 0;
};

// A key that did not appear in time: the plugin gets DEADLINE_EXCEEDED (NOT_FOUND for try_get).
struct KvTimeout : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The three callbacks on `args`, served by `store` (which must outlive the client). A store's
// exception becomes the plugin's error (its message kept), never an escaping C++ exception.
void attach_kv_store(PJRT_Client_Create_Args& args, KvStore* store);

// The callbacks themselves, as the plugin calls them.
PJRT_Error* kv_get_callback(PJRT_KeyValueGetCallback_Args* args);
PJRT_Error* kv_try_get_callback(PJRT_KeyValueTryGetCallback_Args* args);
PJRT_Error* kv_put_callback(PJRT_KeyValuePutCallback_Args* args);

// What one call through the callbacks gave a plugin: the value (get, try_get), or the error code
// and message the plugin's PJRT_CallbackError received.
struct KvCallOutcome {
  std::optional<std::string> value;
  PJRT_Error_Code code = PJRT_Error_Code_OK;
  std::string message;
  bool ok() const { return code == PJRT_Error_Code_OK; }
};

// Plays the plugin's side of the callbacks onto `store`, filling the argument structs as a plugin
// does and freeing values through their deleter (the C++ tests and the Python test binding).
// Thread-safe: calls run concurrently, as a plugin's pool makes them.
KvCallOutcome call_kv_get(KvStore& store, const std::string& key, int timeout_ms);
KvCallOutcome call_kv_try_get(KvStore& store, const std::string& key);
KvCallOutcome call_kv_put(KvStore& store, const std::string& key, const std::string& value);

}  // namespace torchtpu::pjrt
