"""Prefix caching off vs on for multi-turn conversations, on a real engine, judged by ``abtui run``.

The workload is a small synthetic conversation file (:class:`ConversationWorkload`): every
conversation opens with the same system prompt, each turn adds a short user message, and each
answer is a few tokens, so a turn's prompt is the previous turn's prompt plus the previous
answer (the recorded one: both arms get the same bytes) plus the new message. A server that
keeps the prompt prefixes it computed reuses the system prompt from the second conversation on
and, from turn 1, the whole history; one that keeps nothing prefills every turn in full.

Two pairs of servers: llama.cpp (:data:`LLAMACPP`: ``llama-server --no-cache-prompt`` vs prompt
caching on, with its host-memory prompt cache and a slot taken by LRU, so that a conversation's
history comes back from that cache: :func:`llamacpp_servers`) and vLLM
(``abtui.engine.vllm_ab.PREFIX_CACHING``: ``--no-enable-prefix-caching`` vs
``--enable-prefix-caching``). Conversations cannot alternate, so both servers run at once, one
CPU thread each (``[load] schedule = "parallel"``).

What :func:`run_conversation_ab` returns holds the figures from both sources:

- the responses: abtui's report key ``prefix_cache`` (``usage.prompt_tokens_details
  .cached_tokens``, or llama.cpp's ``timings.cache_n``), per arm and per turn;
- the servers: their ``/metrics`` counters read before and after the run, in abtui's names
  (:func:`abtui.telemetry.engines.extract`: ``prompt_tokens``, ``prompt_cached_tokens``,
  ``prefix_cache_hits`` / ``queries``);
- TTFT (service view, as abtui's verdict measures it) P50 per arm and turn, from the session.

``scripts/engine_prefix_ab.py`` runs it on either engine and prints the tables of
docs/engine.md.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from abtui.telemetry.engines import extract
from abtui.telemetry.promtext import parse as parse_prom

# abtui's names of the counters read before and after the run (abtui.telemetry.engines.RULES)
COUNTERS = ("prompt_tokens", "prompt_cached_tokens", "prefix_cache_hits", "prefix_cache_queries")


class Served(Protocol):
    """What the run needs of a started server (LlamaCppServer and VllmServer both have it)."""

    name: str
    url: str
    base: str

    def metrics_text(self) -> str: ...


@dataclass(frozen=True, slots=True)
class ConversationWorkload:
    """A small, fixed conversation file: ``conversations`` of exactly ``turns`` turns, one
    system prompt of ``system_tokens`` they all share, user messages of ``user_tokens``,
    answers of ``answer_tokens`` (the recorded history carries answers of that many words),
    ``think_s`` between an answer and the next turn, conversations starting at ``rate`` per
    second (Poisson, seeded)."""

    conversations: int = 6
    turns: int = 4
    system_tokens: int = 128
    user_tokens: int = 24
    answer_tokens: int = 8
    think_s: float = 0.2
    rate: float = 2.0
    seed: int = 0

    def write(self, path: Path) -> Path:
        from abtui.workload.conversation_import import (
            ConversationShape,
            ThinkTime,
            synthetic_conversations,
        )
        from abtui.workload.conversations import write_conversations

        shape = ConversationShape(
            turns_median=self.turns,
            turns_sigma=0.0,
            turns_range=(self.turns, self.turns),
            system_tokens=self.system_tokens,
            user_median=self.user_tokens,
            user_sigma=0.0,
            user_range=(self.user_tokens, self.user_tokens),
            output_median=self.answer_tokens,
            output_sigma=0.0,
            output_range=(self.answer_tokens, self.answer_tokens),
            think=ThinkTime(self.think_s, 0.5),
            rate=self.rate,
        )
        path = Path(path)
        write_conversations(path, synthetic_conversations(self.conversations, self.seed, shape))
        return path


@dataclass(frozen=True, slots=True)
class CacheArm:
    name: str
    role: str  # baseline | candidate
    extra_args: tuple[str, ...] = ()  # llama-server flags (vLLM: its servers say it themselves)


# llama-server's prompt cache: a slot keeps the prompt it computed and a new request reuses its
# longest common prefix; the host-memory cache (--cache-ram, 8 GiB by default) keeps earlier
# prompts of the slots, but it is looked up only when a request takes a slot by LRU, or by
# prompt similarity with less than half the slot's tokens kept. By default (similarity 0.1) a
# conversation's turn takes whichever slot shares the system prompt, keeps only that, and never
# finds its own history; --slot-prompt-similarity 0 makes every request take a slot by LRU, so
# its history comes back from the cache. --no-cache-prompt turns all of it off.
LLAMACPP = (
    CacheArm("no-prompt-cache", "baseline", ("--no-cache-prompt",)),
    CacheArm("prompt-cache", "candidate", ("--slot-prompt-similarity", "0")),
)

# 5 conversations of 4 turns: 20 pairs, the fewest the verdict's bootstrap interval holds for;
# ~2,900 prompt tokens for the baseline to prefill on one thread
LLAMACPP_WORKLOAD = ConversationWorkload(
    conversations=5, system_tokens=64, user_tokens=16, answer_tokens=4
)
# vLLM on the CPU: its prefix cache reuses whole 128-token KV blocks, so the lengths are set
# by blocks (SmolLM2's chat template): the system message is 139 tokens (one whole block
# shared), turn 0's prompt 266 (just past two blocks) and each turn adds 137 (just past one),
# so turn k >= 1 reuses k + 1 blocks (64, 71, 76 % of turns 1-3). Conversations start every
# 2 s on average and think 1 s: the turns of a 1-thread server overlap less.
VLLM_WORKLOAD = ConversationWorkload(
    conversations=5, system_tokens=134, user_tokens=116, think_s=1.0, rate=0.5
)


@dataclass(slots=True)
class TurnFigures:
    turn: int
    requests: int
    prompt_tokens: int  # from the responses: the prompt as the server counted it
    cached_tokens: int
    ttft_p50_s: float | None

    @property
    def hit_rate(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None


@dataclass(slots=True)
class ConversationResult:
    session: Path
    exit_code: int
    report: dict  # `abtui report --format json`
    before: dict[str, dict[str, float]]  # arm → abtui counter name → value before the run
    after: dict[str, dict[str, float]]
    turns: dict[str, list[TurnFigures]]  # arm → per turn, from the responses and the session
    engines: dict[str, str | None]  # arm → the engine its /metrics named (llamacpp, vllm)
    wall_s: float
    problems: list[str] = field(default_factory=list)

    @property
    def pair(self) -> dict:
        return self.report["pairs"][0]

    def effect(self, key: str) -> dict | None:
        return next((e for e in self.pair["comparison"]["effects"] if e["key"] == key), None)

    def delta(self, arm: str, name: str) -> float | None:
        if name not in self.after[arm]:
            return None
        return self.after[arm][name] - self.before[arm].get(name, 0.0)

    def responses(self, arm: str) -> dict:
        """The report's ``prefix_cache`` figures of ``arm`` from its responses."""
        return self.report["prefix_cache"]["arms"][arm]["responses"]

    def server_hit_rate(self, arm: str) -> float | None:
        """Cached / prompt tokens by the server's own counters over the run: llama.cpp counts
        the computed prompt tokens apart from the cached ones, vLLM counts them all."""
        cached, prompt = self.delta(arm, "prompt_cached_tokens"), self.delta(arm, "prompt_tokens")
        if cached is None or prompt is None:
            return None
        total = cached + prompt if self.engines.get(arm) == "llamacpp" else prompt
        return cached / total if total > 0 else None


