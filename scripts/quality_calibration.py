"""The built-in quality suites (niah, keys, exact) against real models on llama-server: accuracy
per suite, task and length, and the seconds each item took next to the time abtui's sizing
expected from its probe (docs/methods.md §4 has the tables this printed).

    python scripts/quality_calibration.py [--models smollm2,gemma3-270m] [--lengths 1024,2048,4096]
        [--per-cell 4] [--threads 1] [--api auto] [--show 5]
    python scripts/quality_calibration.py --kv-ab q4_0 [--models smollm2]

Each model (a name that ``abtui engine fetch`` knows, or a GGUF path) is served by llama-server
with one slot whose context is the model's own (SmolLM2 8k, Gemma 3 32k), probed and timed
(``quality.api = auto``: SmolLM2 has a chat template, Gemma 3 270M is a base model), then sent
every item once, greedy, one at a time. Needs llama-server (``abtui engine build``).

``--kv-ab TYPE`` instead runs ``abtui run`` as a user would: two servers of the first model
(K/V f16 against TYPE, flash attention on, one thread each), 20 requests per arm, then
``--quality niah,keys,exact`` at the defaults (probe, budget, timeouts), and prints abtui's own
summary.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from abtui.engine.fetch import CATALOGUE, fetch, gguf_info
from abtui.engine.quality_calibration import calibrate, table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--models",
        default="smollm2,gemma3-270m",
        help="names for `abtui engine fetch`, or GGUF paths (comma-separated)",
    )
    ap.add_argument(
        "--lengths",
        default="1024,2048,4096",
        help="retrieval lengths in the endpoint's tokens (those that fit are run)",
    )
    ap.add_argument("--suites", default="niah,keys,exact")
    ap.add_argument("--per-cell", type=int, default=4, help="haystacks per length (4)")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads (1)")
    ap.add_argument("--api", choices=("auto", "chat", "completions"), default="auto")
    ap.add_argument("--ctx", type=int, help="context per slot (default: the model's own)")
    ap.add_argument("--show", type=int, default=5, help="wrong answers shown per model (5)")
    ap.add_argument("--kv-ab", metavar="TYPE", help="run abtui run, K/V f16 vs TYPE (q4_0, q8_0)")
    a = ap.parse_args(argv)
    if a.kv_ab:
        return kv_ab(a.models.split(",")[0], a.kv_ab, a.threads)
    cals = []
    for spec in a.models.split(","):
        path = fetch(spec) if spec in CATALOGUE else Path(spec)
        ctx = a.ctx or gguf_info(path).context_length or 8192
        cal = calibrate(
            path,
            name=spec if spec in CATALOGUE else path.stem,
            lengths=[int(x) for x in a.lengths.split(",")],
            suites=a.suites.split(","),
            per_cell=a.per_cell,
            ctx=ctx,
            threads=a.threads,
            api=a.api,
            log=lambda s: print(s, file=sys.stderr, flush=True),
        )
        cals.append(cal)
        print(
            f"{cal.model}: items took {cal.wall_s:.0f} s after a {cal.probe_s:.0f} s probe "
            f"(load average {' '.join(f'{x:.1f}' for x in os.getloadavg())})",
            file=sys.stderr,
        )
        for item_id, ref, out in cal.wrong[: a.show]:
            print(f"  wrong {item_id}: expected {ref}, got {out[:80]!r}", file=sys.stderr)
    print(table(cals))
    return 0


def kv_ab(model: str, kv: str, threads: int) -> int:
    from abtui.cli import main as abtui_main
    from abtui.engine.server import LlamaCppServer

    path = fetch(model) if model in CATALOGUE else Path(model)
    ctx = gguf_info(path).context_length or 8192
    folder = Path(tempfile.mkdtemp(prefix="abtui-kv-"))
    with (
        LlamaCppServer(
            path,
            name="m",
            ctx=ctx,
            threads=threads,
            flash_attn="on",
            extra_args=("-ctk", "f16", "-ctv", "f16"),
        ) as base,
        LlamaCppServer(
            path,
            name="m",
            ctx=ctx,
            threads=threads,
            flash_attn="on",
            extra_args=("-ctk", kv, "-ctv", kv),
        ) as cand,
    ):
        arms = {"f16": base.url, kv: cand.url}
        spec = folder / "kv.toml"
        spec.write_text(
            'name = "kv"\n'
            + "".join(f'[[arms]]\nname = "{n}"\nurl = "{u}"\n' for n, u in arms.items())
            + "[workload]\nrequests = 20\ninput_tokens = 64\n"
            f'output_tokens = 16\n[load]\nconcurrency = 1\n[store]\ndir = "{folder}"\n'
            '[quality]\nsuites = ["niah", "keys", "exact"]\n'
        )
        t0 = time.perf_counter()
        rc = abtui_main(["run", str(spec), "--headless"])
        print(
            f"abtui run: exit code {rc} after {time.perf_counter() - t0:.0f} s; session in "
            f"{folder}",
            file=sys.stderr,
        )
    return 0 if rc in (0, 3, 4) else 1


if __name__ == "__main__":
    sys.exit(main())
