"""Command-line options of the sim, shared by ``python -m abtui.sim`` and ``abtui sim serve``."""

from __future__ import annotations

import argparse

from abtui.sim.engine import SimConfig
from abtui.sim.faults import add_fault_arguments, faults_from_args
from abtui.sim.preset_cli import add_preset_arguments, preset_from_args
from abtui.sim.profiler import parse_profiler_config

_D = SimConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the sim's options (defaults from :class:`SimConfig`) to ``parser``."""
    g = parser.add_argument_group("simulated endpoint")
    g.add_argument("--host", default=_D.host, help="address to listen on (default %(default)s)")
    g.add_argument(
        "--port",
        type=int,
        default=_D.port,
        metavar="PORT",
        help="TCP port, 0 = any free one (default %(default)s)",
    )
    g.add_argument("--model", default=_D.model, help="served model name (default %(default)s)")
    g.add_argument(
        "--ttft-ms",
        type=float,
        default=_D.ttft_ms,
        metavar="MS",
        help="time to first token chunk, ms (default %(default)s)",
    )
    g.add_argument(
        "--itl-ms",
        type=float,
        default=_D.itl_ms,
        metavar="MS",
        help="time between token chunks, ms (default %(default)s)",
    )
    g.add_argument(
        "--jitter-ms",
        type=float,
        default=_D.jitter_ms,
        metavar="MS",
        help="uniform ±jitter on each delay, ms, seeded (default %(default)s)",
    )
    g.add_argument(
        "--tokens-per-chunk",
        type=int,
        default=_D.tokens_per_chunk,
        metavar="N",
        help="tokens per streamed chunk; >1 emulates speculative decoding (default %(default)s)",
    )
    g.add_argument(
        "--reasoning-tokens",
        type=int,
        default=_D.reasoning_tokens,
        metavar="N",
        help="a reasoning model: each chat stream's first N tokens are reasoning_content "
        "deltas, then the answer (default %(default)s)",
    )
    g.add_argument(
        "--vision-us-per-token",
        type=float,
        default=_D.vision_us_per_token,
        metavar="US",
        help="fixed-delay engine: the first chunk waits this long per vision token of the "
        "prompt's images (Qwen2-VL's count: a 512x512 image is 324) (default %(default)s)",
    )
    g.add_argument(
        "--default-max-tokens",
        type=int,
        default=_D.default_max_tokens,
        metavar="N",
        help="tokens generated when a request gives no max_tokens (default %(default)s)",
    )
    g.add_argument(
        "--seed",
        type=int,
        default=_D.seed,
        help="seed of the generated text and jitter (default %(default)s)",
    )
    g.add_argument(
        "--chunk-log",
        metavar="PATH",
        default=None,
        help="write a JSONL log of every chunk's send time to PATH",
    )
    g.add_argument(
        "--no-usage",
        dest="usage",
        action="store_false",
        help="ignore stream_options.include_usage (no usage chunk in streams)",
    )
    g.add_argument(
        "--logprobs",
        choices=("on", "off"),
        default="on" if _D.logprobs else "off",
        help="logprobs and echo on non-streamed completions (simulated); off: none, like "
        "llama.cpp's server (default %(default)s)",
    )
    g.add_argument(
        "--profiler-config",
        metavar="JSON",
        default=None,
        help='as vLLM\'s: \'{"profiler": "torch", "torch_profiler_dir": "/abs/dir"}\' serves '
        "POST /start_profile and /stop_profile, which write a torch profiler trace of the "
        "batching engine's steps to that folder (needs --preset)",
    )
    add_fault_arguments(parser)
    add_preset_arguments(parser)


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """The validated :class:`SimConfig` of parsed options; raises ``UsageError``."""
    config = SimConfig(
        host=args.host,
        port=args.port,
        model=args.model,
        ttft_ms=args.ttft_ms,
        itl_ms=args.itl_ms,
        jitter_ms=args.jitter_ms,
        tokens_per_chunk=args.tokens_per_chunk,
        seed=args.seed,
        chunk_log=args.chunk_log,
        usage=args.usage,
        default_max_tokens=args.default_max_tokens,
        faults=faults_from_args(args),
        preset=preset_from_args(args),
        logprobs=getattr(args, "logprobs", "on") == "on",
        profiler=_profiler(getattr(args, "profiler_config", None)),
        reasoning_tokens=getattr(args, "reasoning_tokens", 0),
        vision_us_per_token=getattr(args, "vision_us_per_token", _D.vision_us_per_token),
    )
    config.validate()
    return config


def config_to_argv(config: SimConfig) -> list[str]:
    """The options that reproduce ``config`` (used to start the sim as a child process)."""
    argv = [
        "--host",
        config.host,
        "--port",
        str(config.port),
        "--model",
        config.model,
        "--ttft-ms",
        repr(float(config.ttft_ms)),
        "--itl-ms",
        repr(float(config.itl_ms)),
        "--jitter-ms",
        repr(float(config.jitter_ms)),
        "--tokens-per-chunk",
        str(config.tokens_per_chunk),
        "--default-max-tokens",
        str(config.default_max_tokens),
        "--seed",
        str(config.seed),
    ]
    if config.chunk_log:
        argv += ["--chunk-log", config.chunk_log]
    if not config.usage:
        argv.append("--no-usage")
    if not config.logprobs:
        argv += ["--logprobs", "off"]
    if config.reasoning_tokens:
        argv += ["--reasoning-tokens", str(config.reasoning_tokens)]
    if config.vision_us_per_token != _D.vision_us_per_token:
        argv += ["--vision-us-per-token", repr(float(config.vision_us_per_token))]
    if config.preset is not None:
        argv += config.preset.to_argv()
    if config.profiler is not None:
        argv += ["--profiler-config", config.profiler.to_json()]
    return argv + config.faults.to_argv()


def _profiler(text: str | None):
    return None if text is None else parse_profiler_config(text)