@contextlib.contextmanager
def llamacpp_servers(
    model: Path,
    folder: Path,
    arms: tuple[CacheArm, ...] = LLAMACPP,
    threads: int = 1,
    log=sys.stderr,
):
    """The (role, started :class:`~abtui.engine.server.LlamaCppServer`) of each of ``arms``,
    2 slots of 2,048 tokens each; stopped on exit."""
    from abtui.engine.server import LlamaCppServer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    servers = [
        (
            a.role,
            LlamaCppServer(
                model,
                name=a.name,
                parallel=2,
                ctx=2048,
                threads=threads,
                extra_args=a.extra_args,
                log_path=folder / f"server-{a.name}.log",
            ),
        )
        for a in arms
    ]
    try:
        for _, s in servers:
            s.start()
            print(f"engine: {s.name} ({' '.join(s.argv()[3:])})", file=log)
        yield servers
    finally:
        for _, s in servers:
            s.close()


def counters(text: str) -> tuple[dict[str, float], str | None]:
    """abtui's counters of :data:`COUNTERS` in one ``/metrics`` text, and the engine that
    serves it."""
    ex = extract(parse_prom(text))
    engines = sorted(ex.engines - {"dcgm"})
    return {k: v for k, (_, v) in ex.cumulative.items() if k in COUNTERS}, (
        engines[0] if engines else None
    )


def spec_text(
    name: str, arms: list[tuple[str, Served]], conv: Path, folder: Path, primary: str
) -> str:
    blocks = [
        f'[[arms]]\nname = "{srv.name}"\nrole = "{role}"\nurl = "{srv.url}"\n'
        f'metrics_url = "{srv.base}/metrics"\n'
        for role, srv in arms
    ]
    return f'''name = "{name}"

{chr(10).join(blocks)}
[workload]
conversations = "{conv}"
input_tokens = 16
output_tokens = 4
seed = 0

[load]
warmup = 1

[request]
api = "chat"
temperature = 0.0
seed = 0
ignore_eos = true

[policy]
primary = "{primary}"

[store]
dir = "{folder}"
'''


