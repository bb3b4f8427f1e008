"""The batching engine's serving settings: :class:`EngineOptions` (vLLM's flags of the same
names, plus the simulator's time scale, efficiency factors and draft cost)."""

from __future__ import annotations

from dataclasses import dataclass

from abtui.errors import UsageError
from abtui.hardware import roofline

KV_POLICIES = ("reserve", "grow")


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """Serving settings of one replica (vLLM's flags of the same names)."""

    max_num_seqs: int = 256  # requests in the running batch at most
    max_batched_tokens: int = 8192  # query tokens per step at most (chunked-prefill budget)
    gpu_mem_util: float = 0.9  # fraction of GPU memory for weights + activations + KV
    time_scale: float = 1.0  # 20 = run 20x faster than the modelled GPU
    seed: int = 0  # seeds the speculative-decoding acceptance draws
    efficiency: roofline.Efficiency = roofline.Efficiency()  # noqa: RUF009 - frozen
    draft_fraction: float = 0.05  # draft model cost relative to the target's kernel time
    draft_pass_s: float = 50e-6  # fixed cost of one draft pass
    kv_policy: str = "reserve"  # "reserve": prompt + max_tokens at admission; "grow": vLLM's
    prefix_caching: bool = True  # reuse cached prompt blocks (abtui.sim.prefix_cache), as vLLM

    def validate(self) -> None:
        def bad(flag: str, value: object, what: str) -> UsageError:
            return UsageError(f"{flag} {value!r} is invalid: {what}", f"give {flag} {what}")

        for flag, value in (
            ("--max-num-seqs", self.max_num_seqs),
            ("--max-batched-tokens", self.max_batched_tokens),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad(flag, value, "an integer >= 1")
        if self.max_batched_tokens < self.max_num_seqs:
            raise bad(
                "--max-batched-tokens",
                self.max_batched_tokens,
                f"an integer >= --max-num-seqs ({self.max_num_seqs})",
            )
        if not 0.05 <= self.gpu_mem_util <= 1.0:
            raise bad("--gpu-mem-util", self.gpu_mem_util, "a fraction in 0.05..1")
        if not 0.001 <= self.time_scale <= 1e6:
            raise bad("--time-scale", self.time_scale, "a factor in 0.001..1e6")
        if self.kv_policy not in KV_POLICIES:
            raise bad("--kv-policy", self.kv_policy, "reserve or grow")
