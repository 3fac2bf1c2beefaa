// torchtpu/_device_probe PLUGIN: creates a PJRT client of PLUGIN, prints its addressable device
// count and exits. torchtpu runs it to answer torch.tpu.device_count() / is_available() before
// the process uses the device (pjrt::count_devices_in_child): a client holds the devices (all of
// a TPU host's chips; most of a GPU's memory on XLA:GPU), and a process that only asks (a
// launcher, an engine's parent process) must leave them to the processes it starts. Torch-free:
// it links the pjrt layer only, so it starts in milliseconds.
#include <cstdio>
#include <exception>
#include <string>

#include "pjrt/pjrt.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PJRT_PLUGIN_PATH\n", argv[0]);
    return 2;
  }
  try {
    auto plugin = torchtpu::pjrt::Plugin::load(argv[1]);
    auto client = torchtpu::pjrt::Client::create(plugin);
    std::printf("torchtpu-device-count %zu\n", client->devices().size());
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    // One line: the reader takes the text up to the first newline.
    std::string message = e.what();
    for (char& c : message) {
      if (c == '\n') c = ' ';
    }
    std::printf("torchtpu-device-error %s\n", message.c_str());
    std::fflush(stdout);
    return 1;
  }
}