def turn_figures(session: Path, report: dict) -> dict[str, list[TurnFigures]]:
    """Per arm and turn: the responses' hit rate (the report's ``prefix_cache``) and TTFT P50
    (service view: dispatch to first token, less the connect phase) of the measured ok turns."""
    from abtui.store.reader import SessionReader

    with SessionReader(session) as rd:
        arms = {a["arm"]: a["name"] for a in rd.arms()}
        rows = rd.query(
            "SELECT arm, COALESCE(turn, 0), "
            f"(first_token_ns - dispatched_ns - {rd.connect_sql()}) / 1e9 "
            "FROM requests WHERE status = 'ok' AND NOT warmup AND first_token_ns IS NOT NULL"
        )
    ttft: dict[tuple[str, int], list[float]] = {}
    for arm, turn, t in rows:
        ttft.setdefault((arms[arm], int(turn)), []).append(float(t))
    out: dict[str, list[TurnFigures]] = {}
    for name, doc in report["prefix_cache"]["arms"].items():
        out[name] = [
            TurnFigures(
                t["turn"],
                t["requests"],
                t["prompt_tokens"],
                t["cached_tokens"],
                float(np.median(ttft[name, t["turn"]])) if (name, t["turn"]) in ttft else None,
            )
            for t in doc["responses"]["turns"]
        ]
    return out


def run_conversation_ab(
    arms: list[tuple[str, Served]],
    workload: ConversationWorkload,
    folder: Path,
    *,
    name: str = "prefix-conversations",
    primary: str = "ttft.p50",
    log=sys.stderr,
) -> ConversationResult:
    """``abtui run`` headless on the (started) servers of ``arms`` ((role, server), the
    baseline first) with ``workload``'s conversations, then the report, the counters and the
    per-turn figures."""
    from abtui.headless import run_spec_file
    from abtui.report.export import write_report

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    conv = workload.write(folder / f"{name}.jsonl")
    t0 = time.monotonic()
    before = {s.name: counters(s.metrics_text())[0] for _, s in arms}
    spec = folder / f"{name}.toml"
    spec.write_text(spec_text(name, arms, conv, folder, primary))
    with contextlib.redirect_stdout(log):
        rc = run_spec_file(spec, overwrite=True)
    read = {s.name: counters(s.metrics_text()) for _, s in arms}
    after = {k: c for k, (c, _) in read.items()}
    session = folder / f"{name}.duckdb"
    out = folder / f"{name}.json"
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        write_report(session, "json", str(out))
    report = json.loads(out.read_text())
    res = ConversationResult(
        session,
        rc,
        report,
        before,
        after,
        turn_figures(session, report),
        {k: e for k, (_, e) in read.items()},
        time.monotonic() - t0,
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


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0%}"


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1e3:.0f}"


def turn_table(res: ConversationResult, arms: list[str]) -> list[str]:
    """Markdown rows: per turn, each arm's hit rate from its responses and TTFT P50 (ms)."""
    head = "| turn | " + " | ".join(f"{a}: hit rate | {a}: TTFT P50 ms" for a in arms) + " |"
    rows = [head, "|" + "---|" * (1 + 2 * len(arms))]
    turns = sorted({t.turn for a in arms for t in res.turns.get(a, [])})
    for k in turns:
        cells = [str(k)]
        for a in arms:
            t = next((t for t in res.turns.get(a, []) if t.turn == k), None)
            cells += [_pct(t.hit_rate if t else None), _ms(t.ttft_p50_s if t else None)]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def summary_table(res: ConversationResult, arms: list[str]) -> list[str]:
    """Markdown rows: per arm, the hit rate from its responses and from its server's counters
    (and the counters' own figures), and the verdict's TTFT P50 effect."""
    rows = [
        "| arm | responses: cached / prompt tokens | server counters | "
        "prefix-cache hits / queries |",
        "|---|---|---|---|",
    ]
    for a in arms:
        r = res.responses(a)
        hits, queries = res.delta(a, "prefix_cache_hits"), res.delta(a, "prefix_cache_queries")
        cached = res.delta(a, "prompt_cached_tokens")
        rows.append(
            f"| {a} | {r['cached_tokens']:,} / {r['prompt_tokens']:,} = {_pct(r['hit_rate'])} "
            f"| {_pct(res.server_hit_rate(a))} ({cached or 0:,.0f} cached) "
            f"| {'—' if queries is None else f'{hits:,.0f} / {queries:,.0f}'} |"
        )
    e = res.effect("ttft.p50")
    if e and e.get("ratio") is not None:
        rows.append("")
        rows.append(
            f"Verdict {res.pair['result']}: TTFT P50 {e['ratio'] * 100:+.1f}% "
            f"[{e['lo'] * 100:+.1f}, {e['hi'] * 100:+.1f}] (candidate vs baseline, turns paired)"
        )
    return rows
