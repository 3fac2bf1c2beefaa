#include <exception>
#include <iostream>

#include "pjrt/fork_state.h"
#include "pjrt/pjrt.h"

namespace torchtpu::pjrt {
namespace {

// Owned by the plugin between PJRT_Event_OnReady and the callback; keeps the plugin alive so
// the error can still be read and destroyed.
struct OnReadyState {
  std::shared_ptr<Plugin> plugin;
  std::function<void(const std::string&)> callback;
};

void on_ready_trampoline(PJRT_Error* error, void* user_arg) {
  std::unique_ptr<OnReadyState> state(static_cast<OnReadyState*>(user_arg));
  std::string message;
  if (error != nullptr) message = state->plugin->to_error(error, "").what();
  // An exception must not unwind into the plugin's C frames.
  try {
    state->callback(message);
  } catch (const std::exception& e) {
    std::cerr << "torchtpu: PJRT event callback threw: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "torchtpu: PJRT event callback threw an unknown exception\n";
  }
}

}  // namespace

Event::Event(std::shared_ptr<Plugin> plugin, PJRT_Event* event)
    : plugin_(std::move(plugin)), event_(event) {}

Event::~Event() {
  if (event_ == nullptr || in_forked_child()) return;
  PJRT_Event_Destroy_Args args{};
  args.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  args.event = event_;
  try {
    plugin_->call(&PJRT_Api::PJRT_Event_Destroy, &args, "PJRT_Event_Destroy");
  } catch (const std::exception& e) {
    std::cerr << "torchtpu: " << e.what() << "\n";
  }
}

// A null event stands for work that finished synchronously, so it reads as ready and OK.
bool Event::is_ready() const {
  if (in_forked_child()) throw Error(forked_child_message());
  if (event_ == nullptr) return true;
  PJRT_Event_IsReady_Args args{};
  args.struct_size = PJRT_Event_IsReady_Args_STRUCT_SIZE;
  args.event = event_;
  plugin_->call(&PJRT_Api::PJRT_Event_IsReady, &args, "PJRT_Event_IsReady");
  return args.is_ready;
}

void Event::await() const {
  if (in_forked_child()) throw Error(forked_child_message());
  if (event_ == nullptr) return;
  PJRT_Event_Await_Args await_args{};
  await_args.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  await_args.event = event_;
  plugin_->call(&PJRT_Api::PJRT_Event_Await, &await_args, "PJRT_Event_Await");
  // Await's own status is the event's on current plugins, but the C API documents
  // PJRT_Event_Error as the authoritative way to read it.
  PJRT_Event_Error_Args error_args{};
  error_args.struct_size = PJRT_Event_Error_Args_STRUCT_SIZE;
  error_args.event = event_;
  plugin_->call(&PJRT_Api::PJRT_Event_Error, &error_args, "PJRT event");
}

bool Event::poll() const {
  if (!is_ready()) return false;
  if (event_ == nullptr) return true;
  PJRT_Event_Error_Args error_args{};
  error_args.struct_size = PJRT_Event_Error_Args_STRUCT_SIZE;
  error_args.event = event_;
  plugin_->call(&PJRT_Api::PJRT_Event_Error, &error_args, "PJRT event");
  return true;
}

void Event::on_ready(std::function<void(const std::string& error)> callback) {
  if (event_ == nullptr) {
    callback("");
    return;
  }
  auto state = std::make_unique<OnReadyState>();
  state->plugin = plugin_;
  state->callback = std::move(callback);
  PJRT_Event_OnReady_Args args{};
  args.struct_size = PJRT_Event_OnReady_Args_STRUCT_SIZE;
  args.event = event_;
  args.callback = on_ready_trampoline;
  args.user_arg = state.get();
  // On failure the plugin never took the state, so unique_ptr still frees it.
  plugin_->call(&PJRT_Api::PJRT_Event_OnReady, &args, "PJRT_Event_OnReady");
  state.release();
}

}  // namespace torchtpu::pjrt
