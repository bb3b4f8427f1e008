"""``abtui workload inspect``: what a workload looks like before it is sent.

Lengths (P50/P90/P99/max), arrival rate over time, burstiness (the coefficient of variation of
the gaps between arrivals: 1 for a Poisson process, above 1 bursty), the prefix-sharing ratio,
and the items a context window cannot hold.

Prefix sharing is measured the way a paged prefix cache sees it: each prompt is cut into blocks
of ``PREFIX_BLOCK_WORDS`` words (about that many tokens), each block hashed with everything
before it; the ratio is the share of prompt tokens in blocks an earlier prompt already had.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from abtui.client.items import Item

PREFIX_BLOCK_WORDS = 16
RATE_WINDOWS = 10


@dataclass
class WorkloadStats:
    n: int
    input_pct: dict[str, float]
    output_pct: dict[str, float]
    duration_s: float
    mean_rate: float | None  # req/s over the span of arrivals; None without arrivals
    window_rates: list[tuple[float, float]]  # (window start s, req/s)
    burstiness: float | None  # CV of inter-arrival gaps
    prefix_share: float
    too_long: list[str]  # ids whose prompt + max_tokens exceed the context window


def _pct(x: np.ndarray) -> dict[str, float]:
    return {
        "p50": float(np.percentile(x, 50)),
        "p90": float(np.percentile(x, 90)),
        "p99": float(np.percentile(x, 99)),
        "max": float(x.max()),
        "mean": float(x.mean()),
    }


def _text(content: object) -> str:
    """A message's text: its string, or its text parts' (an image part has no words)."""
    if isinstance(content, list):
        return " ".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return "" if content is None else str(content)


def _words(item: Item) -> list[str]:
    if item.messages is not None:
        return " ".join(_text(m.get("content")) for m in item.messages).split()
    return (item.prompt or "").split()


def prefix_share(items: list[Item]) -> float:
    """Share of prompt tokens (words) in prefix blocks that an earlier prompt already had."""
    seen: set[int] = set()
    shared = total = 0
    for it in items:
        w = _words(it)
        total += len(w)
        h = 0
        for start in range(0, len(w) - PREFIX_BLOCK_WORDS + 1, PREFIX_BLOCK_WORDS):
            h = hash((h, tuple(w[start : start + PREFIX_BLOCK_WORDS])))
            if h in seen:
                shared += PREFIX_BLOCK_WORDS
            else:
                seen.add(h)
    return shared / total if total else 0.0


def workload_stats(items: list[Item], context: int | None = None) -> WorkloadStats:
    n_in = np.array([it.n_input if it.n_input is not None else len(_words(it)) for it in items])
    n_out = np.array([it.max_tokens for it in items])
    t = np.array(sorted(it.arrival_s for it in items), dtype=float)
    span = float(t[-1] - t[0]) if len(t) else 0.0
    rates: list[tuple[float, float]] = []
    burst = None
    mean_rate = None
    if span > 0:
        mean_rate = (len(t) - 1) / span
        edges = np.linspace(t[0], t[-1], RATE_WINDOWS + 1)
        counts, _ = np.histogram(t, bins=edges)
        width = span / RATE_WINDOWS
        rates = [(float(edges[i] - t[0]), float(c / width)) for i, c in enumerate(counts)]
        gaps = np.diff(t)
        if len(gaps) > 1 and gaps.mean() > 0:
            burst = float(gaps.std() / gaps.mean())
    too_long = []
    if context:
        too_long = [it.id for it, a, b in zip(items, n_in, n_out, strict=True) if a + b > context]
    return WorkloadStats(
        n=len(items),
        input_pct=_pct(n_in),
        output_pct=_pct(n_out),
        duration_s=span,
        mean_rate=mean_rate,
        window_rates=rates,
        burstiness=burst,
        prefix_share=prefix_share(items),
        too_long=too_long,
    )


def format_stats(s: WorkloadStats, name: str, context: int | None = None) -> str:
    def row(label: str, p: dict) -> str:
        return (
            f"  {label:<14} {p['p50']:>8.0f} {p['p90']:>8.0f} {p['p99']:>8.0f} "
            f"{p['max']:>8.0f} {p['mean']:>9.1f}"
        )

    out = [
        f"{name}: {s.n} requests",
        f"  {'tokens':<14} {'P50':>8} {'P90':>8} {'P99':>8} {'max':>8} {'mean':>9}",
    ]
    out.append(row("input", s.input_pct))
    out.append(row("output (max)", s.output_pct))
    if s.mean_rate is None:
        out.append(
            "  arrivals: none in the file (all at 0): give --rate or --concurrency to run it"
        )
    else:
        out.append(f"  arrivals: {s.duration_s:.1f} s, mean {s.mean_rate:.2f} req/s")
        peak = max(r for _, r in s.window_rates)
        for start, r in s.window_rates:
            bar = "#" * round(30 * r / peak) if peak else ""
            out.append(f"    from {start:>9.1f} s  {r:>9.2f} req/s  {bar}")
        if s.burstiness is not None:
            kind = (
                "bursty"
                if s.burstiness > 1.2
                else "regular"
                if s.burstiness < 0.8
                else "Poisson-like"
            )
            out.append(f"  burstiness (CV of gaps): {s.burstiness:.2f} ({kind}; 1 = Poisson)")
    out.append(
        f"  prefix sharing: {100 * s.prefix_share:.1f}% of prompt tokens in prefixes seen before"
    )
    if context:
        if s.too_long:
            shown = ", ".join(s.too_long[:5]) + (", …" if len(s.too_long) > 5 else "")
            out.append(
                f"  WARNING: {len(s.too_long)} requests need more than the {context}-token context "
                f"window (prompt + max_tokens): {shown}"
            )
        else:
            out.append(f"  every request fits a {context}-token context window")
    return "\n".join(out)
