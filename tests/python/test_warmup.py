"""torchtpu.save_signatures / torchtpu.warmup: a process replays the signatures another process
recorded, so its own work then compiles nothing, with results equal to the CPU's.

Each process has its own TORCHTPU_CACHE_DIR under tmp_path: a fresh one makes the replay
compile, a warm one makes it load from disk.
"""

from __future__ import annotations

import json

import pytest
import torch

# A small training step (linear, GELU, layer norm, softmax cross-entropy, AdamW) plus indexing,
# a reduction and an in-place update, run on tpu and compared with the same on the CPU. Weights
# come from the CPU generator, so the two runs start equal.
WORKLOAD = """
import json, os, sys
import torch, torchtpu

def work(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(6, 8).to(device)
    y = torch.tensor([0, 1, 2, 3, 1, 0]).to(device)
    losses = []
    for _ in range(2):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    with torch.no_grad():
        out = model(x)
        out[1:3] += 1
        extra = out[2].sum() + out[:, 1].max()
    return [float(l) for l in losses] + [float(extra)] + out.flatten().tolist()

mode = sys.argv[1]
report = {}
if mode == "replay":
    report["warmup"] = torchtpu.warmup(os.environ["SIGNATURES"])
torchtpu.reset_metrics()
got = work("tpu")
m = torchtpu.metrics()
report["compiled"] = m["programs_compiled"]
report["disk_hits"] = m["disk_cache_hits"]
report["close"] = torch.allclose(torch.tensor(got), torch.tensor(work("cpu")), rtol=1e-4, atol=1e-5)
if mode == "record":
    report["saved"] = torchtpu.save_signatures(os.environ["SIGNATURES"])
print("REPORT " + json.dumps(report))
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, start_python):
    folder = tmp_path_factory.mktemp("warmup")
    signatures = folder / "signatures.bin"
    return folder, signatures, _run(start_python, "record", folder / "cache-record", signatures)


def _run(start_python, mode, cache, signatures):
    code = "import sys; sys.argv = ['-', %r]\n" % mode + WORKLOAD
    r = start_python(code, timeout=600, TORCHTPU_CACHE_DIR=str(cache),
                     SIGNATURES=str(signatures)).wait()
    line = [x for x in r.stdout.splitlines() if x.startswith("REPORT ")][-1]
    return json.loads(line[len("REPORT "):])


def test_recording_process(recorded):
    _, signatures, report = recorded
    assert report["close"]
    assert report["compiled"] > 0
    assert report["saved"] >= report["compiled"]
    assert signatures.stat().st_size > 0


def test_replay_on_an_empty_cache_compiles_before_the_work(recorded, start_python):
    folder, signatures, first = recorded
    report = _run(start_python, "replay", folder / "cache-fresh", signatures)
    w = report["warmup"]
    assert w["failed"] == 0, w["errors"]
    assert w["replayed"] == first["saved"]
    assert w["compiled"] > 0
    # The work itself: every program is already in memory.
    assert report["compiled"] == 0 and report["disk_hits"] == 0
    assert report["close"]


def test_replay_on_a_warm_cache_loads_instead_of_compiling(recorded, start_python):
    folder, signatures, first = recorded
    # The recording process wrote its programs to its own cache: replay there loads them.
    report = _run(start_python, "replay", folder / "cache-record", signatures)
    w = report["warmup"]
    assert w["failed"] == 0, w["errors"]
    assert w["compiled"] == 0 and w["loaded_from_disk"] > 0
    assert report["compiled"] == 0 and report["disk_hits"] == 0
    assert report["close"]


# In a fresh interpreter: this process's own records would be every program of the test session.
CHECKS = """
import struct, sys
import pytest, torch, torchtpu
from torchtpu import _warmup

folder = sys.argv[1]

# Replay draws its random numbers on zeros and then restores the generators.
x = torch.zeros(64, device="tpu")
torch.manual_seed(3)
want = x.clone().uniform_().cpu()
torch.ones(3, device="tpu").add(1).cpu()
path = folder + "/signatures.bin"
assert torchtpu.save_signatures(path) > 0
torch.manual_seed(3)
w = torchtpu.warmup(path)
assert w["failed"] == 0 and w["replayed"] > 0, w
assert torch.equal(x.clone().uniform_().cpu(), want)

# Bad files raise, naming the file.
with open(folder + "/junk.bin", "wb") as f:
    f.write(b"not signatures")
with pytest.raises(ValueError, match="junk.bin is not a signature file"):
    torchtpu.warmup(folder + "/junk.bin")
with open(path, "rb") as f:
    good = f.read()
with open(folder + "/truncated.bin", "wb") as f:
    f.write(good[:-3])
with pytest.raises(ValueError, match="truncated"):
    torchtpu.warmup(folder + "/truncated.bin")
with pytest.raises(FileNotFoundError):
    torchtpu.warmup(folder + "/missing.bin")

# A record that no longer replays (an op this build does not have) is skipped and counted.
bad = struct.pack("<q", 1) + struct.pack("<q", 8) + b"aten::no" + struct.pack("<q", 0)
bad += struct.pack("<q", 0)
with open(folder + "/bad.bin", "wb") as f:
    f.write(_warmup._MAGIC + struct.pack("<Q", len(bad)) + bad)
w = torchtpu.warmup(folder + "/bad.bin")
assert w["failed"] == 1 and w["replayed"] == 0, w
assert "unknown operator aten::no" in w["errors"][0], w
# The process is fine.
assert torch.equal(torch.ones(2, device="tpu").mul(3).cpu(), torch.full((2,), 3.0))
print("OK")
"""


def test_random_stream_bad_files_and_stale_records(tmp_path, run_python):
    code = "import sys; sys.argv = ['-', %r]\n" % str(tmp_path) + CHECKS
    r = run_python(code, timeout=300, TORCHTPU_CACHE_DIR=str(tmp_path / "cache"))
    assert r.stdout.strip().endswith("OK")
