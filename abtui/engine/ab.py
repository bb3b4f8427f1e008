"""FP32 vs Q4_0 and FP32 vs Q8_0 on llama.cpp's server, through abtui's normal ``abtui run``.

One function, :func:`run_engine_ab`, shared by ``scripts/engine_ab.py`` and the ``engine`` test:
build the tiny models, start one server per model (one llama.cpp thread each; the baseline
pinned to one core and the candidates to the other, where there are two), run two sessions,
then check what abtui stored against what the server itself says:

- every request accounted for: measured + warm-up rows per arm, all ``ok``, and one timing
  block in the server's log per request it was sent;
- token counts: the server streams no ``usage``, so abtui counts token chunks (text-less ones
  included); each count must equal the ``usage.completion_tokens`` the same server reports for
  the same prompt without streaming (greedy decoding, so the same tokens);
- timing, per request: the server's own prompt-eval time is a lower bound of abtui's TTFT (no
  token can be sent before the prefill ends, which starts after dispatch) and its prompt +
  decode time a lower bound of E2E (the last token is sent after the last decode step); per arm:
  the median TPOT is no less than the server's median decode time per step. (Per request, TPOT
  can fall below it: the server sometimes holds chunks back and sends them in one burst — seen
  on a first request — so that is not a law; the median is.)
- quality: the stored outputs agree with FP32's more often for Q8_0 than for Q4_0, and FP32's
  outputs are the same in both sessions (greedy decoding is deterministic on one thread);
- logprobs (:func:`logprob_agreement`): on the measured prompts, each server's greedy
  continuation with its top-5 logprobs (:func:`abtui.quality.logprobs.collect`, non-streamed;
  llama-cpp-python's server returns them: its ``logits_all`` setting is on by default), compared
  with FP32's by :func:`abtui.quality.logprobs.compare` (top-1 agreement and the KL lower bound,
  with 95% CIs over prompts): Q4_0 must be further from FP32 than Q8_0 on both.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from abtui.engine.llamacpp import LlamaServer, ServerTiming
from abtui.engine.tinymodel import TinyConfig, build_models

CANDIDATES = ("Q4_0", "Q8_0")


@dataclass(slots=True)
class ABConfig:
    requests: int = 24  # measured requests per arm and session
    input_tokens: int = 32  # words of abtui's synthetic prompts
    output_tokens: int = 32
    warmup: int = 2
    concurrency: int = 1  # closed loop; llama-cpp-python serves one request at a time
    model_seed: int = 0
    threads: int = 1  # llama.cpp threads per server
    pin: bool = True  # baseline server on one core, candidates on another
    per_token_chunks: bool = True  # ask for logprobs: one chunk per token (see compatibility.md)
    http: str = "fast"
    api: str = "completions"


@dataclass(slots=True)
class ArmFigures:
    """One arm of one session: abtui's medians and the server's own, in ms."""

    session: str
    arm: str
    n_ok: int
    n_sent: int
    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    itl_ms: float
    server_prompt_ms: float
    server_decode_ms_per_token: float
    server_gen_ms: float  # prompt + decode, per request
    tokens_per_request: float
    empty_chunks_per_request: float


@dataclass(slots=True)
class EngineAB:
    """What one engine A/B found: per-arm figures, output agreement, and every failed check."""

    sessions: dict[str, Path] = field(default_factory=dict)  # candidate → session file
    figures: list[ArmFigures] = field(default_factory=list)
    agreement: dict[str, dict[str, float]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)  # candidate → `abtui run`'s exit code
    logprobs: dict[str, dict] = field(default_factory=dict)  # candidate → compare() vs FP32


def _spec_text(cfg: ABConfig, name: str, base: LlamaServer, cand: LlamaServer, folder: Path) -> str:
    params = "{ logprobs = 0 }" if cfg.per_token_chunks else "{}"
    return f"""\
name = "{name}"

[[arms]]
name = "{base.name}"
role = "baseline"
url = "{base.url}"
params = {params}

