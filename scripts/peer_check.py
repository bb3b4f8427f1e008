"""Cross-check abtui's TTFT / TPOT / E2E with GuideLLM's and AIPerf's on one llama.cpp server.

    python scripts/peer_check.py --setup            # once: a venv per peer under /tmp/abtui-peers
    python scripts/peer_check.py [--requests 40]    # abtui, then GuideLLM, then AIPerf

Not run in CI (each peer is a large install, GuideLLM pulls in PyTorch). Needs abtui's engine
extra. Every tool drives the same llama.cpp server (FP32 tiny model, one llama.cpp thread,
pinned to the first core) at the same load: closed loop, one request in flight, the same
``max_tokens``, temperature 0, ``logprobs = 0`` (one chunk per token), 2 warm-up requests left
out. Each tool makes its own synthetic prompts of about the same length. abtui needs two arms, so
its candidate is a second FP32 server on the other core, started for abtui's run only; the table
shows abtui's baseline arm. For every tool the server's own timing of the same requests (its log)
is shown beside it. The peers' local tokenizer is the tiny vocabulary as a Hugging Face folder
(no hub download is possible). The reasons for the differences are in docs/peer-check.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from abtui.engine.server import LlamaCppServer, ServerTiming
from abtui.engine.tinymodel import build_models, write_hf_tokenizer

PEERS = {"guidellm": "guidellm==0.8.1", "aiperf": "aiperf==0.13.0"}
WARMUP = 2


def setup(root: Path) -> None:
    for name, req in PEERS.items():
        venv = root / name
        if not (venv / "bin" / name).exists():
            print(f"peer_check: creating {venv} with {req} (GuideLLM pulls in PyTorch: minutes)")
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", req], check=True)


def _row(tool: str, prompts, ttft, tpot, e2e, n_out, native: str, st: list[ServerTiming]) -> dict:
    return {
        "tool": tool,
        "n": len(ttft),
        "prompts": list(prompts),
        "ttft": np.asarray(ttft, float),
        "tpot": np.asarray(tpot, float),
        "e2e": np.asarray(e2e, float),
        "n_out": np.asarray(n_out, float),
        "native": native,
        "srv_prompt": np.array([s.prompt_ms for s in st]),
        "srv_step": np.array([s.ms_per_token for s in st]),
        "srv_tokens": np.array([s.eval_runs + 1 for s in st], float),
    }


def _tpot_server_count(r: dict) -> np.ndarray:
    """The tool's TPOT/ITL recomputed with the server's own token count for each request
    (concurrency 1: the tool's requests, in start order, are the server's log blocks in order)."""
    n = min(len(r["tpot"]), len(r["srv_tokens"]))
    return r["tpot"][:n] * (r["n_out"][:n] - 1) / (r["srv_tokens"][:n] - 1)


def run_abtui(work: Path, srv: LlamaCppServer, model: Path, n: int, isl: int, osl: int) -> dict:
    from abtui.cli import main as abtui_main
    from abtui.metrics.request import e2e_s, tpot_s, ttft_s
    from abtui.store.reader import SessionReader

    with LlamaCppServer(
        model, name="FP32b", cpus=(_cpus()[1],) if len(_cpus()) > 1 else None
    ) as other:
        spec = work / "abtui.toml"
        spec.write_text(
            f'name = "peer-abtui"\n'
            f'[[arms]]\nname = "A"\nurl = "{srv.url}"\nparams = {{ logprobs = 0 }}\n'
            f'[[arms]]\nname = "B"\nurl = "{other.url}"\nparams = {{ logprobs = 0 }}\n'
            f"[workload]\nrequests = {n}\ninput_tokens = {isl}\noutput_tokens = {osl}\n"
            f"[load]\nconcurrency = 1\nwarmup = {WARMUP}\n"
            f'[request]\ntemperature = 0.0\nseed = 0\n[store]\ndir = "{work}"\n'
        )
        before = len(srv.timings())
        with contextlib.redirect_stdout(sys.stderr):
            abtui_main(["run", str(spec), "--headless", "--overwrite"])
        st = srv.timings()[before + WARMUP :]
    with SessionReader(work / "peer-abtui.duckdb") as rd:
        everything = rd.request_table(include_warmup=True)
        prompt_of = {it.index: it.prompt for it in rd.items()}
        text_of = rd.texts(include_warmup=True)
    a = everything.select(everything.arm == 0)
    sent = [prompt_of[int(i)] for i in a.item[np.argsort(a.dispatched_ns, kind="stable")]]
    t = a.select(~a.warmup)
    o = np.argsort(t.dispatched_ns, kind="stable")  # the server's order
    prompts = [prompt_of[int(i)] for i in t.item[o]]
    row = _row(
        "abtui",
        prompts,
        ttft_s(t)[o] * 1e3,
        tpot_s(t)[o] * 1e3,
        e2e_s(t)[o] * 1e3,
        t.n_output[o],
        "TPOT = (E2E - TTFT)/(n-1), n = token chunks incl. text-less ones",
        st,
    )
    row["sent"] = sent  # warm-up prompts first: the peers send the same list in the same order
    row["outputs"] = [text_of[int(r)] or "" for r in t.req[o]]
    return row


def run_guidellm(work: Path, srv: LlamaCppServer, venv: Path, hf: Path, sent: list[str], osl: int):
    data = work / "prompts-guidellm.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": p, "output_tokens_count": osl}) + "\n" for p in sent)
    )
    spec = {
        "spec": {
            "backend": {
                "kind": "openai_http",
                "target": srv.url[: -len("/v1")],
                "model": srv.name,
                "request_format": "/v1/completions",
                "validate_backend": False,
                "extras": {"body": {"logprobs": 0, "temperature": 0.0, "seed": 0}},
            },
            "profile": {"kind": "concurrent", "streams": [1]},
            "data": [{"kind": "json_file", "path": str(data)}],
            "tokenizer": {"kind": "huggingface_auto", "model": str(hf)},
            "constraints": [{"kind": "max_requests", "count": len(sent)}],
            "outputs": [{"kind": "json", "path": str(work / "guidellm.json")}],
        }
    }
    (work / "guidellm-scenario.json").write_text(json.dumps(spec))
    before = len(srv.timings())
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [
        str(venv / "bin" / "guidellm"),
        "run",
        "-c",
        str(work / "guidellm-scenario.json"),
        "--disable-progress",
    ]
    subprocess.run(cmd, check=True, env=env, stdout=sys.stderr, stderr=sys.stderr)
    st = srv.timings()[before + WARMUP :]
    reqs = json.loads((work / "guidellm.json").read_text())["benchmarks"][0]["requests"]
    ok = sorted(reqs["successful"], key=lambda r: r["request_start_time"])[WARMUP:]
    return _row(
        "GuideLLM",
        [json.loads(r["request_args"])["body"]["prompt"] for r in ok],
        [r["time_to_first_token_ms"] for r in ok],
        [r["inter_token_latency_ms"] for r in ok],
        [
            1e3 * (r["info"]["timings"]["last_token_iteration"] - r["request_start_time"])
            for r in ok
        ],
        [r["output_tokens"] for r in ok],
        "ITL = (last - first)/(n-1); its TPOT = (last - start)/n",
        st,
    ) | {
        "own_tpot": np.array([r["time_per_output_token_ms"] for r in ok]),
        "outputs": [r["output"] or "" for r in ok],
    }


def run_aiperf(work: Path, srv: LlamaCppServer, venv: Path, hf: Path, sent: list[str], osl: int):
    out = work / "aiperf"
    data = work / "prompts-aiperf.jsonl"
    data.write_text("".join(json.dumps({"text": p, "output_length": osl}) + "\n" for p in sent))
    cmd = [
        str(venv / "bin" / "aiperf"),
        "profile",
        "--model",
        srv.name,
        "--url",
        srv.url[: -len("/v1")],
        "--endpoint-type",
        "completions",
        "--streaming",
        "--concurrency",
        "1",
        "--request-count",
        str(len(sent)),
        "--input-file",
        str(data),
        "--custom-dataset-type",
        "single_turn",
        "--dataset-sampling-strategy",
        "sequential",
        "--export-outputs-json",
        "--extra-inputs",
        '{"logprobs": 0, "temperature": 0.0, "seed": 0, "ignore_eos": true}',
        "--use-legacy-max-tokens",
        "--tokenizer",
        str(hf),
        "--random-seed",
        "0",
        "--output-artifact-dir",
        str(out),
    ]
    # not HF_HUB_OFFLINE: AIPerf 0.13.0 then looks the folder up as a hub snapshot and fails
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    before = len(srv.timings())
    subprocess.run(cmd, check=True, env=env, stdout=sys.stderr, stderr=sys.stderr)
    st = srv.timings()[before + WARMUP :]
    recs = [json.loads(line) for line in (out / "profile_export.jsonl").read_text().splitlines()]
    recs = [r for r in recs if r["metadata"].get("benchmark_phase") == "profiling"]
    recs.sort(key=lambda r: r["metadata"]["request_start_ns"])
    recs = recs[WARMUP:]
    inputs = json.loads((out / "inputs.json").read_text())["data"]
    prompt_of = {d["session_id"]: d["payloads"][0]["prompt"] for d in inputs}
    m = [r["metrics"] for r in recs]
    texts = {
        d["x_request_id"]: d.get("response_text") or ""
        for d in json.loads((out / "outputs.json").read_text())["data"]
    }
    row = _row(
        "AIPerf",
        [prompt_of.get(r["metadata"]["conversation_id"], "?") for r in recs],
        [x["time_to_first_token"]["value"] for x in m],
        [x["inter_token_latency"]["value"] for x in m],
        [x["request_latency"]["value"] for x in m],
        [x["output_sequence_length"]["value"] for x in m],
        "ITL = (latency - TTFT)/(OSL-1), OSL by re-tokenizing the text",
        st,
    )
    row["outputs"] = [texts.get(r["metadata"]["x_request_id"], "?") for r in recs]
    return row


def _pool(rows: list[dict]) -> dict:
    """One tool's rows of several rounds as one: arrays joined, prompts tagged with the round
    (a per-prompt comparison pairs requests of the same round only)."""
    out = dict(rows[0])
    for key, v in rows[0].items():
        if isinstance(v, np.ndarray):
            out[key] = np.concatenate([r[key] for r in rows])
    out["prompts"] = [(k, q) for k, r in enumerate(rows) for q in r["prompts"]]
    out["outputs"] = [x for r in rows for x in r.get("outputs", [])]
    out["n"] = sum(r["n"] for r in rows)
    return out


def _cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def report(rows: list[dict], args) -> None:
    def p50(x):
        return f"{np.median(x):.2f}" if len(x) else "-"

    def mean(x):
        return f"{np.mean(x):.2f}" if len(x) else "-"

    base = rows[0]
    pos = {q: i for i, q in enumerate(base["prompts"])}

    def vs_abtui(r: dict, key: str) -> str:
        pairs = [(i, pos[q]) for i, q in enumerate(r["prompts"]) if q in pos]
        if not pairs:
            return "-"
        return f"{np.median([r[key][i] - base[key][j] for i, j in pairs]):+.3f}"

    def same_output(r: dict) -> str:
        if len(r["outputs"]) != len(r["prompts"]):
            return "-"
        ok = sum(
            q in pos and base["outputs"][pos[q]] == x
            for q, x in zip(r["prompts"], r["outputs"], strict=True)
        )
        return str(ok)

    cols = [r["tool"] for r in rows]
    lines = [
        ("requests measured", [str(r["n"]) for r in rows]),
        ("  of them abtui's prompts", [str(sum(q in pos for q in r["prompts"])) for r in rows]),
        ("  output identical to abtui's", [same_output(r) for r in rows]),
        ("TTFT P50 (ms)", [p50(r["ttft"]) for r in rows]),
        ("TTFT mean (ms)", [mean(r["ttft"]) for r in rows]),
        ("TPOT/ITL P50 (ms)", [f"{np.median(r['tpot']):.3f}" for r in rows]),
        ("TPOT/ITL mean (ms)", [f"{np.mean(r['tpot']):.3f}" for r in rows]),
        (
            "  same, server's token count, P50",
            [f"{np.median(_tpot_server_count(r)):.3f}" for r in rows],
        ),
        ("E2E P50 (ms)", [p50(r["e2e"]) for r in rows]),
        (
            "its own 'TPOT' (incl. TTFT) P50",
            [p50(r["own_tpot"]) if "own_tpot" in r else "-" for r in rows],
        ),
        ("TTFT - abtui's, same prompt, P50", [vs_abtui(r, "ttft") for r in rows]),
        ("TPOT/ITL - abtui's, same prompt, P50", [vs_abtui(r, "tpot") for r in rows]),
        ("E2E - abtui's, same prompt, P50", [vs_abtui(r, "e2e") for r in rows]),
        ("output tokens/req, as counted", [mean(r["n_out"]) for r in rows]),
        ("server: tokens/req generated", [mean(r["srv_tokens"]) for r in rows]),
        ("server: prompt eval P50 (ms)", [p50(r["srv_prompt"]) for r in rows]),
        ("server: decode/step P50 (ms)", [f"{np.median(r['srv_step']):.3f}" for r in rows]),
        (
            "TTFT P50 - server prompt P50",
            [f"{np.median(r['ttft']) - np.median(r['srv_prompt']):.2f}" for r in rows],
        ),
        (
            "TPOT P50 / server step P50",
            [f"{np.median(r['tpot']) / np.median(r['srv_step']):.1f}x" for r in rows],
        ),
    ]
    w = max(len(k) for k, _ in lines)
    print(f"\n{'':<{w}}  " + "  ".join(f"{c:>10}" for c in cols))
    for k, vals in lines:
        print(f"{k:<{w}}  " + "  ".join(f"{v:>10}" for v in vals))
    print()
    for r in rows:
        print(f"{r['tool']}: {r['native']}")
    print(
        f"\nload: {args.repeat} rounds (abtui, then each peer) of: closed loop, 1 in flight, "
        f"{args.requests} requests + {WARMUP} warm-up, "
        f"~{args.input_tokens}-token prompts, max_tokens {args.output_tokens}, logprobs 0, "
        f"temperature 0; llama.cpp 1 thread pinned to CPU {_cpus()[0] if _cpus() else '-'}; "
        f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    a = {r["tool"]: r for r in rows}
    parts = [
        f"{t} TTFT {np.median(r['ttft']):.2f} TPOT {np.median(r['tpot']):.3f}" for t, r in a.items()
    ]
    print("peer check: " + "; ".join(parts) + " (ms, P50)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--input-tokens", type=int, default=32)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument(
        "--peers-dir",
        type=Path,
        default=Path("/tmp/abtui-peers"),
        help="where the peers' venvs are (<dir>/guidellm, <dir>/aiperf)",
    )
    ap.add_argument("--setup", action="store_true", help="create the peers' venvs, then exit")
    ap.add_argument("--tools", default="guidellm,aiperf", help="peers to run after abtui")
    ap.add_argument(
        "--repeat", type=int, default=3, help="rounds of all tools; figures pool them (3)"
    )
    ap.add_argument("--dir", type=Path, help="work folder (default: a temporary one)")
    a = ap.parse_args(argv)
    if a.setup:
        setup(a.peers_dir)
        return 0
    tools = a.tools.split(",")
    for t in tools:
        if t in PEERS and not (a.peers_dir / t / "bin" / t).exists():
            print(
                f"peer_check: no {t} at {a.peers_dir / t}; run with --setup first", file=sys.stderr
            )
            return 2
    with tempfile.TemporaryDirectory(prefix="abtui-peers-") as tmp:
        work = a.dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        models = build_models(work / "models")
        hf = write_hf_tokenizer(work / "hf-tokenizer")
        cpu = _cpus()[0] if _cpus() else None
        rounds: list[list[dict]] = []
        with LlamaCppServer(
            models["FP32"],
            name="FP32",
            cpus=(cpu,) if cpu is not None else None,
            log_path=work / "server.log",
        ) as srv:
            for k in range(a.repeat):
                rd = work / f"round{k}"
                rd.mkdir(exist_ok=True)
                print(f"peer_check: round {k + 1}/{a.repeat}: abtui", file=sys.stderr)
                rows = [
                    run_abtui(rd, srv, models["FP32"], a.requests, a.input_tokens, a.output_tokens)
                ]
                sent = rows[0]["sent"]  # every peer sends abtui's prompts, in the same order
                for t in tools:
                    print(f"peer_check: round {k + 1}/{a.repeat}: {t}", file=sys.stderr)
                    if t == "guidellm":
                        rows.append(
                            run_guidellm(rd, srv, a.peers_dir / t, hf, sent, a.output_tokens)
                        )
                    elif t == "aiperf":
                        rows.append(run_aiperf(rd, srv, a.peers_dir / t, hf, sent, a.output_tokens))
                rounds.append(rows)
        rows = [_pool([rnd[i] for rnd in rounds]) for i in range(len(rounds[0]))]
        report(rows, a)
    return 0


if __name__ == "__main__":
    from abtui.errors import AbtuiError

    try:
        sys.exit(main())
    except AbtuiError as e:  # e.g. the engine extra is not installed
        print(f"peer_check: {e}", file=sys.stderr)
        sys.exit(2)
