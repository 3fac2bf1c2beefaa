"""torch.profiler on tpu: device activities per executed program next to the CPU ops that launched
them, written as a Chrome trace that Perfetto (ui.perfetto.dev) or chrome://tracing opens.

    python examples/profile_trace.py [--out /tmp/torchtpu-trace.json]
"""

import argparse
import json

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import torchtpu  # noqa: F401


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="/tmp/torchtpu-trace.json")
    args = p.parse_args()

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 64)).to("tpu")
    x = torch.randn(32, 64, device="tpu")
    model(x).sum().item()  # compile outside the trace

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        for _ in range(5):
            with record_function("step"):
                model(x).sum().item()
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=8))
    prof.export_chrome_trace(args.out)
    events = json.load(open(args.out))["traceEvents"]
    device_events = [e for e in events if e.get("cat") == "kernel" or "tpu" in str(e.get("name"))]
    print(f"wrote {args.out}: {len(events)} events, {len(device_events)} on or about tpu; open it "
          "in ui.perfetto.dev")
    assert device_events, "no tpu activity in the trace"


if __name__ == "__main__":
    main()
