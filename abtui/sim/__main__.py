"""``python -m abtui.sim``: run the simulated OpenAI-compatible endpoint until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import sys

from abtui.errors import AbtuiError
from abtui.sim.cli_args import add_arguments, config_from_args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m abtui.sim",
        description="Simulated OpenAI-compatible endpoint: fixed TTFT/ITL, or --preset for a "
        "continuous-batching model of a GPU.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        from abtui.sim.server import serve

        serve(config)
    except AbtuiError as exc:
        print(f"abtui sim: {exc.title}: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
