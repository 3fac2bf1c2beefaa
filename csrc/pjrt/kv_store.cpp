#include "pjrt/kv_store.h"

#include <cstring>
#include <exception>
#include <type_traits>

namespace torchtpu::pjrt {
namespace {

void delete_value(char* value) { delete[] value; }

// The value handed to the plugin: a buffer it copies and then frees through delete_value.
char* copy_out(const std::string& value) {
  char* out = new char[value.size() == 0 ? 1 : value.size()];
  std::memcpy(out, value.data(), value.size());
  return out;
}

PJRT_Error* fail(PJRT_CallbackError* callback_error, PJRT_Error_Code code,
                 const std::string& message) {
  if (callback_error == nullptr || *callback_error == nullptr) return nullptr;
  return (*callback_error)(code, message.data(), message.size());
}

KvStore* store_of(void* user_arg) { return static_cast<KvStore*>(user_arg); }

}  // namespace

PJRT_Error* kv_get_callback(PJRT_KeyValueGetCallback_Args* args) {
  const std::string key(args->key, args->key_size);
  try {
    const std::string value =
        store_of(args->user_arg)->get(key, std::chrono::milliseconds(args->timeout_in_ms));
    args->value = copy_out(value);
    args->value_size = value.size();
    args->value_deleter_callback = &delete_value;
    return nullptr;
  } catch (const KvTimeout& e) {
    return fail(args->callback_error, PJRT_Error_Code_DEADLINE_EXCEEDED, e.what());
  } catch (const std::exception& e) {
    return fail(args->callback_error, PJRT_Error_Code_INTERNAL,
                "torchtpu key-value store: get " + key + ": " + e.what());
  }
}

PJRT_Error* kv_try_get_callback(PJRT_KeyValueTryGetCallback_Args* args) {
  const std::string key(args->key, args->key_size);
  try {
    const std::optional<std::string> value = store_of(args->user_arg)->try_get(key);
    if (!value) {
      return fail(args->callback_error, PJRT_Error_Code_NOT_FOUND,
                  "torchtpu key-value store: " + key + " not found");
    }
    args->value = copy_out(*value);
    args->value_size = value->size();
    args->value_deleter_callback = &delete_value;
    return nullptr;
  } catch (const std::exception& e) {
    return fail(args->callback_error, PJRT_Error_Code_INTERNAL,
                "torchtpu key-value store: try_get " + key + ": " + e.what());
  }
}

PJRT_Error* kv_put_callback(PJRT_KeyValuePutCallback_Args* args) {
  const std::string key(args->key, args->key_size);
  try {
    store_of(args->user_arg)->put(key, std::string(args->value, args->value_size));
    return nullptr;
  } catch (const std::exception& e) {
    return fail(args->callback_error, PJRT_Error_Code_INTERNAL,
                "torchtpu key-value store: put " + key + ": " + e.what());
  }
}

void attach_kv_store(PJRT_Client_Create_Args& args, KvStore* store) {
  if (store == nullptr) return;
  args.kv_get_callback = &kv_get_callback;
  args.kv_get_user_arg = store;
  args.kv_try_get_callback = &kv_try_get_callback;
  args.kv_try_get_user_arg = store;
  args.kv_put_callback = &kv_put_callback;
  args.kv_put_user_arg = store;
}

namespace {

// The plugin's PJRT_CallbackError while call_kv_* runs: the code and message are kept for the
// calling thread (calls run concurrently) and a non-null marker stands for the PJRT_Error.
thread_local KvCallOutcome* current_outcome = nullptr;

PJRT_Error* record_error(PJRT_Error_Code code, const char* message, size_t size) {
  current_outcome->code = code;
  current_outcome->message.assign(message, size);
  return reinterpret_cast<PJRT_Error*>(current_outcome);
}
PJRT_CallbackError record_error_fn = &record_error;

// Runs one callback with the outcome receiving its error; takes the value a get handed out.
template <typename Args>
KvCallOutcome run_callback(PJRT_Error* (*callback)(Args*), Args* args) {
  KvCallOutcome outcome;
  current_outcome = &outcome;
  PJRT_Error* err = callback(args);
  current_outcome = nullptr;
  if (err != nullptr) return outcome;
  if constexpr (!std::is_same_v<Args, PJRT_KeyValuePutCallback_Args>) {
    outcome.value.emplace(args->value, args->value_size);
    args->value_deleter_callback(args->value);
  }
  return outcome;
}

}  // namespace

KvCallOutcome call_kv_get(KvStore& store, const std::string& key, int timeout_ms) {
  PJRT_KeyValueGetCallback_Args a{};
  a.struct_size = PJRT_KeyValueGetCallback_Args_STRUCT_SIZE;
  a.key = key.data();
  a.key_size = key.size();
  a.timeout_in_ms = timeout_ms;
  a.callback_error = &record_error_fn;
  a.user_arg = &store;
  return run_callback(&kv_get_callback, &a);
}

KvCallOutcome call_kv_try_get(KvStore& store, const std::string& key) {
  PJRT_KeyValueTryGetCallback_Args a{};
  a.struct_size = PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE;
  a.key = key.data();
  a.key_size = key.size();
  a.callback_error = &record_error_fn;
  a.user_arg = &store;
  return run_callback(&kv_try_get_callback, &a);
}

KvCallOutcome call_kv_put(KvStore& store, const std::string& key, const std::string& value) {
  PJRT_KeyValuePutCallback_Args a{};
  a.struct_size = PJRT_KeyValuePutCallback_Args_STRUCT_SIZE;
  a.key = key.data();
  a.key_size = key.size();
  a.value = value.data();
  a.value_size = value.size();
  a.callback_error = &record_error_fn;
  a.user_arg = &store;
  return run_callback(&kv_put_callback, &a);
}

}  // namespace torchtpu::pjrt
