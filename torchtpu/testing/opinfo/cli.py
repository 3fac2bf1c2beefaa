"""The command line: `python -m torchtpu.testing.opinfo` (scripts/opinfo_sweep.sh)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from .common import DEFAULT_MAX_SAMPLES, DEFAULT_TIMEOUT, DTYPES
from .runner import _print_progress, run_sweep
from .report import markdown_summary, read_json, summarize, write_json


_DESCRIPTION = "Conformance harness over PyTorch's OpInfo database (`op_db`)."


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=_DESCRIPTION)
    p.add_argument("--ops", help="comma-separated OpInfo names (default: all of op_db)")
    p.add_argument("--dtypes", default=",".join(DTYPES),
                   help=f"comma-separated, from {','.join(DTYPES)}")
    p.add_argument("--max-samples", type=int, default=DEFAULT_MAX_SAMPLES)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help="seconds per (op, dtype) before it is recorded as 'error: timeout'")
    p.add_argument("--out", help="JSON report path (written as the sweep goes)")
    p.add_argument("--summary", help="markdown summary path ('-' prints it)")
    p.add_argument("--resume", action="store_true",
                   help="keep the records already in --out and run only the missing ones")
    p.add_argument("--merge", nargs="*", default=[],
                   help="JSON reports to merge in (later records replace earlier ones)")
    p.add_argument("--note", default="", help="a note for the summary header")
    p.add_argument("--no-run", action="store_true", help="only merge and write the summary")
    p.add_argument("-q", "--quiet", action="store_true")
    a = p.parse_args(argv)

    records: list[dict] = []
    meta: dict = {}
    if a.resume and a.out and os.path.exists(a.out):
        records, meta = read_json(a.out)
    for path in a.merge:
        more, m = read_json(path)
        records += more
        meta.setdefault("seconds", 0)
        meta["seconds"] = round(meta.get("seconds", 0) + m.get("seconds", 0), 1)
        meta["dtypes"] = sorted(set(meta.get("dtypes", [])) | set(m.get("dtypes", [])),
                                key=list(DTYPES).index)
        meta.setdefault("max_samples", m.get("max_samples"))
    dtypes = [d for d in a.dtypes.split(",") if d]
    meta.update({"torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                     time.gmtime()),
                 "max_samples": a.max_samples})
    if a.note:
        meta["note"] = a.note
    if not a.no_run:
        meta["dtypes"] = sorted(set(meta.get("dtypes", [])) | set(dtypes),
                                key=list(DTYPES).index)
        done = {(r["op"], r["dtype"]) for r in records}
        start = time.perf_counter()
        base_seconds = meta.get("seconds", 0)
        last_write = [time.perf_counter()]

        def progress(rec):
            records.append(rec)
            if not a.quiet:
                _print_progress(rec)
            if a.out and time.perf_counter() - last_write[0] > 30:
                meta["seconds"] = round(base_seconds + time.perf_counter() - start, 1)
                write_json(records, a.out, meta)
                last_write[0] = time.perf_counter()

        run_sweep(ops=a.ops.split(",") if a.ops else None, dtypes=dtypes,
                  max_samples=a.max_samples, timeout=a.timeout, progress=progress, done=done)
        meta["seconds"] = round(base_seconds + time.perf_counter() - start, 1)
    # Later records replace earlier ones for the same (op, dtype).
    dedup: dict[tuple[str, str], dict] = {}
    for r in records:
        dedup[(r["op"], r["dtype"])] = r
    # A "no swept dtype" record only stands for an op with no other record (merged sweeps over
    # different dtype sets).
    real = {op for (op, d) in dedup if d != "-"}
    records = [r for (op, d), r in dedup.items() if d != "-" or op not in real]
    if a.out:
        write_json(records, a.out, meta)
    if a.summary:
        text = markdown_summary(records, meta)
        if a.summary == "-":
            print(text)
        else:
            with open(a.summary, "w") as f:
                f.write(text)
    s = summarize(records)
    print(f"float32: {s['float32_native_pct']:.1f}% native, "
          f"{s['float32_native_or_fallback_pct']:.1f}% native-or-fallback of "
          f"{s['float32_ops']} OpInfos; totals {json.dumps(s['totals'])}", file=sys.stderr)
    return 0
