"""Testing helpers for torchtpu: the OpInfo conformance harness lives in `torchtpu.testing.opinfo`
(imported lazily, since it pulls in torch's large internal OpInfo database)."""


def run_ranks_in_threads(fn, world_size, **kwargs):
    """Runs ``fn(rank)`` on ``world_size`` thread ranks, each with its default process group on
    ``tpu:rank``; see torchtpu.testing.distributed."""
    from .distributed import run_ranks_in_threads as run

    return run(fn, world_size, **kwargs)