[[arms]]
name = "{cand.name}"
url = "{cand.url}"
params = {params}

[workload]
requests = {cfg.requests}
input_tokens = {cfg.input_tokens}
output_tokens = {cfg.output_tokens}
seed = 0

[load]
concurrency = {cfg.concurrency}
warmup = {cfg.warmup}

[request]
api = "{cfg.api}"
temperature = 0.0
seed = 0
http = "{cfg.http}"

[store]
dir = "{folder}"
"""


def common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _versions() -> dict[str, str]:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version(), "machine": platform.machine()}
    for pkg in ("abtui", "llama_cpp_python", "gguf", "httpx"):
        try:
            out[pkg] = version(pkg.replace("_", "-"))
        except PackageNotFoundError:
            out[pkg] = "-"
    out["cpus"] = str(
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    )
    return out


def _reference(srv: LlamaServer, items, cfg: ABConfig) -> dict[int, tuple[int, str]]:
    """The server's own token count (and text) per item, from a non-streamed request."""
    out = {}
    with httpx.Client(trust_env=False, timeout=120) as c:
        for it in items:
            body = {"model": srv.name, "prompt": it.prompt, "max_tokens": it.max_tokens,
                    "temperature": 0.0, "seed": 0, "stream": False}  # fmt: skip
            r = c.post(srv.url + "/completions", json=body).json()
            out[it.index] = (int(r["usage"]["completion_tokens"]), r["choices"][0]["text"])
    return out


def _check_arm(
    session: str, name: str, t, timings: list[ServerTiming], ref: dict[int, tuple[int, str]],
    cfg: ABConfig, problems: list[str],
) -> ArmFigures:  # fmt: skip
    from abtui.metrics.request import e2e_s, itl_s, tpot_s, ttft_s

    where = f"{session}/{name}"
    measured = t.select(~t.warmup)
    if len(measured) != cfg.requests or int(t.warmup.sum()) != cfg.warmup:
        problems.append(
            f"{where}: {len(measured)} measured + {int(t.warmup.sum())} warm-up rows, "
            f"expected {cfg.requests} + {cfg.warmup}"
        )
    bad = [
        (int(i), s, e) for i, s, e in zip(t.item, t.status, t.error_class, strict=True) if s != "ok"
    ]
    if bad:
        problems.append(f"{where}: requests not ok: {bad[:5]}")
    if set(t.token_source) != {"chunks"}:
        problems.append(
            f"{where}: token sources {set(t.token_source)}, expected counts from chunks"
        )
    for item, n in zip(measured.item, measured.n_output, strict=True):
        want = ref.get(int(item), (None,))[0]
        if int(n) != want:
            problems.append(
                f"{where}: item {int(item)}: abtui counted {int(n)} tokens, the server says {want}"
            )
    if len(timings) != len(t):
        problems.append(
            f"{where}: the server logged {len(timings)} completions, abtui sent {len(t)}"
        )
    order = np.argsort(t.dispatched_ns, kind="stable")  # concurrency 1: the server's order
    ttft, tpot, e2e = ttft_s(t) * 1e3, tpot_s(t) * 1e3, e2e_s(t) * 1e3
    for k, row in enumerate(order[: len(timings)]):
        st, item = timings[k], int(t.item[row])
        if not ttft[row] >= st.prompt_ms:
            problems.append(
                f"{where}: item {item}: TTFT {ttft[row]:.2f} ms < server prompt eval {st.prompt_ms:.2f} ms"
            )
        if not e2e[row] >= st.prompt_ms + st.eval_ms:
            problems.append(
                f"{where}: item {item}: E2E {e2e[row]:.2f} ms < server prompt+decode {st.prompt_ms + st.eval_ms:.2f} ms"
            )
    m = ~t.warmup
    ms = [timings[k] for k, row in enumerate(order[: len(timings)]) if m[row]]

    def med(x) -> float:
        x = np.asarray(x, dtype=float)
        x = x[~np.isnan(x)]
        return float(np.median(x)) if len(x) else float("nan")

    tpot_med, decode_med = med(tpot[m]), med([s.ms_per_token for s in ms])
    if not tpot_med >= decode_med:
        problems.append(
            f"{where}: median TPOT {tpot_med:.3f} ms < the server's median decode {decode_med:.3f} ms/token"
        )
    return ArmFigures(
        session=session, arm=name, n_ok=int((measured.status == "ok").sum()), n_sent=len(measured),
        ttft_ms=med(ttft[m]), tpot_ms=med(tpot[m]), e2e_ms=med(e2e[m]),
        itl_ms=med(itl_s(measured) * 1e3),
        server_prompt_ms=med([s.prompt_ms for s in ms]),
        server_decode_ms_per_token=med([s.ms_per_token for s in ms]),
        server_gen_ms=med([s.prompt_ms + s.eval_ms for s in ms]),
        tokens_per_request=float(np.mean(measured.n_output)) if len(measured) else float("nan"),
        empty_chunks_per_request=float(np.mean(measured.empty_token_chunks)) if len(measured) else float("nan"),
    )  # fmt: skip


