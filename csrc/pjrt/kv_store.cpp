#include "pjrt/kv_store.h"

#include <cstring>
#include <exception>

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

}  // namespace torchtpu::pjrt
