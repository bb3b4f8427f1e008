"""Headless mode: progress lines while running, and the side-by-side summary of a session.

The summary is computed from the session file (never from live state), so ``abtui report``
on a saved session prints exactly what the run printed.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.table import Table

from abtui.errors import UsageError
from abtui.metrics import catalogue as cat
from abtui.metrics.summary import ArmSummary, summarize
from abtui.metrics.workload import workload_shape
from abtui.report.health import DEGRADED_TAG, DEGRADED_WHY, stored_health
from abtui.report.untrusted import InertConsole, inert, printable, term
from abtui.runner.observer import ArmProgress, RunInfo, Snapshot
from abtui.store.reader import SessionReader, never_closed, reading
from abtui.store.schema import WRITE_FAILED

LINE_MAX = 100  # a headless progress line at most (they were ~170 with two arms)


def _dur(v: float) -> str:
    """``47.5ms``, ``1.25s``; ``n/a`` with no unit (it printed ``n/ams``)."""
    if v is None or not math.isfinite(v):
        return "n/a"
    return f"{v * 1e3:.1f}ms" if v < 1 else f"{v:.2f}s"


def _cut(text: str, n: int = LINE_MAX) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def terminal_width(out: TextIO, default: int | None = None) -> int | None:
    """The terminal's width when ``out`` is one (``COLUMNS`` first, as the shell sets it),
    else ``default`` (a file or a pipe keeps the fixed width it always had)."""
    import shutil

    try:
        tty = out.isatty()
    except (AttributeError, ValueError):
        tty = False
    return shutil.get_terminal_size((default or 80, 24)).columns if tty else default


def say(text: str, out: TextIO, width: int | None = None) -> None:
    """``text`` on ``out``, inert, each paragraph wrapped at word boundaries to ``width`` (default:
    the terminal's when ``out`` is one: a terminal wraps a long line mid-word, "can" / "didate"),
    its later lines indented by two; a file or pipe gets it whole."""
    import textwrap

    width = width or terminal_width(out)
    text = inert(text)
    if width:
        text = "\n".join(
            textwrap.fill(p, width, subsequent_indent="  ", break_on_hyphens=False) if p else p
            for p in text.split("\n")
        )
    print(text, file=out, flush=True)


class HeadlessObserver:
    """Prints a progress line every couple of seconds to ``out`` (stderr by default)."""

    def __init__(self, out: TextIO | None = None, every_s: float = 2.0) -> None:
        self.out = out or sys.stderr
        self.every_s = every_s
        self._last = -1e9

    def _p(self, text: str) -> None:
        print(inert(text), file=self.out, flush=True)

    def started(self, info: RunInfo) -> None:
        self._p(f"abtui: session {info.session_name} → {info.session_path}")
        for name, url, model in zip(info.arm_names, info.arm_urls, info.arm_models, strict=True):
            self._p(f"  {printable(name):<12} {printable(url)}  model={printable(model)}")
        self._p(f"  load: {info.load}, {info.planned_per_arm} requests per arm")

    def progress(self, snap: Snapshot) -> None:
        if snap.elapsed_s - self._last < self.every_s:
            return
        self._last = snap.elapsed_s
        for line in progress_lines(snap):
            self._p(line)

    def arm_finished(self, arm: int, progress: ArmProgress) -> None:
        pass

    def message(self, text: str) -> None:
        self._p(f"abtui: {text}")

    def finished(self, snap: Snapshot, status: str) -> None:
        self._p(f"abtui: session {status} after {snap.elapsed_s:.1f} s")


def progress_lines(snap: Snapshot) -> list[str]:
    """One progress line of at most LINE_MAX characters when every arm fits on it; else the
    time, phase and segment on the first and one line per arm under it."""
    where = f" ({printable(snap.segment.label())})" if snap.segment is not None else ""
    head = f"  [{snap.elapsed_s:6.1f}s {snap.phase}]{where}"
    parts = [_progress(a) for a in snap.arms]
    one = f"{head} " + " | ".join(parts)
    if len(one) <= LINE_MAX:
        return [one]
    return [_cut(head)] + [_cut(f"    {p}") for p in parts]


def _progress(a: ArmProgress) -> str:
    err = sum(a.errors.values())
    # TTFO once a response reasoned before its answer (until then it is TTFT)
    ttfo = "" if a.recent_ttfo_p50_s is None else f" TTFO50 {_dur(a.recent_ttfo_p50_s)}"
    return (
        f"{printable(a.name)} {a.done}/{a.planned} ok {a.ok} err {err} "
        f"TTFT50 {_dur(a.recent_ttft_p50_s)}{ttfo} TPOT50 {_dur(a.recent_tpot_p50_s)}"
    )


# ------------------------------------------------------------------------- the summary

_DISTS = (
    ("TTFT", "ttft", "ms", 1e3),
    ("TTFT (user)", "ttft_user", "ms", 1e3),
    ("TTFO", "ttfo", "ms", 1e3),  # shown where an answer came after reasoning
    ("TPOT", "tpot", "ms", 1e3),
    ("TPOT reasoning", "tpot_reasoning", "ms", 1e3),  # these two likewise
    ("TPOT answer", "tpot_answer", "ms", 1e3),
    ("ITL", "itl", "ms", 1e3),
    ("E2E", "e2e", "s", 1.0),
)
_STATS = (("mean", "mean"), ("P50", "p50"), ("P90", "p90"), ("P95", "p95"), ("P99", "p99"))


def _num(v: float, scale: float = 1.0, digits: int = 1) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    return f"{v * scale:,.{digits}f}"


def _ratio(b: float, a: float) -> str:
    if not (math.isfinite(a) and math.isfinite(b)) or a == 0:
        return "n/a"
    return f"{b / a:.3f}"


def _slo_text(slo: dict[str, float]) -> str:
    return ", ".join(f"{k}≤{v * 1e3:g}ms" for k, v in slo.items())


def _reasoned(sums: list[ArmSummary]) -> bool:
    """Whether some arm streamed reasoning before its answers (TTFO is then not TTFT)."""
    return any(
        s.reasoning_tokens or (s.ttfo.n, s.ttfo.mean) != (s.ttft.n, s.ttft.mean)
        for s in sums
        if s.ttft.n
    )


def summary_table(names: list[str], sums: list[ArmSummary], slo: dict[str, float]) -> Table:
    """Metrics × arms, with B/A ratio columns for each candidate against the baseline."""
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    t.add_column("metric")
    t.add_column("stat")
    for n in names:
        t.add_column(n, justify="right")
    for n in names[1:]:
        t.add_column(f"{n}/{names[0]}", justify="right")

    def row(metric: str, stat: str, values: list[float], scale=1.0, digits=1, ratio=True):
        cells = [_num(v, scale, digits) for v in values]
        ratios = [_ratio(v, values[0]) if ratio else "" for v in values[1:]]
        t.add_row(metric, stat, *cells, *ratios)

    t.add_row("requests", "ok / sent", *[f"{s.ok}/{s.sent}" for s in sums], *[""] * (len(sums) - 1))
    errs = []
    for s in sums:
        errs.append(", ".join(f"{k} {v}" for k, v in sorted(s.errors.items())) or "0")
    t.add_row("", "errors", *errs, *[""] * (len(sums) - 1))
    if any(s.cancelled for s in sums):
        t.add_row("", "cancelled", *[str(s.cancelled) for s in sums], *[""] * (len(sums) - 1))
    thinking = _reasoned(sums)
    for label, key, unit, scale in _DISTS:
        if key in cat.ANSWER_KEYS and not (thinking and any(getattr(s, key).n for s in sums)):
            continue  # the same as TTFT or TPOT, row for row, or no value
        for i, (stat_label, stat) in enumerate(_STATS):
            vals = [getattr(getattr(s, key), stat) for s in sums]
            row(
                f"{label} ({unit})" if i == 0 else "",
                stat_label,
                vals,
                scale,
                1 if unit == "ms" else 3,
            )
    row("throughput", "requests/s", [s.requests_per_s for s in sums], digits=2)
    row("", "output tok/s", [s.output_tokens_per_s for s in sums], digits=0)
    row("", "total tok/s", [s.total_tokens_per_s for s in sums], digits=0)
    if thinking:
        row("reasoning", "tokens", [s.reasoning_tokens for s in sums], digits=0)
    if any(s.cached_tokens for s in sums):  # some server said it served prompts from a cache
        row("prefix cache", "hit %", [s.prefix_hit_rate for s in sums], 100.0, ratio=False)
    if slo:
        row(f"SLO {_slo_text(slo)}", "attainment %", [s.slo_attainment for s in sums], 100.0)
        row("", "goodput req/s", [s.goodput_requests_per_s for s in sums], digits=2)
        row("", "goodput tok/s", [s.goodput_output_tokens_per_s for s in sums], digits=0)
    row("generator", "lag P99 (ms)", [s.lag_p99_s for s in sums], 1e3, 2, ratio=False)
    row("", "lag max (ms)", [s.lag_max_s for s in sums], 1e3, 2, ratio=False)
    return t


def _print_generator_health(console: Console, meta: dict) -> None:
    """The generators' stored health (abtui.runner.health) and, loudly, a degraded mark."""
    from abtui.runner.health import format_health

    health = meta.get("generator_health") or {}
    lines = format_health(health)
    if lines:
        console.print()
        for line in lines:
            console.print(term(line))
    if isinstance(meta.get("ray"), dict):  # a --ray run: its nodes, their clocks, any loss
        from abtui.runner.ray.clocks import lines as ray_lines

        for line in ray_lines(meta["ray"]):
            console.print(term(line))
    words = stored_health(meta)
    for note in words.notes:
        console.print(f"[yellow]note:[/] {term(note)}")
    if words.degraded:
        console.print(f"[bold red]{DEGRADED_TAG}:[/] [bold]{DEGRADED_WHY}[/]")
        for r in words.reasons:
            console.print(f"[bold red]  ✗ {term(r)}[/]")


def print_session_summary(
    source: str | Path | SessionReader, out: TextIO | None = None, width: int | None = None
) -> list[ArmSummary]:
    """Summarise the session file at ``source`` (a path, or a reader of it:
    :func:`~abtui.store.reader.reading`) side by side, in ``width`` columns (default: the
    terminal's, when ``out`` is one; a file or pipe gets the full width); returns the per-arm
    summaries."""
    out = out or sys.stdout
    with reading(source) as rd:
        path = source if not isinstance(source, SessionReader) else rd.path
        meta = rd.meta()
        arms = rd.arms()
        table = rd.request_table()
        images = rd.item_images()
        spec = meta.get("spec") or {}
        slo = spec.get("slo") or {}
        sums = [summarize(table, a["arm"], slo) for a in arms]
        names = [a["name"] for a in arms]
        first_errors = rd.query(
            "SELECT arm, error_class, any_value(error_message), count(*) FROM requests "
            "WHERE status = 'error' AND NOT warmup GROUP BY arm, error_class ORDER BY arm, 4 DESC"
        )
    full = max(100, 40 + 16 * len(names) * 2)
    console = InertConsole(file=out, width=width or terminal_width(out, full), highlight=False)
    status = meta.get("status", "?")
    console.print(
        f"[bold]Session {term(meta.get('session_name', Path(path).stem))}[/] ({term(status)}) — "
        f"{term(path)}"
    )
    wl = spec.get("workload", {})
    console.print(
        f"load: {term(meta.get('load', '?'))}; {term(wl.get('requests', '?'))} requests per arm"
    )
    console.print(f"workload: {term(workload_shape(spec, table, images).describe())}")
    from abtui.report.quality import mode_info

    qmode = mode_info(meta)
    if qmode and qmode.mode == "interleaved":  # the quality requests loaded the server too
        console.print(
            "quality: interleaved with the load test (quality mode: interleaved): these "
            "latencies compare only with sessions run in the same mode"
        )
    for a in arms:
        console.print(
            f"  {term(a['role']):<9} {term(a['name']):<12} {term(a['url'])}  model={term(a['model'])}"
        )
    for a in arms:
        if a["config"].get("insecure") and str(a["url"]).startswith("https:"):
            console.print(
                f"[bold yellow]warning:[/] arm {term(a['name'])}: TLS certificate "
                "not verified (--insecure): the endpoint's identity was not checked"
            )
    console.print()
    console.print(summary_table(names, sums, slo))
    if first_errors:
        console.print()
        for arm, cls, msg, count in first_errors:
            console.print(f"  {term(names[arm])}: {count} × {term(cls)}: {term(msg)}")
    if never_closed(path, status):
        console.print(
            "\n[bold red]KILLED:[/] abtui stopped without closing this session (killed or crashed; "
            "its status stayed running): figures cover the requests committed before that."
        )
    elif status == WRITE_FAILED:
        console.print(
            f"\n[bold red]WRITE FAILED:[/] the session file could not be written "
            f"({term(str(meta.get('write_error') or 'no reason stored'))}): figures cover the "
            "requests committed before that."
        )
    elif status != "complete":
        console.print(
            f"\n[yellow]note:[/] the session is {status}: figures cover what was measured."
        )
    from abtui.verdict.saved import sequential_of

    seq = sequential_of(meta)
    if seq is not None:  # a run --until-decided: why it ended where it did
        from abtui.verdict.sequential import STOPPED

        how = STOPPED.get(seq.stop_reason or "", "ended")
        console.print(
            f"\nuntil decided: {how} at {seq.pairs:,} pairs per arm "
            f"(budget {seq.budget_pairs or 0:,}; {len(seq.looks)} looks): "
            f"{term(str(seq.decision))}"
        )
        from abtui.verdict.sequential import quality_of

        q = quality_of(seq)
        if q and q.suites:  # its quality items, sent until decided
            states = ", ".join(f"{s.suite} {s.state}" for s in q.suites)
            console.print(
                f"quality until decided: {term(q.stop_reason)} after {q.rounds} round(s), "
                f"{q.items_per_arm:,} items per arm: {term(states)}"
            )
    if any(s.generator_behind for s in sums):
        console.print(
            "[yellow]warning:[/] the load generator fell behind its schedule "
            "(schedule lag above the fixed limits): latencies may include client-side delay; "
            "the verdict weighs it against each effect."
        )
    _print_generator_health(console, meta)
    return sums


def computing(path) -> None:
    """Say on stderr that the verdict is being computed (seconds to a minute on a big session:
    thousands of bootstrap resamples per row), so that a wait is never silent."""
    print(f"abtui: computing the verdict of {Path(path).name}…", file=sys.stderr, flush=True)


def check_output(output: str | Path) -> Path:
    """``output`` as a path a report can be written to, checked before any work: its folder
    exists and is writable, and it is not a folder itself (a bad ``-o`` failed only after the
    verdict, 20 s later)."""
    import os

    out = Path(output)
    folder = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise UsageError(f"cannot write {output}: it is a folder", "give a file name")
    if not folder.is_dir():
        raise UsageError(
            f"cannot write {output}: the folder {folder} does not exist",
            "create it first, or give another path",
        )
    if not os.access(folder, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise UsageError(f"cannot write {output}: permission denied", "give a writable path")
    return out