def logprob_agreement(servers: dict[str, LlamaServer], prompts: list[str], seed: int = 0) -> dict:
    """Each candidate's top-1 agreement and KL lower bound against FP32 on ``prompts``
    (``compare()``'s dict, or ``{"error": …}`` when a server returned no logprobs)."""
    from abtui.client.stream import Target
    from abtui.quality.logprobs import collect, compare

    got = {k: collect(Target(base_url=s.url, model=s.name), prompts, seed)
           for k, s in servers.items()}  # fmt: skip
    out: dict[str, dict] = {}
    for cand in CANDIDATES:
        if not (got["FP32"]["supported"] and got[cand]["supported"]):
            out[cand] = {"error": f"no logprobs: FP32 {got['FP32']['note'] or 'ok'}, "
                                  f"{cand} {got[cand]['note'] or 'ok'}"}  # fmt: skip
            continue
        out[cand] = compare(got["FP32"]["sequences"], got[cand]["sequences"]) or {
            "error": "no position to compare"
        }
    return out


def logprob_problems(lp: dict) -> list[str]:
    """Empty when Q4_0 is further from FP32 than Q8_0 beyond both 95% CIs: Q4_0's top-1
    agreement CI wholly below Q8_0's, and its KL CI wholly above."""
    errors = [f"logprobs {k}: {v['error']}" for k, v in lp.items() if "error" in v]
    if errors or set(lp) != set(CANDIDATES):
        return errors or [f"logprobs: compared {sorted(lp)}, expected {list(CANDIDATES)}"]
    q8, q4 = lp["Q8_0"], lp["Q4_0"]
    out = []
    if not q4["top1_hi"] < q8["top1_lo"]:
        out.append(f"logprobs: Q4_0's top-1 agreement with FP32 {_ci(q4, 'top1')} is not below "
                   f"Q8_0's {_ci(q8, 'top1')}")  # fmt: skip
    if not q4["kl_lo"] > q8["kl_hi"]:
        out.append(f"logprobs: Q4_0's KL from FP32 {_ci(q4, 'kl')} is not above "
                   f"Q8_0's {_ci(q8, 'kl')}")  # fmt: skip
    return out


def _ci(c: dict, key: str) -> str:
    if key == "top1":
        return f"{c['top1_agreement']:.1%} [{c['top1_lo']:.1%}, {c['top1_hi']:.1%}]"
    return f"{c['kl_lower_bound']:.4f} [{c['kl_lo']:.4f}, {c['kl_hi']:.4f}] nats"


