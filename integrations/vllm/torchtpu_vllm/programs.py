"""The step as XLA programs: ONE program per (tokens, requests) bucket holds the model's forward,
every layer's attention and KV-cache write, the logits of the sampled rows and their greedy
tokens; one more program per request bucket samples (temperature, top-k, top-p, min-p, seeds).

Each program is traced once with make_fx (fake tensors, functionalized, the tpu backend's
decompositions: what torchtpu.compile_step does for a training step) as a pure function of the
model's parameters and buffers, the layers' KV caches and the step's one int32 buffer. The
caches' in-place updates become writes into the program's donated cache inputs. The traced graph
goes through torch.compile(backend="tpu")'s graph lowering (the one lowering table), and every
bucket is compiled at startup, on several threads at once, into torchtpu's disk cache: a later
start loads them without compiling.

After warm-up, a new compile is a warning naming what compiled (TORCHTPU_VLLM_STRICT_COMPILES=1
makes it an error).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np
import torch

from .runner_inputs import StepLayout, dummy_buffer
from .sampling import sample

logger = logging.getLogger("vllm.plugins.torchtpu_vllm.programs")

STRICT_ENV = "TORCHTPU_VLLM_STRICT_COMPILES"


class ProgramError(RuntimeError):
    pass


def trace_program(name: str, fn: Callable, inputs: list[torch.Tensor]):
    """fn(*inputs) -> list of tensors, as one compiled tpu graph (torchtpu's CompiledGraph), and
    its outputs' fake values. Raises ProgramError when the graph does not lower to one program
    (the reason is torchtpu's)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchtpu import _compile_step, _dynamo

    before = len(_dynamo._eager_graphs)
    try:
        with torch.compiler._compile_session_context():
            gm = make_fx(_compile_step._functionalized(fn, set()),
                         decomposition_table=_dynamo.decomposition_table(),
                         tracing_mode="fake", _allow_non_fake_inputs=False)(
                             *[t.detach() for t in inputs])
    except AssertionError as e:
        if "convert all Tensors to FakeTensors" not in str(e):
            raise
        raise ProgramError(
            f"torchtpu_vllm: the {name} program reads a tensor that is neither a parameter or "
            f"buffer of the model nor a KV cache ({str(e).splitlines()[-1][:200]})") from None
    _compile_step._clean_graph(gm)
    gm.recompile()
    output = next(n for n in gm.graph.nodes if n.op == "output")
    out_vals = [a.meta.get("val") for a in output.args[0]]
    compiled = _dynamo._compile_graph(gm, inputs)
    if not isinstance(compiled, _dynamo.CompiledGraph):
        reason = _dynamo._eager_graphs[-1][1] if len(_dynamo._eager_graphs) > before else (
            getattr(compiled, "reason", "unknown"))
        raise ProgramError(f"torchtpu_vllm: the {name} program does not lower to one tpu "
                           f"program: {reason} (run with enforce_eager=True meanwhile)")
    return compiled, out_vals


class TraceCache:
    """Traced step graphs on disk, beside torchtpu's compilation cache: a warm start replays a
    bucket's graph (torchtpu's lowering recipe, plain data) instead of tracing the model again,
    and its program then comes from the compilation cache. The key holds everything a trace
    depends on: vLLM's hash of its configuration (model, its config, dtype, parallelism...), the
    versions of vLLM and torch, the torchtpu build, the plugin's sources, the program and the
    shapes and dtypes of its inputs. Off with torchtpu's cache (TORCHTPU_CACHE=0)."""

    FORMAT = "torchtpu-vllm-trace-1"

    def __init__(self, vllm_config):
        from torchtpu import _C

        root = _C._cache_dir()
        self.dir = os.path.join(root, "vllm-traces") if root else ""
        self.base = ""
        if self.dir:
            self.base = _fingerprint(vllm_config)

    def _path(self, name: str, inputs: list[torch.Tensor]) -> str:
        sig = [(tuple(t.shape), str(t.dtype)) for t in inputs]
        key = hashlib.sha256(repr((self.FORMAT, self.base, name, sig)).encode()).hexdigest()
        return os.path.join(self.dir, key + ".pkl")

    def load(self, name: str, inputs: list[torch.Tensor]):
        """(compiled graph, extra) recorded for this program and inputs, or None."""
        if not self.dir:
            return None
        path = self._path(name, inputs)
        if not os.path.exists(path):
            return None
        from torchtpu import _dynamo

        try:
            with open(path, "rb") as f:
                entry = pickle.load(f)
            if entry.get("format") != self.FORMAT:
                return None
            compiled = _dynamo.CompiledGraph.__new__(_dynamo.CompiledGraph)
            compiled.__setstate__(entry["graph"])
            return compiled, entry["extra"]
        except Exception as e:  # a damaged entry costs a trace, nothing else
            logger.warning("torchtpu_vllm: ignoring the traced graph in %s: %s", path, e)
            return None

    def store(self, name: str, inputs: list[torch.Tensor], compiled, extra) -> None:
        if not self.dir:
            return
        path = self._path(name, inputs)
        try:
            os.makedirs(self.dir, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".trace.")
            # pickle, not torch.save: a graph's constants include torch.memory_format values.
            with os.fdopen(fd, "wb") as f:
                pickle.dump({"format": self.FORMAT, "graph": compiled.__getstate__(),
                             "extra": extra}, f)
            os.replace(tmp, path)
        except Exception as e:  # noqa: BLE001  (a graph that does not save is traced next time)
            logger.warning("torchtpu_vllm: not caching the traced graph of %s: %s", name, e)


def _fingerprint(vllm_config) -> str:
    import vllm

    import torchtpu
    from torchtpu import _C

    here = os.path.dirname(os.path.abspath(__file__))
    parts = [vllm_config.compute_hash(), vllm.__version__, torch.__version__]
    lib = _C.__file__
    st = os.stat(lib)
    parts.append((lib, st.st_size, st.st_mtime_ns))
    sources = [os.path.join(here, f) for f in sorted(os.listdir(here)) if f.endswith(".py")]
    tt = os.path.dirname(os.path.abspath(torchtpu.__file__))
    sources += [os.path.join(tt, f) for f in ("_dynamo.py", "_compile_step.py")]
    h = hashlib.sha256()
    for path in sources:
        with open(path, "rb") as f:
            h.update(f.read())
    parts.append(h.hexdigest())
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def prepare(compiled, inputs: list[torch.Tensor]) -> bool:
    """Compiles (or loads) `compiled`'s program for these inputs without running it."""
    return compiled._executable().prepare(list(inputs) + list(compiled.constants))


class StepPrograms:
    """The runner's programs: `forward[(tokens, reqs)]` and `sampler[reqs]`."""

    def __init__(self, runner, max_blocks: int):
        from torchtpu import _compile_step

        self.runner = runner
        self.max_blocks = max_blocks
        self._owners = _compile_step._Owners([runner.model])
        self._slots = _compile_step._Slots(self._owners)
        self.state = list(self._slots.tensors)
        # Each distinct cache tensor once (layers that share a cache share an input).
        layers = runner.tpu_attention_layers()
        self.kv: list[torch.Tensor] = []
        self._kv_of: dict[str, int] = {}
        seen: dict[int, int] = {}
        for name, layer in layers.items():
            t = layer.kv_cache
            if id(t) not in seen:
                seen[id(t)] = len(self.kv)
                self.kv.append(t)
            self._kv_of[name] = seen[id(t)]
        self._layers = layers
        self.traces = TraceCache(runner.vllm_config)
        self.forward: dict[tuple[int, int], object] = {}
        self.sampler: dict[int, object] = {}
        self.warm = False
        self._metrics_after_warmup: dict | None = None
        self._recompiles_seen = 0

    # -- tracing ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _bound(self, state: list, kv: list):
        """Inside: the model's parameters and buffers, the layers' caches and tensors their
        attention holds (sinks) are the traced stand-ins."""
        from torchtpu import _compile_step

        saved_kv = {name: layer.kv_cache for name, layer in self._layers.items()}
        saved_sinks = []
        with _compile_step._swapped_state(self._owners, self._slots, state) as by_id:
            try:
                for name, layer in self._layers.items():
                    layer.kv_cache = kv[self._kv_of[name]]
                    impl = layer.impl
                    sinks = getattr(impl, "sinks", None)
                    if isinstance(sinks, torch.Tensor) and id(sinks) in by_id:
                        saved_sinks.append((impl, sinks))
                        impl.sinks = by_id[id(sinks)]
                yield
            finally:
                for name, layer in self._layers.items():
                    layer.kv_cache = saved_kv[name]
                for impl, sinks in saved_sinks:
                    impl.sinks = sinks

    def layout(self, tokens: int, reqs: int) -> StepLayout:
        return StepLayout(tokens, reqs, self.max_blocks)

    def _trace_forward(self, key: tuple[int, int]):
        lay = self.layout(*key)
        n_state, n_kv = len(self.state), len(self.kv)

        def fn(*flat):
            state, kv, buf = list(flat[:n_state]), list(flat[n_state:n_state + n_kv]), flat[-1]
            with self._bound(state, kv):
                return list(self.runner.tpu_forward(lay, buf))

        buf = torch.from_numpy(dummy_buffer(lay)).to(self.runner.device)
        name = f"forward (tokens={key[0]}, requests={key[1]})"
        inputs = self.state + self.kv + [buf]
        cached = self.traces.load(name, inputs)
        if cached is not None:
            compiled, (shape, dtype) = cached
            return compiled, buf, torch.empty(shape, dtype=dtype, device="meta")
        compiled, outs = trace_program(name, fn, inputs)
        logits = outs[1]
        self.traces.store(name, inputs, compiled, (tuple(logits.shape), logits.dtype))
        return compiled, buf, logits

    def _trace_sampler(self, reqs: int, logits_like: torch.Tensor):
        from .sampling import PARAM_WORDS

        params = torch.zeros(PARAM_WORDS * reqs, dtype=torch.int32, device=self.runner.device)
        logits = torch.zeros(reqs, logits_like.shape[1], dtype=logits_like.dtype,
                             device=self.runner.device)
        name = f"sampler (requests={reqs})"
        cached = self.traces.load(name, [logits, params])
        if cached is not None:
            return cached[0], [logits, params]
        compiled, _ = trace_program(name, lambda lg, p: [sample(lg, p)], [logits, params])
        self.traces.store(name, [logits, params], compiled, None)
        return compiled, [logits, params]

    def build(self, keys: list[tuple[int, int]], threads: int | None = None) -> dict:
        """Traces every bucket's programs and compiles them all, on `threads` threads
        (TORCHTPU_COMPILE_THREADS's default: the machine's cores). Returns counts and seconds."""
        import torchtpu

        before = torchtpu.metrics()
        t0 = time.perf_counter()
        jobs = []
        logits_like = None
        for key in keys:
            compiled, buf, logits_like = self._trace_forward(key)
            self.forward[key] = compiled
            jobs.append((compiled, self.state + self.kv + [buf]))
        for reqs in sorted({r for _, r in keys}):
            compiled, example = self._trace_sampler(reqs, logits_like)
            self.sampler[reqs] = compiled
            jobs.append((compiled, example))
        traced = time.perf_counter() - t0
        threads = threads or max(1, os.cpu_count() or 1)
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tpu-precompile") as ex:
            list(ex.map(lambda job: prepare(*job), jobs))
        # Each program runs once, the way a step runs it (upload, launch, tokens back), on
        # all-padding inputs that write no cache slot: the first request then pays no
        # first-execution setup.
        for key in keys:
            lay = self.layout(*key)
            greedy, logits, params, _ = self.run_forward(
                lay, numpy_upload(dummy_buffer(lay), self.runner.device))
            greedy.cpu()
            self.run_sampler(lay.reqs, logits, params).cpu()
        after = torchtpu.metrics()
        return {
            "programs": len(jobs),
            "trace_seconds": round(traced, 2),
            "compile_seconds": round(time.perf_counter() - t0 - traced, 2),
            "compiled": after["programs_compiled"] - before["programs_compiled"],
            "loaded_from_disk": after["disk_cache_hits"] - before["disk_cache_hits"],
        }

    # -- running ------------------------------------------------------------------------------

    def run_forward(self, lay: StepLayout, buf: torch.Tensor) -> list[torch.Tensor]:
        key = (lay.tokens, lay.reqs)
        compiled = self.forward.get(key)
        if compiled is None:
            self._after_warmup_compile(f"the forward program for tokens={key[0]}, "
                                       f"requests={key[1]} (not a configured bucket)")
            compiled, _, _ = self._trace_forward(key)
            self.forward[key] = compiled
        return compiled(self.state + self.kv + [buf])

    def run_sampler(self, reqs: int, logits: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        compiled = self.sampler.get(reqs)
        if compiled is None:
            self._after_warmup_compile(f"the sampler program for requests={reqs}")
            compiled, _ = self._trace_sampler(reqs, logits)
            self.sampler[reqs] = compiled
        return compiled([logits, params])[0]

    # -- compiles after warm-up ---------------------------------------------------------------

    def finish_warmup(self) -> None:
        import torchtpu

        self.warm = True
        self._metrics_after_warmup = torchtpu.metrics()
        self._recompiles_seen = len(torchtpu.recompile_reasons())

    def _after_warmup_compile(self, what: str) -> None:
        if not self.warm:
            return
        msg = f"torchtpu_vllm: compiling {what} after warm-up: traffic waits for an XLA compile"
        if os.environ.get(STRICT_ENV, "0") not in ("", "0"):
            raise RuntimeError(msg + f" ({STRICT_ENV}=1)")
        logger.warning(msg)

    def check_step(self) -> None:
        """After a step: any program that missed the caches since warm-up is named (warning, or
        an error under TORCHTPU_VLLM_STRICT_COMPILES=1)."""
        if not self.warm:
            return
        import torchtpu

        m = torchtpu._C._metrics()
        misses = m["cache_misses"] - self._metrics_after_warmup["cache_misses"]
        if misses <= 0:
            return
        reasons = torchtpu.recompile_reasons()[self._recompiles_seen:]
        self._recompiles_seen += len(reasons)
        self._metrics_after_warmup["cache_misses"] = m["cache_misses"]
        named = "; ".join(f"{op}: {why}" for op, why in reasons) or (
            "new eager op signatures (TORCHTPU_LOG_COMPILES=1 names them)")
        self._after_warmup_compile(f"{misses} program(s) during traffic: {named}")


def numpy_upload(buf: np.ndarray, device: torch.device) -> torch.Tensor:
    """The step's one host->device transfer."""
    return torch.from_numpy(buf).to(device)
