"""Testing helpers for torchtpu: the OpInfo conformance harness lives in `torchtpu.testing.opinfo`
(imported lazily, since it pulls in torch's large internal OpInfo database)."""
