"""abtui against a real engine: llama.cpp's llama-server, FP32 vs Q4_0 and FP32 vs Q8_0; and with
``--experiments``, the four optimisation A/Bs of docs/engine.md.

    python scripts/engine_ab.py [--requests 24] [--output-tokens 32] [--repeat 3] [--model-seed 0]
    python scripts/engine_ab.py --experiments [batching,kv-quant,spec-decode,weights]
    python scripts/engine_ab.py --experiments knobs [--quality-per-cell N] [--quality-max-length T]

Needs llama-server (``abtui engine build``) and the engine extra (``pip install -e '.[engine]'``).
``--experiments`` runs each A/B of :mod:`abtui.engine.experiments` through ``abtui run`` and
prints one Markdown table (verdicts, Δ with 95% CIs, the servers' own queue and acceptance
counters, abtui's TTFT next to the server's prompt time); for the A/Bs with ``llama-perplexity``
one row per candidate (PPL, KL divergence, right answers per quality suite and length, the
verdict); then each pair's reasons.
Without it: builds the tiny seeded GGUF models,
serves each with one llama.cpp thread (FP32 pinned to the first core, the candidate to the
second, where there are two), runs two ``abtui run`` sessions per repeat, checks them against
the server's own token counts and timing (``abtui.engine.ab``), and prints per arm the medians of
abtui's figures next to the server's own, the output agreement with FP32, the logprob agreement
with FP32 (top-1 and the KL lower bound, 95% CIs over the prompts), then the logprob check and
one summary line. Exit code 1 when any check failed — among them, Q4_0 not further from FP32 than
Q8_0 on both logprob figures beyond their CIs.

The client (main process + one load-generator process per arm) is not pinned: on a 2-core
machine it shares the cores with the servers, which is part of every figure printed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

from abtui.engine.ab import CANDIDATES, ABConfig, EngineAB, logprob_problems, run_engine_ab
from abtui.hardware.host import cpu_model


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--requests", type=int, default=24, help="measured requests per arm (24)")
    ap.add_argument("--input-tokens", type=int, default=32, help="prompt words (32)")
    ap.add_argument("--output-tokens", type=int, default=32, help="max_tokens (32)")
    ap.add_argument("--repeat", type=int, default=3, help="whole runs; figures are medians (3)")
    ap.add_argument("--model-seed", type=int, default=0, help="seed of the random weights (0)")
    ap.add_argument(
        "--no-logprobs",
        action="store_true",
        help="do not ask for logprobs (chunks may then carry several tokens)",
    )
    ap.add_argument("--no-pin", action="store_true", help="do not pin the servers to cores")
    ap.add_argument("--http", choices=("fast", "httpx"), default="fast")
    ap.add_argument("--dir", type=Path, help="work folder (default: a temporary one)")
    ap.add_argument(
        "--experiments",
        nargs="?",
        const="ngram-repeat,ngram-story,parallel,kv-q4",
        metavar="KEYS",
        help="run the optimisation A/Bs instead (default: the "
        "real-model ones; the tiny-model ones are batching, kv-quant, spec-decode, "
        "np-x-draft, weights)",
    )
    ap.add_argument(
        "--requests-per-arm",
        type=int,
        metavar="N",
        help="--experiments: measured requests per arm (default: each A/B's own)",
    )
    ap.add_argument(
        "--quality-per-cell",
        type=int,
        metavar="N",
        help="--experiments: haystacks per length of the quality suites (default: each A/B's own)",
    )
    ap.add_argument(
        "--quality-max-length",
        type=int,
        metavar="TOKENS",
        help="--experiments: longest haystack (default: each A/B's own)",
    )
    a = ap.parse_args(argv)
    if a.experiments:
        over = {
            k: v
            for k, v in (
                ("quality_per_cell", a.quality_per_cell),
                ("quality_max_length", a.quality_max_length),
            )
            if v
        }
        return experiments(a.experiments.split(","), a.dir, a.requests_per_arm, over)
    cfg = ABConfig(
        requests=a.requests,
        input_tokens=a.input_tokens,
        output_tokens=a.output_tokens,
        model_seed=a.model_seed,
        per_token_chunks=not a.no_logprobs,
        pin=not a.no_pin,
        http=a.http,
    )
    load_before = _load()
    results: list[EngineAB] = []
    with tempfile.TemporaryDirectory(prefix="abtui-engine-") as tmp:
        base = a.dir or Path(tmp)
        for r in range(a.repeat):
            print(f"engine_ab: run {r + 1}/{a.repeat}", file=sys.stderr)
            results.append(run_engine_ab(base / f"run{r}", cfg, log=sys.stderr))
    v = results[0].versions
    print()
    print(f"machine   {cpu_model()}, {v['cpus']} CPUs, {platform.system()} {platform.release()}")
    print(
        f"versions  abtui {v['abtui']}, llama-server {v['llama_server']}, "
        f"gguf {v['gguf']}, Python {v['python']}, httpx {v['httpx']}"
    )
    print(f"load avg  before {load_before}, after {_load()} (1/5/15 min)")
    print(
        f"workload  {cfg.requests} requests/arm, {cfg.input_tokens}-word prompts, "
        f"max_tokens {cfg.output_tokens}, closed loop concurrency {cfg.concurrency}, "
        f"warm-up {cfg.warmup}, logprobs {'0' if cfg.per_token_chunks else 'off'}, "
        f"{cfg.threads} llama.cpp thread/server, pinned {cfg.pin}, {a.repeat} repeats (medians)"
    )
    print()
    hdr = (
        f"{'session':<8} {'arm':<5} {'ok/sent':>8} {'TTFT':>6} {'TPOT':>6} {'ITL':>6} {'E2E':>6}"
        f" | {'srv prompt':>10} {'srv ms/tok':>10} {'srv p+d':>8} | {'tok/req':>7} {'empty/req':>9}"
    )
    print("abtui medians (ms) | the server's own (ms, its log) | tokens")
    print(hdr)
    print("-" * len(hdr))
    n_arms = len(results[0].figures)
    for i in range(n_arms):
        fs = [res.figures[i] for res in results]

        def med(attr: str, fs=fs) -> float:
            return float(np.median([getattr(f, attr) for f in fs]))

        f0 = fs[0]
        ok, sent = sum(f.n_ok for f in fs), sum(f.n_sent for f in fs)
        print(
            f"{f0.session:<8} {f0.arm:<5} {f'{ok}/{sent}':>8} {med('ttft_ms'):6.2f} "
            f"{med('tpot_ms'):6.3f} {med('itl_ms'):6.3f} {med('e2e_ms'):6.2f} | "
            f"{med('server_prompt_ms'):10.2f} {med('server_decode_ms_per_token'):10.3f} "
            f"{med('server_gen_ms'):8.2f} | {med('tokens_per_request'):7.2f} "
            f"{med('empty_chunks_per_request'):9.2f}"
        )
    print()
    print("output agreement with FP32 (stored texts, greedy, same prompts):")
    for cand in results[0].agreement:
        ex = [res.agreement[cand]["exact"] for res in results]
        pre = [res.agreement[cand]["prefix_chars"] for res in results]
        ln = results[0].agreement[cand]["fp32_chars"]
        print(
            f"  {cand}: identical {np.median(ex):.0%} of items, common prefix "
            f"{np.median(pre):.1f} of {ln:.1f} chars (medians over repeats)"
        )
    print()
    print("logprob agreement with FP32 (non-streamed, greedy, top-5; positions up to the first")
    print("differing token; 95% CIs from the bootstrap over prompts; run 1 of the repeats):")
    for cand in CANDIDATES:
        c = results[0].logprobs.get(cand, {})
        if "error" in c or not c:
            print(f"  {cand}: {c.get('error', 'not measured')}")
            continue
        same = all(r.logprobs.get(cand) == c for r in results)
        print(
            f"  {cand}: top-1 {c['top1_agreement']:.1%} [{c['top1_lo']:.1%}, {c['top1_hi']:.1%}], "
            f"KL ≥ {c['kl_lower_bound']:.5f} [{c['kl_lo']:.5f}, {c['kl_hi']:.5f}] nats over "
            f"{c['positions']} positions of {c['prompts']} prompts"
            + (
                ""
                if len(results) == 1
                else "; the same in every repeat"
                if same
                else "; differs between repeats"
            )
        )
    lp_problems = [p for r in results for p in logprob_problems(r.logprobs)]
    if lp_problems:
        print(f"logprob check FAILED: {lp_problems[0]}")
    else:
        print(
            "logprob check OK: Q4_0 is further from FP32 than Q8_0 on top-1 agreement and KL, "
            "beyond both 95% CIs, in every repeat"
        )
    print()
    verdicts = {0: "GO", 3: "NO-GO", 4: "INCONCLUSIVE"}
    for cand in results[0].exit_codes:
        codes = [verdicts.get(r.exit_codes[cand], f"exit {r.exit_codes[cand]}") for r in results]
        print(f"  abtui's verdict, FP32 vs {cand}: {', '.join(codes)}")
    problems = [p for res in results for p in res.problems]
    if problems:
        print(f"\n{len(problems)} problems:")
        for p in problems[:20]:
            print("  " + p)
    print()
    ag = "; ".join(
        f"{c} identical {np.median([r.agreement[c]['exact'] for r in results]):.0%}, "
        f"prefix {np.median([r.agreement[c]['prefix_chars'] for r in results]):.1f} ch"
        for c in ("Q8_0", "Q4_0")
    )
    tpot = " ".join(
        f"{fs[0].session}/{fs[0].arm} {np.median([f.tpot_ms for f in fs]):.3f}"
        for fs in ([r.figures[i] for r in results] for i in range(n_arms))
    )
    ok = sum(f.n_ok for r in results for f in r.figures)
    sent = sum(f.n_sent for r in results for f in r.figures)
    status = (
        "OK: token counts = the server's, timing within the server's, Q4_0 further from FP32 "
        "than Q8_0 in logprobs"
        if not problems
        else f"{len(problems)} PROBLEMS (listed above)"
    )
    print(
        f"engine A/B {status}; {ok}/{sent} requests ok in {a.repeat} runs; vs FP32: {ag}; "
        f"TPOT ms {tpot}"
    )
    return 1 if problems else 0


def experiments(
    keys: list[str], folder: Path | None, requests: int | None = None, over: dict | None = None
) -> int:
    import dataclasses

    from abtui.engine.experiment_table import factorial_lines, quality_cell, table_rows
    from abtui.engine.experiments import EXPERIMENTS, is_real, models_for, run_experiment

    load_before = _load()
    rows, results = [], []
    with tempfile.TemporaryDirectory(prefix="abtui-engine-") as tmp:
        base = folder or Path(tmp)
        tiny = any(
            not is_real(st.model)
            for k in keys
            for st in (EXPERIMENTS[k].baseline, EXPERIMENTS[k].candidate)
        )
        models = models_for(base / "models") if tiny else None
        for k in keys:
            print(f"engine_ab: {k}", file=sys.stderr)
            exp = dataclasses.replace(EXPERIMENTS[k], **(over or {}))
            res = run_experiment(exp, base / k, models=models, log=sys.stderr, requests=requests)
            results.append(res)
            if not EXPERIMENTS[k].more:  # one pair: its latency row(s)
                rows += table_rows(res)
    print(
        f"machine   {cpu_model()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"
    )
    print(f"load avg  before {load_before}, after {_load()} (1/5/15 min)")
    print()
    if rows:
        cols = list(rows[0])
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for r in rows:
            print("| " + " | ".join(r[c] for c in cols) + " |")
        print()
    knobs = [r for r in results if r.ppls]
    if knobs:
        print(
            "| A/B | knob | PPL | PPL ratio ± 1 s.e. | mean KLD (nats) | same top token | "
            "quality: right answers baseline → candidate (Δ, gate; per length) | verdict |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for r in knobs:
            for arm, c in r.ppls.items():
                pair = r.pair_of(arm)
                print(
                    f"| {r.key} | {arm} | {c.base.ppl:.2f} → {c.cand.ppl:.2f} | "
                    f"×{c.ratio:.4f} ± {c.ratio_err:.4f} | {c.kld:.4f} | {c.same_top:.1%} | "
                    f"{quality_cell(pair.get('quality'))} | {pair['result']} |"
                )
        print()
    for res in results:
        exp = EXPERIMENTS[res.key]
        for pair in res.report["pairs"]:
            print(
                f"{res.key} ({exp.title}; {exp.schedule}: {exp.why}): {pair['candidate']}: "
                f"{pair['result']} in {res.wall_s:.0f} s"
            )
            for line in factorial_lines(res) if exp.factors else pair["reasons"]:
                print(f"  - {line}")
            if c := res.ppls.get(pair["candidate"]):
                print(f"  llama-perplexity: {c.line()}")
                print(f"    {' '.join(c.cand.argv)}")
                if warn := res.flat_ppl_warning(pair["candidate"]):
                    print(f"  WARNING: {warn}")
            if exp.factors:
                break
        if res.logprobs:
            c = res.logprobs
            print(
                f"  logprobs: top-1 {c['top1_agreement']:.1%} [{c['top1_lo']:.1%}, "
                f"{c['top1_hi']:.1%}], KL ≥ {c['kl_lower_bound']:.4f} nats"
            )
        for p in res.problems:
            print(f"  PROBLEM: {p}")
    return 1 if any(r.problems for r in results) else 0


if __name__ == "__main__":
    from abtui.errors import AbtuiError

    try:
        sys.exit(main())
    except AbtuiError as e:  # e.g. the engine extra is not installed
        print(f"engine_ab: {e}", file=sys.stderr)
        sys.exit(2)
