"""The batching engine: a discrete-event model of iteration-level (continuous) batching.

One :class:`BatchEngine` models one serving replica (one GPU, or ``tp`` GPUs in tensor
parallel) of a :class:`~abtui.sim.presets.Preset`, vLLM-style:

- **Queue**: requests wait in FCFS order. One is admitted when a batch slot is free
  (``max_num_seqs``) and the KV cache has room. ``kv_policy="reserve"`` (the default): room for
  its prompt *and* all its ``max_tokens``, taken at admission, so nothing is ever preempted and
  ``kv_usage`` is the reserved fraction. ``kv_policy="grow"`` (vLLM's way): room for its prompt,
  the cache then grows with each token; when the next step's tokens would not fit, the most
  recently admitted request is preempted (its KV freed, back to the head of the queue, its
  prompt and generated tokens recomputed as a prefill when readmitted). A request that could
  never fit is refused (:meth:`check`).
- **Steps**: each step plans a batch under a token budget (``max_batched_tokens``): every
  decoding request first (1 token each, or ``k + 1`` with speculative decoding), then prefill
  chunks of the requests still prefilling in admission order, then newly admitted requests'
  first chunks. Requests arriving during a step are considered at the next one.
- **Time**: a step lasts :func:`abtui.hardware.roofline.step_cost` of its shape (weights
  streamed once, every sequence's KV read, matmul and attention FLOPs, TP all-reduces,
  overhead), divided by the time scale. A prompt's last chunk yields its first token at the
  step's end; each later step yields the decoding requests' next tokens.
- **Speculative decoding** (``spec_k`` = k, ``spec_alpha`` = α): each decoding request
  verifies k draft tokens per step and gets 1 + (accepted) tokens, the accepted run sampled per
  request per step from a seeded RNG (expected (1 − α^(k+1)) / (1 − α)); the step pays for
  k + 1 query tokens per request plus the draft passes, k × (``draft_fraction`` of the step's
  kernel time + ``draft_pass_s``).

The same step logic serves two drivers: :func:`abtui.sim.offline.simulate`
runs a list of requests offline at full speed (no HTTP), and the live server attaches the
engine to its event loop (:meth:`BatchEngine.attach`, :meth:`submit`, :meth:`cancel`), where a
timer per step pushes each running request's new tokens to its sink at the step's end (due
steps run back to back, see :meth:`_start_step`). Per-step work is O(batch) live
(every request gets tokens) and O(changes) offline without speculation (a heap of finishing
steps; the batch's total context is kept incrementally).
"""

from __future__ import annotations

import asyncio
import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from abtui.errors import UsageError
from abtui.hardware import roofline
from abtui.sim.engine_options import KV_POLICIES, EngineOptions
from abtui.sim.engine_stats import EngineStats, Histogram, RequestTiming
from abtui.sim.gpu_model import SimulatedGpu
from abtui.sim.prefix_cache import PrefixCache
from abtui.sim.presets import Preset
from abtui.sim.profiler import StepRecord, step_label

__all__ = ["KV_POLICIES", "BatchEngine", "EngineOptions", "EngineStats", "Histogram"]

Sink = Callable[[int, bool], None]  # (new tokens, last) at a step's end
_HISTOGRAMS = ("queue_s", "prefill_s", "decode_s", "inference_s", "e2e_s", "ttft_s", "tpot_s")
CATCH_UP = 64  # due steps run back to back in one loop callback at most


class _Seq:
    __slots__ = (
        "id",
        "prompt",
        "max_tokens",
        "arrival",
        "sink",
        "done_prompt",
        "generated",
        "target",
        "held",
        "state",
        "admit_no",
        "t_admit",
        "t_first",
        "chunks",
        "rng",
        "cancelled",
        "timing",
        "blocks",
        "cached",
        "acquired",
    )

    def __init__(self, sid: int, prompt: int, max_tokens: int, arrival: float) -> None:
        self.id, self.prompt, self.max_tokens, self.arrival = sid, prompt, max_tokens, arrival
        self.sink: Sink | None = None
        self.done_prompt = self.generated = self.chunks = 0
        self.target = prompt  # tokens to prefill: the prompt (after a preemption: + generated)
        self.held = 0  # KV-cache tokens this request holds (counted in the engine's _kv_used)
        self.state = "wait"  # "wait" | "prefill" | "decode" | "done"
        self.admit_no = 0
        self.t_admit = self.t_first = -1.0
        self.rng: random.Random | None = None
        self.cancelled = False
        self.timing: RequestTiming | None = None
        self.blocks: tuple[int, ...] | None = None  # chained hashes of its prompt's full blocks
        self.cached = -1  # prompt tokens found in the prefix cache at its first admission (-1:
        # not looked up: not admitted yet, or no block hashes given)
        self.acquired = 0  # leading blocks of ``blocks`` it holds in the prefix cache


