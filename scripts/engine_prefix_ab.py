"""Prefix caching off vs on for multi-turn conversations on a real engine, through ``abtui run``
(:mod:`abtui.engine.conversation_ab`); prints the tables of docs/engine.md, "Prefix caching on
conversations".

    python scripts/engine_prefix_ab.py llamacpp [--out DIR]
    python scripts/engine_prefix_ab.py llamacpp --candidate-args ""   # llama-server's defaults
    python scripts/engine_prefix_ab.py vllm [--out DIR]     # an interpreter with vLLM

llama.cpp: SmolLM2-135M-Instruct (``abtui engine fetch smollm2``), two llama-servers of one
thread each, ``--no-cache-prompt`` vs prompt caching with ``--slot-prompt-similarity 0``
(``--candidate-args`` replaces the candidate's flags). vLLM: the same model converted (``abtui
engine fetch smollm2 --hf``), ``--no-enable-prefix-caching`` vs ``--enable-prefix-caching``,
both with ``--enable-prompt-tokens-details`` so the responses say their cached tokens.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import shlex
import sys
import tempfile
from pathlib import Path

from abtui.engine.conversation_ab import (
    LLAMACPP,
    LLAMACPP_WORKLOAD,
    VLLM_WORKLOAD,
    llamacpp_servers,
    run_conversation_ab,
    summary_table,
    turn_table,
)


@contextlib.contextmanager
def vllm_servers(folder: Path, pin: bool):
    from abtui.engine.fetch import fetch
    from abtui.engine.hfconvert import convert
    from abtui.engine.vllm_ab import PREFIX_CACHING, servers_for, started

    srv = servers_for(PREFIX_CACHING, convert(fetch("smollm2")), folder, pin=pin)
    with started(srv) as s:
        yield [
            ("baseline", s[PREFIX_CACHING.baseline.name]),
            ("candidate", s[PREFIX_CACHING.candidate.name]),
        ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("engine", choices=("llamacpp", "vllm"))
    ap.add_argument("--out", type=Path, help="folder for the session, report and server logs")
    ap.add_argument("--conversations", type=int, help="how many (default: the CI test's)")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads per server")
    ap.add_argument("--candidate-args", help="llama.cpp: the candidate's flags instead")
    ap.add_argument("--pin", action="store_true", help="vLLM: each server on a core of its own")
    args = ap.parse_args(argv)
    folder = args.out or Path(tempfile.mkdtemp(prefix="abtui-prefix-ab-"))
    folder.mkdir(parents=True, exist_ok=True)
    workload = LLAMACPP_WORKLOAD if args.engine == "llamacpp" else VLLM_WORKLOAD
    if args.conversations:
        workload = dataclasses.replace(workload, conversations=args.conversations)
    if args.engine == "llamacpp":
        from abtui.engine.fetch import fetch

        arms = LLAMACPP
        if args.candidate_args is not None:
            cand = dataclasses.replace(arms[1], extra_args=tuple(shlex.split(args.candidate_args)))
            arms = (arms[0], cand)
        servers = llamacpp_servers(fetch("smollm2"), folder, arms, threads=args.threads)
    else:
        servers = vllm_servers(folder, args.pin)
    with servers as started:
        res = run_conversation_ab(started, workload, folder, name=f"{args.engine}-prefix")
        names = [s.name for _, s in started]
        flags = {s.name: " ".join(s.argv()[3:]) for _, s in started}
    print(f"{args.engine}: {workload}; {res.wall_s:.0f} s; session {res.session}")
    for name, argv in flags.items():
        print(f"  {name}: {argv}")
    for line in (*res.problems, "", *turn_table(res, names), "", *summary_table(res, names)):
        print(line)
    return 1 if res.problems else 0


if __name__ == "__main__":
    sys.exit(main())
