"""Recorded signatures, replayed at startup: a service pays its compiles before traffic.

Every eager program a process builds records the call that built it (the op, and per argument
what decides the program: dtype, sizes, strides, storage layout; host values as they were).
``torchtpu.save_signatures(path)`` writes those records; ``torchtpu.warmup(path)`` in a later
process replays each one on zero-filled tensors of the recorded layout, so each signature is
compiled (or loaded from the disk cache) before the first request needs it::

    # once, after a representative run (or at shutdown)
    torchtpu.save_signatures("signatures.bin")
    # at startup, before serving
    torchtpu.warmup("signatures.bin")

Replay draws no random numbers from the caller's point of view (the tpu generators' states are
restored) and changes no user tensor. Compiled graphs (torch.compile) are not recorded: Dynamo
traces them at their first call.
"""

from __future__ import annotations

import os
import struct
import tempfile

import torch

from . import _C

_MAGIC = b"torchtpu-signatures 1\n"


def save_signatures(path: str | os.PathLike) -> int:
    """Writes the signatures of every eager program built in this process so far to ``path``
    (atomically); returns how many."""
    records = _C._recorded_signatures()
    data = bytearray(_MAGIC)
    for r in records:
        data += struct.pack("<Q", len(r))
        data += r
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".signatures.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(records)


def _read(path: str) -> list[bytes]:
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(_MAGIC):
        raise ValueError(f"torchtpu.warmup: {path} is not a signature file written by "
                         f"torchtpu.save_signatures (of this version)")
    records, pos = [], len(_MAGIC)
    while pos < len(data):
        if pos + 8 > len(data):
            raise ValueError(f"torchtpu.warmup: {path} is truncated")
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        if pos + n > len(data):
            raise ValueError(f"torchtpu.warmup: {path} is truncated")
        records.append(data[pos:pos + n])
        pos += n
    return records


def warmup(path: str | os.PathLike) -> dict:
    """Replays the signatures saved in ``path``: compiles (or loads from the disk cache) each
    one's program now. Returns counts: ``replayed``, ``failed`` (records that no longer replay,
    e.g. written by another torchtpu build; each is skipped), ``compiled`` and
    ``loaded_from_disk`` (programs), and the first few ``errors``."""
    path = os.fspath(path)
    records = _read(path)
    # The caller's own pending device errors belong to the caller: raise them before replaying.
    torch.tpu.synchronize()
    before = _C._metrics()
    rng = torch.tpu.get_rng_state_all()
    errors: list[str] = []
    try:
        with torch.no_grad():
            for r in records:
                try:
                    _C._replay_signature(r)
                except Exception as e:  # a record that no longer replays costs only its warmup
                    errors.append(str(e).splitlines()[0])
        try:
            # Replayed on zeros: a device-side check may fail on values no user chose.
            torch.tpu.synchronize()
        except Exception:
            pass
    finally:
        torch.tpu.set_rng_state_all(rng)
    after = _C._metrics()
    return {
        "replayed": len(records) - len(errors),
        "failed": len(errors),
        "compiled": after["programs_compiled"] - before["programs_compiled"],
        "loaded_from_disk": after["disk_cache_hits"] - before["disk_cache_hits"],
        "errors": errors[:5],
    }