def run_engine_ab(folder: Path, cfg: ABConfig | None = None, *, log=sys.stderr) -> EngineAB:
    """Build the models, serve them, run FP32 vs each candidate with ``abtui run``, check."""
    cfg = cfg or ABConfig()
    from abtui.cli import main as abtui_main
    from abtui.store.reader import SessionReader

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    res = EngineAB(versions=_versions())
    models = build_models(folder / "models", TinyConfig(seed=cfg.model_seed))
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = cfg.pin and len(cpus) >= 2
    base_cpu, cand_cpu = (cpus[0], cpus[1]) if pin else (None, None)
    servers = {
        k: LlamaServer(models[k], name=k, threads=cfg.threads,
                       cpu=base_cpu if k == "FP32" else cand_cpu,
                       log_path=folder / f"server-{k}.log")
        for k in ("FP32", *CANDIDATES)
    }  # fmt: skip
    try:
        for s in servers.values():
            s.start()
            print(f"engine: {s.name} serving {s.model.name} at {s.url}", file=log)
        runs: dict[str, tuple[dict[str, list[ServerTiming]], Path]] = {}
        for cand in CANDIDATES:
            base, c = servers["FP32"], servers[cand]
            name = f"engine-fp32-vs-{cand.lower()}"
            spec = folder / f"{name}.toml"
            spec.write_text(_spec_text(cfg, name, base, c, folder))
            before = {k: len(servers[k].timings()) for k in ("FP32", cand)}
            with contextlib.redirect_stdout(log):  # abtui run's summary table
                rc = abtui_main(["run", str(spec), "--headless", "--overwrite"])
            # 0 GO, 3 NO-GO, 4 INCONCLUSIVE: the run completed (the verdict is not checked here)
            res.exit_codes[cand] = rc
            if rc not in (0, 3, 4):
                res.problems.append(f"{name}: abtui run exited with code {rc}")
            timings = {k: servers[k].timings()[before[k] :] for k in ("FP32", cand)}
            path = folder / f"{name}.duckdb"
            res.sessions[cand] = path
            runs[cand] = (timings, path)
        texts: dict[str, dict[str, dict[int, str]]] = {}
        for cand, (timings, path) in runs.items():
            with SessionReader(path) as rd:
                if rd.status != "complete":
                    res.problems.append(f"{path.name}: session status {rd.status!r}, not complete")
                items = rd.items()
                table = rd.request_table(include_warmup=True)
                txt = rd.texts()
            texts[cand] = {}
            for arm_i, key in ((0, "FP32"), (1, cand)):
                t = table.select(table.arm == arm_i)
                ref = _reference(servers[key], items, cfg)
                res.figures.append(_check_arm(cand, key, t, timings[key], ref, cfg, res.problems))
                mt = t.select(~t.warmup)
                texts[cand][key] = {
                    int(i): txt.get(int(r)) or "" for i, r in zip(mt.item, mt.req, strict=True)
                }
        for cand in CANDIDATES:
            a, b = texts[cand]["FP32"], texts[cand][cand]
            keys = sorted(a)
            res.agreement[cand] = {
                "exact": float(np.mean([a[k] == b.get(k) for k in keys])),
                "prefix_chars": float(np.mean([common_prefix(a[k], b.get(k, "")) for k in keys])),
                "fp32_chars": float(np.mean([len(a[k]) for k in keys])),
            }  # fmt: skip
        f1, f2 = (texts[c]["FP32"] for c in CANDIDATES)
        if f1 != f2:
            differ = [k for k in f1 if f1[k] != f2.get(k)]
            res.problems.append(
                f"FP32's outputs differ between the two sessions for items {differ[:5]}"
            )
        q8, q4 = res.agreement["Q8_0"], res.agreement["Q4_0"]
        if not (q8["exact"] > q4["exact"] and q8["prefix_chars"] > q4["prefix_chars"]):
            res.problems.append(f"Q8_0 does not agree with FP32 more than Q4_0 does: {q8} vs {q4}")
        prompts = [it.prompt for it in items if "warmup" not in (it.tags or [])]
        res.logprobs = logprob_agreement(servers, prompts)
        res.problems += logprob_problems(res.logprobs)
    finally:
        for s in servers.values():
            s.close()
    return res
