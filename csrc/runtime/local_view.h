// One device per local rank under a multi-process launch, numbered as the CUDA idiom expects.
//
// torchrun (and Ray Train, Accelerate) start LOCAL_WORLD_SIZE processes per host and tell each
// its LOCAL_RANK; CUDA code then does `torch.cuda.set_device(LOCAL_RANK)` and
// `torch.device("cuda", LOCAL_RANK)`. A TPU chip or a GPU can be opened by one process only (libtpu
// locks its chips; XLA:GPU reserves memory), so each process opens only its own device(s), and
// torchtpu numbers them where the idiom looks: with k devices per process, the process owns
// tpu:LOCAL_RANK*k .. tpu:LOCAL_RANK*k+k-1 and device_count() is LOCAL_WORLD_SIZE*k. The other
// indices are the peers' devices: asking for one raises an error that says whose it is. The
// thread's current device starts at the first owned index, so `.to("tpu")` lands on it too.
//
// It applies when LOCAL_RANK and LOCAL_WORLD_SIZE (> 1) are set and the devices were not chosen
// by hand: XLA:CPU without TORCHTPU_CPU_DEVICE_COUNT (the process gets one CPU device), TPU
// without TPU_VISIBLE_CHIPS (torchtpu sets the one-chip-per-process environment, as torch_xla
// does), XLA:GPU without CUDA_VISIBLE_DEVICES (the client's visible_devices option).
// TORCHTPU_LOCAL_DEVICES=all turns it off: every device is opened and numbered from 0.
#pragma once

#include <string>

namespace torchtpu::runtime {

// Which plugin a path names, by its file name (the plugins' own names: xla_cpu_pjrt.so,
// xla_cuda_plugin.so / xla_gpu_pjrt.so, libtpu.so).
enum class PluginKind { kCpu, kGpu, kTpu, kOther };
PluginKind plugin_kind(const std::string& plugin_path);

struct LocalView {
  bool on = false;
  int local_rank = 0;
  int local_world_size = 1;
  std::string why;  // why it is on or off, for the docs' "which device" question
};

// Computed from the environment; `plugin_path` says which plugin's "chosen by hand" variable
// counts. Throws std::invalid_argument for a LOCAL_RANK / LOCAL_WORLD_SIZE that is not a valid
// pair while the view would apply.
LocalView local_view_for(const std::string& plugin_path);

// The configured plugin's view (runtime.cpp): computed at the first call after configure().
const LocalView& local_view();

}  // namespace torchtpu::runtime
