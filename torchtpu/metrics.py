"""Counters that make every compile, transfer, sync and CPU fallback visible."""

from __future__ import annotations

from . import _C


def metrics() -> dict:
    m = _C._metrics()
    m["program_cache_entries"] = _C._program_cache_size()
    return m


def reset_metrics() -> None:
    _C._reset_metrics()


def recompile_reasons() -> list:
    """The most recent recompiles (misses of an op or compiled graph that had been compiled for
    another signature), oldest first, as (op or graph, reason): the nearest cached signature and
    what differs from it, the same text as TORCHTPU_LOG_COMPILES=1 prints. Counted in
    metrics()["recompiles"]; reset_metrics() clears both."""
    return list(_C._recompile_reasons())


def finish_background_compiles() -> None:
    """Compiles the queued background work now and waits for it: the full-effort programs of hot
    light-compiled ops (TORCHTPU_LIGHT_COMPILE=1). An eager op's program
    compiles light first; once it has launched TORCHTPU_LIGHT_COMPILE_UPGRADE_AFTER (8) times,
    its full-effort compile is queued and starts when no other compile has run for a second, and
    later launches run it. Call this after a warmup to measure or run at steady state at once."""
    _C._finish_background_compiles()


def metrics_report() -> str:
    m = metrics()
    by_op = m.pop("cpu_fallbacks_by_op")
    by_cause = m.pop("fused_flushes_by_cause")
    width = max(len(k) for k in m)
    lines = ["torchtpu metrics", "-" * (width + 16)]
    for k, v in m.items():
        shown = f"{v:.3f}" if isinstance(v, float) else str(v)
        lines.append(f"{k:<{width}}  {shown:>12}")
    if by_op:
        lines.append("CPU fallbacks by op:")
        for op, n in sorted(by_op.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {op:<{width}}  {n:>10}")
    if any(by_cause.values()):
        lines.append("fused eager regions run, by cause:")
        for cause, n in by_cause.items():
            if n:
                lines.append(f"  {cause:<{width}}  {n:>10}")
    lines.append(f"disk cache: {cache_dir() or 'off'}")
    return "\n".join(lines)


def cache_dir() -> str:
    """The persistent compilation cache's folder, or "" when it is off (TORCHTPU_CACHE=0) or was
    disabled for this process (a platform that cannot reload executables)."""
    return _C._cache_dir()