class BatchEngine:
    """See the module docstring. Not thread-safe: drive it from one thread / event loop."""

    def __init__(self, preset: Preset, options: EngineOptions | None = None) -> None:
        o = options or EngineOptions()
        o.validate()
        self.preset, self.options = preset, o
        g, m, w, kv, tp = preset.gpu, preset.model, preset.weight_dtype, preset.kv_dtype, preset.tp
        self.kv_capacity = roofline.kv_capacity_tokens(
            g, m, w, kv, tp, o.gpu_mem_util, o.max_batched_tokens
        )
        if self.kv_capacity < 16:
            need = roofline.weight_bytes(m, w) / tp / 2**30
            raise UsageError(
                f"--preset {preset.name}: the weights ({need:.1f} GiB per GPU) leave no room "
                f"for a KV cache in {g.memory_bytes / 2**30:.0f} GiB x {o.gpu_mem_util:g}",
                "use a larger GPU, fp8/int4 weights, a higher tp=, or a larger --gpu-mem-util",
            )
        # step-time coefficients (per GPU), the same as roofline.step_cost's
        e = o.efficiency
        self._inv_bw = 1.0 / (g.mem_bw * e.bw)
        self._inv_fl = 1.0 / (g.flops_for(roofline.matmul_dtype(g, w)) * e.flops)
        self._w_bytes = roofline.streamed_weight_bytes(m, w) / tp
        self._kv_bytes = roofline.kv_bytes_per_token_per_gpu(m, kv, tp)
        self._fl_tok = 2 * m.linear_params() / tp
        self._fl_head = 2 * m.lm_head_params() / tp
        self._fl_pair = 4 * m.layers * m.q_dim / tp
        self._comm0 = roofline.allreduce_time(g, m, 0, tp)
        self._comm1 = roofline.allreduce_time(g, m, 1, tp) - self._comm0
        self._over0, self._over1 = e.step_overhead_s, e.per_seq_overhead_s
        self._scale = 1.0 / o.time_scale
        self._k, self._alpha = preset.spec_k, preset.spec_alpha
        self._grow = o.kv_policy == "grow"
        self.max_context = m.max_context
        fixed = roofline.weight_bytes(m, w) / tp + roofline.activation_reserve_bytes(
            m, tp, o.max_batched_tokens
        )
        self.gpu = SimulatedGpu(preset, o.time_scale, fixed)
        self._s = EngineStats()  # counters and histograms, kept up to date; gauges in stats()
        # state
        self.now = 0.0  # engine clock (s): loop.time() live, run time offline
        self._waiting: deque[_Seq] = deque()
        self._prefilling: list[_Seq] = []  # admitted, prompt not done, admission order
        self._decoding: dict[int, _Seq] = {}  # first token out, more to come
        self._kv_used = 0
        self._sum_ctx = 0  # total context (prompt + generated) of the decoding requests
        self._per_seq = True  # walk every decoding request each step (live, or speculation)
        self._g = 0  # decode steps run (offline heap path)
        self._heap: list[tuple[int, int, _Seq]] = []
        self._next_id = self._admitted = 0
        self._busy = False  # a step is in flight (live)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._plan: tuple[list[tuple[_Seq, int]], float] | None = None
        self._spec_rng = random.Random(o.seed)
        self.profiler = None  # a StepProfiler while /start_profile is on: told of each step
        # vLLM's automatic prefix caching over the prompts' blocks; None when switched off
        self.prefix_cache = PrefixCache() if o.prefix_caching else None

    # -- live driver ---------------------------------------------------------------------------

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve in real time on ``loop`` (engine clock = ``loop.time()``)."""
        self._loop = loop
        self.now = self.gpu.t0 = loop.time()

    def check(self, prompt_tokens: int, max_tokens: int) -> str | None:
        """Why a request can never be served (as vLLM's 400 says), or None."""
        total = max(1, prompt_tokens) + max_tokens
        if total > self.max_context:
            return (
                f"This model's maximum context length is {self.max_context} tokens. However, "
                f"you requested {total} tokens ({max(1, prompt_tokens)} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length."
            )
        if total > self.kv_capacity:
            return (
                f"the request needs {total} KV-cache tokens but the simulated cache holds "
                f"{self.kv_capacity}"
            )
        return None

    def submit(
        self,
        prompt_tokens: int,
        max_tokens: int,
        sink: Sink,
        arrival: float,
        blocks: tuple[int, ...] | None = None,
    ) -> _Seq:
        """Queue a request arriving at ``arrival`` (engine clock); ``sink`` gets its tokens;
        ``blocks``: its prompt's block hashes (:func:`abtui.sim.prefix_cache.block_hashes`),
        looked up in the prefix cache at admission (its ``cached`` tokens then say how many
        were found)."""
        seq = self._new_seq(prompt_tokens, max_tokens, arrival)
        seq.sink = sink
        if self.prefix_cache is not None:
            seq.blocks = blocks
        self._waiting.append(seq)
        if not self._busy and self._timer is None and self._loop is not None:
            self._timer = self._loop.call_soon(self._kick)
        return seq

    def cancel(self, seq: _Seq) -> None:
        """The client went away: drop the request wherever it is, free its KV (a no-op once
        its last tokens went to the sink)."""
        if seq.cancelled or seq.sink is None:  # already gone, or finished
            return
        seq.cancelled, seq.sink = True, None
        self._drop(seq)
        seq.state = "done"
        self._s.requests_cancelled_total += 1

    def _drop(self, seq: _Seq) -> None:
        """Take ``seq`` out of the queue or the batch and free its KV."""
        if seq.state == "wait":
            self._waiting.remove(seq)
        elif seq.state == "decode":
            del self._decoding[seq.id]
            self._sum_ctx -= seq.prompt + seq.generated
        elif seq.state == "prefill":
            self._prefilling.remove(seq)
        self._free(seq)

    def _free(self, seq: _Seq) -> None:
        """Free ``seq``'s KV: its reservation, and its hold on cached prefix blocks."""
        self._kv_used -= seq.held
        seq.held = 0
        if seq.acquired:
            self.prefix_cache.release(seq.blocks[: seq.acquired])  # type: ignore[union-attr,index]
            seq.acquired = 0

    def _kick(self) -> None:
        self._timer = None
        if self._busy:
            return
        assert self._loop is not None
        self.now = max(self.now, self._loop.time())
        self._start_step()

    def _start_step(self) -> None:
        """Plan steps from ``self.now``; run those already due (the loop fell behind, or the
        time scale makes steps shorter than a loop turn) at once, up to ``CATCH_UP`` in a row,
        so that their tokens reach each sink in one write; then arm the timer of the next."""
        loop = self._loop
        assert loop is not None
        for _ in range(CATCH_UP):
            d = self._plan_step()
            if d is None and self._waiting:  # only requests "from the future" wait: now
                self.now = max(self.now, loop.time(), self._waiting[0].arrival)
                d = self._plan_step()
            if d is None:
                self._busy = False
                return
            end = self.now + d
            if end > loop.time():
                break
            self.now = end
            self._end_step()
        else:
            self._busy = True
            self._timer = loop.call_soon(self._resume)  # let the loop breathe, then go on
            return
        self._busy = True
        self._step_end = end
        self._timer = loop.call_at(end, self._live_end)

    def _resume(self) -> None:
        self._timer = None
        self._start_step()

    def _live_end(self) -> None:
        self._timer = None
        self.now = self._step_end
        self._end_step()
        self._start_step()

    # -- the step ------------------------------------------------------------------------------

    def _new_seq(self, prompt: int, max_tokens: int, arrival: float) -> _Seq:
        self._next_id += 1
        seq = _Seq(self._next_id, max(1, prompt), max_tokens, arrival)
        if self._k:
            seq.rng = random.Random(self._spec_rng.getrandbits(64))
        return seq

    def _plan_step(self) -> float | None:
        """Choose the next step's batch at ``self.now``; return its duration, None if idle."""
        o = self.options
        k1 = self._k + 1
        if self._grow:  # the decodes' next tokens must fit: preempt the newest until they do
            while self._decoding and self._kv_used + len(self._decoding) * k1 > self.kv_capacity:
                self._preempt()
        n_dec = len(self._decoding)
        budget = o.max_batched_tokens - n_dec * k1
        tokens = n_dec * k1
        sampled = tokens
        kv_read = self._sum_ctx
        pairs = k1 * self._sum_ctx + n_dec * k1 * (k1 - 1) / 2
        chunks: list[tuple[_Seq, int]] = []
        for seq in self._prefilling:
            if budget <= 0:
                break
            n = min(seq.target - seq.done_prompt, budget)
            chunks.append((seq, n))
            budget -= n
        waiting = self._waiting
        running = n_dec + len(self._prefilling)
        growth = n_dec * k1 if self._grow else 0  # KV the decodes take this step
        while waiting and budget > 0 and running < o.max_num_seqs:
            seq = waiting[0]
            hold = seq.target + 1 if self._grow else seq.prompt + seq.max_tokens
            if self._kv_used + growth + hold > self.kv_capacity or seq.arrival > self.now:
                break  # FCFS: the head waits for room (or its arrival), nobody overtakes it
            waiting.popleft()
            self._kv_used += hold
            seq.held, seq.state = hold, "prefill"
            self._admitted += 1
            seq.admit_no = self._admitted
            if seq.t_admit < 0:
                seq.t_admit = self.now
            self._prefilling.append(seq)
            running += 1
            if seq.blocks is not None:  # (given only while the prefix cache is on)
                self._cached_prefix(seq)
            n = min(seq.target - seq.done_prompt, budget)
            chunks.append((seq, n))
            budget -= n
        if self.prefix_cache is not None:  # cached blocks nobody holds live in the free KV
            self.prefix_cache.fit(
                (self.kv_capacity - self._kv_used) // self.prefix_cache.block_size
            )
        if tokens == 0 and not chunks:
            return None
        for seq, n in chunks:
            c0 = seq.done_prompt
            tokens += n
            kv_read += c0
            pairs += n * c0 + n * (n + 1) / 2
            if c0 + n >= seq.target:
                sampled += 1
        kv_bytes = self._kv_bytes * (kv_read + tokens)
        nbytes = self._w_bytes + kv_bytes
        flops = self._fl_tok * tokens + self._fl_head * sampled + self._fl_pair * pairs
        t_mem, t_cmp = nbytes * self._inv_bw, flops * self._inv_fl
        kernels = t_mem if t_mem > t_cmp else t_cmp
        t = kernels + self._comm0 + self._comm1 * tokens + self._over0 + self._over1 * running
        if self._k and n_dec:
            t += self._k * (self.options.draft_fraction * kernels + self.options.draft_pass_s)
        self._plan = (chunks, t)
        if self.profiler is not None:
            comm = self._comm0 + self._comm1 * tokens
            parts = (kv_bytes, flops, pairs, t_mem > t_cmp, comm, running)
            self._profile_step(chunks, n_dec, k1, parts)
        d = t * self._scale
        self.gpu.plan(self.now, d, (nbytes, flops, t, kernels))  # times: simulated seconds
        return d

    def _cached_prefix(self, seq: _Seq) -> None:
        """An admitted request's prompt blocks found in the prefix cache: held, and their
        prefill skipped (counted as a query and hits at its first admission only)."""
        cache = self.prefix_cache
        first = seq.cached < 0
        n = cache.lookup(seq.blocks, seq.prompt, count=first)  # type: ignore[union-attr]
        cache.acquire(seq.blocks[:n])  # type: ignore[union-attr]
        seq.acquired = n
        seq.done_prompt = n * cache.block_size  # type: ignore[union-attr]
        if first:
            seq.cached = seq.done_prompt
            self._s.prompt_tokens_total += seq.cached  # every prompt token counts, as vLLM's

    def _profile_step(self, chunks, n_dec: int, k1: int, parts: tuple) -> None:
        """Tell the profiler of the step just planned, its time split as :meth:`_plan_step`
        adds it up: kernel time divided by the bound resource (bytes or FLOPs)."""
        kv_bytes, flops, pairs, memory_bound, comm, running = parts
        if memory_bound:
            gemm, attention = self._w_bytes * self._inv_bw, kv_bytes * self._inv_bw
        else:
            attention = self._fl_pair * pairs * self._inv_fl
            gemm = flops * self._inv_fl - attention
        draft = gaps = 0.0
        if self._k and n_dec:
            draft = self._k * self.options.draft_fraction * (gemm + attention)
            gaps = self._k * self.options.draft_pass_s
        cached = [(seq.done_prompt, n) for seq, n in chunks]
        label = step_label(cached, n_dec, k1, self._sum_ctx, self.profiler.config.detailed)
        self.profiler.record(
            StepRecord(
                self.now,
                label,
                gemm,
                attention,
                comm,
                draft,
                self._over1 * running,
                self._over0 + gaps,
            )
        )

    def _end_step(self) -> None:
        """Apply the planned step at its end (``self.now``): progress, tokens, finishes."""
        chunks, t_sim = self._plan  # type: ignore[misc]
        self._plan = None
        now = self.now
        self.gpu.step_done(t_sim)
        self._s.steps_total += 1
        # decodes (the requests that were decoding when the step was planned)
        if self._per_seq:
            finished = self._decode_each()
        elif self._decoding:
            finished = self._decode_together()
        else:
            finished = []
        for seq in finished:
            self._finish(seq, now)
        for seq, n in chunks:
            if not seq.cancelled:  # (the client may have gone away during the step)
                self._prefill_chunk(seq, n, now)

    def _decode_each(self) -> list[_Seq]:
        """The step's decodes one request at a time (speculative acceptance, KV growth or a
        sink to call); the requests that generated their last token."""
        s, k = self._s, self._k
        finished: list[_Seq] = []
        gen_total = 0
        for seq in list(self._decoding.values()):  # a sink may not change the batch,
            # but copy anyway: the list is O(batch) like the loop
            n = 1
            if k:
                rnd, alpha = seq.rng.random, self._alpha  # type: ignore[union-attr]
                while n <= k and rnd() < alpha:
                    n += 1
                s.spec_drafts_total += 1
                s.spec_draft_tokens_total += k
                s.spec_accepted_tokens_total += n - 1
            left = seq.max_tokens - seq.generated
            if n >= left:
                n = left
                finished.append(seq)
            seq.generated += n
            seq.chunks += 1
            gen_total += n
            if self._grow:
                seq.held += n
                self._kv_used += n
            sink = seq.sink
            if sink is not None:
                if n == left:
                    seq.sink = None  # finished: a cancel() from the sink is a no-op
                sink(n, n == left)
        self._sum_ctx += gen_total
        s.generation_tokens_total += gen_total
        return finished

    def _decode_together(self) -> list[_Seq]:
        """The step's decodes as one count (one token each): the requests whose last token it
        was come off the heap of finishing steps."""
        n_dec = len(self._decoding)
        self._g += 1
        self._sum_ctx += n_dec
        self._s.generation_tokens_total += n_dec
        finished: list[_Seq] = []
        heap = self._heap
        while heap and heap[0][0] <= self._g:
            seq = heapq.heappop(heap)[2]
            seq.generated = seq.max_tokens
            seq.chunks = seq.max_tokens
            finished.append(seq)
        return finished

    def _prefill_chunk(self, seq: _Seq, n: int, now: float) -> None:
        """``n`` more prompt tokens of ``seq`` done; its prompt's last makes its first token."""
        s = self._s
        seq.done_prompt += n
        if seq.t_first < 0:  # (a recomputed prefill is not counted again)
            s.prompt_tokens_total += n
        if seq.done_prompt < seq.target:
            return
        self._prefilling.remove(seq)
        if seq.blocks and seq.acquired < len(seq.blocks):  # its computed blocks are cached now
            self.prefix_cache.acquire(seq.blocks[seq.acquired :])  # type: ignore[union-attr]
            seq.acquired = len(seq.blocks)
        if seq.t_first < 0:
            seq.t_first = now
        seq.generated += 1
        seq.chunks += 1
        s.generation_tokens_total += 1
        last = seq.generated >= seq.max_tokens
        sink = seq.sink
        if sink is not None:
            if last:
                seq.sink = None
            sink(1, last)
        if last:
            seq.state = "done"
            self._free(seq)
            self._record(seq, now)
        else:
            seq.state = "decode"
            self._decoding[seq.id] = seq
            self._sum_ctx += seq.prompt + seq.generated
            if not self._per_seq:
                finish_g = self._g + seq.max_tokens - seq.generated
                heapq.heappush(self._heap, (finish_g, seq.id, seq))

    def _preempt(self) -> None:
        """Free the most recently admitted request's KV; it waits at the head of the queue
        and recomputes its prompt and generated tokens when readmitted (vLLM's recompute)."""
        victim = max((*self._decoding.values(), *self._prefilling), key=lambda q: q.admit_no)
        self._drop(victim)
        victim.state, victim.done_prompt = "wait", 0
        victim.target = victim.prompt + victim.generated
        self._waiting.appendleft(victim)
        self._s.preemptions_total += 1

    def _finish(self, seq: _Seq, now: float) -> None:
        """A decoding request generated its last token."""
        self._drop(seq)
        seq.state = "done"
        self._record(seq, now)

    def _record(self, seq: _Seq, now: float) -> None:
        seq.sink = None
        s = self._s
        s.requests_finished_total += 1
        decode = now - seq.t_first
        s.queue_s.observe(seq.t_admit - seq.arrival)
        s.prefill_s.observe(seq.t_first - seq.t_admit)
        s.decode_s.observe(decode)
        s.inference_s.observe(now - seq.t_admit)
        s.e2e_s.observe(now - seq.arrival)
        s.ttft_s.observe(seq.t_first - seq.arrival)
        if seq.generated > 1:
            s.tpot_s.observe(decode / (seq.generated - 1))
        t = seq.timing
        if t is not None:
            t.admitted, t.first_token, t.finished = seq.t_admit, seq.t_first, now
            t.tokens, t.chunks = seq.generated, seq.chunks

    def models_meta(self) -> dict:
        """What ``/v1/models`` says of this endpoint (``simulated`` is always true)."""
        p = self.preset
        return {
            "simulated": True,
            "preset": p.name,
            "gpu": p.gpu.label,
            "model": p.model.name,
            "weight_dtype": p.weight_dtype,
            "kv_dtype": p.kv_dtype,
            "tensor_parallel": p.tp,
            "spec_decode": {"k": p.spec_k, "alpha": p.spec_alpha} if p.spec_k else None,
            "kv_capacity_tokens": self.kv_capacity,
            "max_model_len": p.model.max_context,
            "time_scale": self.options.time_scale,
            "prefix_caching": self.prefix_cache is not None,
        }

    # -- stats ---------------------------------------------------------------------------------

    def stats(self, now: float | None = None) -> EngineStats:
        """A snapshot (see :class:`EngineStats`); ``now`` defaults to the engine clock. The GPU
        gauges are :class:`~abtui.sim.gpu_model.SimulatedGpu`'s, averaged over its window."""
        if now is None:
            now = self._loop.time() if self._loop is not None else self.now
        s = self._s
        busy = self._busy or (self._loop is None and bool(self._decoding or self._prefilling))
        cache = self.prefix_cache
        return replace(
            s,
            prefix_caching=cache is not None,
            prefix_cache_queries_total=cache.queries if cache is not None else 0,
            prefix_cache_hits_total=cache.hits if cache is not None else 0,
            running=len(self._decoding) + len(self._prefilling),
            waiting=len(self._waiting),
            kv_usage=self._kv_used / self.kv_capacity,
            kv_capacity_tokens=self.kv_capacity,
            **{h: getattr(s, h).copy() for h in _HISTOGRAMS},
            **self.gpu.gauges(busy, now, self._kv_bytes * self._kv_used),
        )
