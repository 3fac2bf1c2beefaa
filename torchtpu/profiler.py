"""torch.profiler on tpu.

torchtpu registers a Kineto activity profiler through PyTorch's PrivateUse1 profiler registry, so
the standard API records device work::

    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        model(x)
    print(prof.key_averages().table(sort_by="device_time_total"))
    prof.export_chrome_trace("trace.json")

What it records (csrc/runtime/trace.h, csrc/profiler/kineto_session.cpp):

- one device activity per executed program, named after its op (``aten::mm``) or graph
  (``graph <name>``), on a "tpu:N" track, linked to the CPU op that launched it (its device time
  shows in ``key_averages()``) and joined to the host-side ``tpu::launch`` by a flow arrow;
- ``tpu::copy_h2d`` / ``tpu::copy_d2h`` on the same track, with their ``bytes``;
- host-side ``tpu::compile`` (its ``program`` argument says the signature and how the cache
  answered), ``tpu::synchronize`` and ``tpu::cpu_fallback`` (``op``) beside the op that caused them.

Times are the host's clock: an execution ends when PJRT's completion callback runs and starts
when it was launched or when the device's previous execution ended, whichever is later. Where the
plugin has PJRT's profiler extension (libtpu, the XLA GPU plugin; ``device_timestamps()``), the
trace also holds the plugin's own device spans (XLA modules, ops, kernels), timed by the device,
one track per kind on the same "tpu:N" device; the XLA CPU plugin has no such extension.
"""

from __future__ import annotations

from . import _C


def is_available() -> bool:
    """True when this build registered the tpu activity profiler (torch builds whose headers
    have the PrivateUse1 profiler registry; torch 2.11's lack it, and profiles then show only
    CPU activity)."""
    return bool(_C._kineto_profiler_registered())


def device_timestamps() -> bool:
    """True when the plugin offers PJRT's profiler extension, whose device-timed spans
    torch.profiler traces then include (starts the runtime). False on the XLA CPU plugin."""
    return bool(_C._plugin_extensions()["profiler"])
