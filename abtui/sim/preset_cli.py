"""The ``--preset`` options of ``abtui sim serve``: which engine a simulated endpoint runs.

Without ``--preset`` the endpoint runs the scripted fixed-delay engine (``--ttft-ms``,
``--itl-ms``); with it, the batching engine (:mod:`abtui.sim.batching`) modelling that GPU,
model and variant (grammar in :mod:`abtui.sim.presets`). ``SimConfig.preset`` holds a
:class:`PresetOptions`, or None.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from abtui.errors import UsageError
from abtui.sim.batching import KV_POLICIES, BatchEngine, EngineOptions
from abtui.sim.presets import GRAMMAR, Preset, parse_preset

_E = EngineOptions()


@dataclass(slots=True)
class PresetOptions:
    """The batching engine's settings (flags of the same names)."""

    preset: str  # e.g. "h100:llama-3-8b:fp8"
    model_config: str | None = None  # a Hugging Face config.json giving the model's shape
    time_scale: float = 1.0  # 20 = run 20x faster than the modelled GPU
    max_num_seqs: int = _E.max_num_seqs
    max_batched_tokens: int = _E.max_batched_tokens
    gpu_mem_util: float = _E.gpu_mem_util
    kv_policy: str = _E.kv_policy  # "reserve" (prompt + max_tokens at admission) or "grow"
    prefix_caching: bool = _E.prefix_caching  # vLLM's automatic prefix caching (on by default)

    def parsed(self) -> Preset:
        return parse_preset(self.preset, self.model_config)

    def engine_options(self, seed: int = 0) -> EngineOptions:
        return EngineOptions(
            max_num_seqs=self.max_num_seqs,
            max_batched_tokens=self.max_batched_tokens,
            gpu_mem_util=self.gpu_mem_util,
            time_scale=self.time_scale,
            seed=seed,
            kv_policy=self.kv_policy,
            prefix_caching=self.prefix_caching,
        )

    def validate(self) -> None:
        """Raise ``UsageError`` naming the flag (also when the model does not fit)."""
        for flag, value in (
            ("--time-scale", self.time_scale),
            ("--gpu-mem-util", self.gpu_mem_util),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise UsageError(f"{flag} {value!r} is invalid", f"give {flag} a number")
        self.build()

    def build(self, seed: int = 0) -> BatchEngine:
        return BatchEngine(self.parsed(), self.engine_options(seed))

    def to_argv(self) -> list[str]:
        argv = [
            "--preset",
            self.preset,
            "--time-scale",
            repr(float(self.time_scale)),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--max-batched-tokens",
            str(self.max_batched_tokens),
            "--gpu-mem-util",
            repr(float(self.gpu_mem_util)),
            "--kv-policy",
            self.kv_policy,
        ]
        if self.model_config:
            argv += ["--model-config", self.model_config]
        if not self.prefix_caching:
            argv.append("--no-prefix-caching")
        return argv


def add_preset_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "batching engine (--preset)",
        "model continuous batching on a GPU instead of fixed delays; the grammar is " + GRAMMAR,
    )
    g.add_argument(
        "--preset",
        metavar="PRESET",
        default=None,
        help="e.g. h100:llama-3-8b:fp8, h200:llama-3-70b:bf16:tp=4, "
        "h100:llama-3-8b:bf16:spec=k4a0.7 (default: none, the fixed-delay engine)",
    )
    g.add_argument(
        "--model-config",
        metavar="FILE",
        default=None,
        help="a Hugging Face config.json giving the model's shape",
    )
    g.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="run this many times faster than the modelled GPU (default 1)",
    )
    g.add_argument(
        "--max-num-seqs",
        type=int,
        default=_E.max_num_seqs,
        metavar="N",
        help="requests in the running batch at most (default %(default)s)",
    )
    g.add_argument(
        "--max-batched-tokens",
        type=int,
        default=_E.max_batched_tokens,
        metavar="N",
        help="tokens per step at most (default %(default)s)",
    )
    g.add_argument(
        "--gpu-mem-util",
        type=float,
        default=_E.gpu_mem_util,
        metavar="FRACTION",
        help="fraction of GPU memory used (default %(default)s)",
    )
    g.add_argument(
        "--kv-policy",
        choices=KV_POLICIES,
        default=_E.kv_policy,
        help="reserve: a request's prompt + max_tokens of KV at admission, never "
        "preempted; grow: KV grows per token, the newest request is preempted and "
        "recomputed when it runs out, as vLLM does (default %(default)s)",
    )
    g.add_argument(
        "--prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=_E.prefix_caching,
        help="reuse the KV of prompt blocks cached from earlier requests (LRU over 16-token "
        "blocks in the KV cache's free space), as vLLM's automatic prefix caching; responses "
        "say usage.prompt_tokens_details.cached_tokens (default: on, as vLLM)",
    )


def preset_from_args(args: argparse.Namespace) -> PresetOptions | None:
    """The :class:`PresetOptions` of parsed flags, or None without ``--preset``."""
    if args.preset is None:
        if args.model_config is not None:
            raise UsageError("--model-config needs --preset", "give e.g. --preset h100:custom:bf16")
        return None
    return PresetOptions(
        preset=args.preset,
        model_config=args.model_config,
        time_scale=args.time_scale,
        max_num_seqs=args.max_num_seqs,
        max_batched_tokens=args.max_batched_tokens,
        gpu_mem_util=args.gpu_mem_util,
        kv_policy=args.kv_policy,
        prefix_caching=getattr(args, "prefix_caching", _E.prefix_caching),
    )
