"""``[quality]`` in the spec (``--quality`` / ``--quality-file`` on the command line)."""

from __future__ import annotations

from dataclasses import dataclass, field

from abtui.errors import SpecError

API_SETTINGS = ("auto", "chat", "completions")  # quality.api (abtui.quality.sizing acts on it)

DEFAULT_MARGIN = 0.01  # non-inferiority: the lower CI bound of Δacc must be ≥ −1 pp to pass
MODES = ("separate", "interleaved")


@dataclass
class QualitySpec:
    suites: list = field(default_factory=list)
    """Built-in suites: ``niah``, ``keys``, ``exact`` (``--quality``)."""
    file: str | None = None
    """A user suite, JSON Lines (``--quality-file``)."""
    max_tokens: int = 32
    """Cap on each answer's tokens (greedy, natural stop)."""
    seed: int = 0
    """Seed of the built-in suites and of the requests' ``seed``."""
    per_cell: int = 3
    """Haystacks per context length (niah, keys); the exact suite has 4× as many pairs of items."""
    max_length: int | None = 32768
    """Longest haystack in tokens (also bounded by the smallest arm's context)."""
    concurrency: int = 4
    """Quality requests in flight per arm."""
    api: str = "auto"
    """How the items are sent (``--quality-api``): ``chat`` (messages, through the server's chat
    template: chat/instruct models), ``completions`` (a plain prompt that starts the answer: base
    models), or ``auto`` (the default): chat when every arm says it serves a model with a chat
    template, else completions (abtui.quality.sizing)."""
    budget_s: float = 600.0
    """Seconds the quality items may take (``--quality-budget``): the endpoints are timed first,
    and the retrieval grid's longest lengths are left out (said, with the time they would
    add) while the whole is expected to take longer; the shortest length is always run."""
    mode: str = "separate"
    """When the items are sent (``--quality-mode``). ``separate`` (the default): after the load
    test, on an otherwise idle endpoint, so they cannot perturb the latency samples.
    ``interleaved``: during the load test's measured phase, at evenly spaced offsets (the same
    for every arm), from a thread of the main process — quality under load (KV pressure,
    preemption). They are never rows of the ``requests`` table, so no latency, throughput or
    SLO figure counts them, but they do load the server alongside the measured requests: the
    latencies measured then include their effect. Needs ``load.schedule = "parallel"``."""
    margin: float = DEFAULT_MARGIN
    """Gate (0.01 = 1 pp): a suite passes when the lower 95% bound of Δacc is ≥ −margin on ≥ 30
    items; it fails (NO-GO) when it is shown worse than −margin; otherwise it is undecided and the
    pair cannot be GO (abtui.quality.gates)."""
    margins: dict = field(default_factory=dict)
    """Per-suite margins, e.g. ``{niah = 0.02}`` (the rest use ``margin``)."""

    @property
    def enabled(self) -> bool:
        return bool(self.suites or self.file)


def validate_quality(q: QualitySpec, source: str, load=None) -> None:
    """Check ``[quality]``; ``load`` (the spec's ``[load]``): the mode fits its schedule."""
    from abtui.quality.builtin import SUITES

    if q.mode not in MODES:
        raise SpecError(
            f"{source}: quality.mode must be one of {', '.join(MODES)}, got {q.mode!r}",
            "separate: after the load test; interleaved: during it",
        )
    if q.mode == "interleaved" and load is not None and load.schedule != "parallel":
        raise SpecError(
            f'{source}: quality.mode = "interleaved" needs load.schedule = "parallel", '
            f"got {load.schedule!r}",
            "arms that take turns share one GPU: one arm's quality items would load the "
            'other\'s turn; use quality.mode = "separate"',
        )

    for s in q.suites:
        if s not in SUITES:
            raise SpecError(
                f"{source}: quality.suites: unknown suite {s!r}",
                f"built-in suites: {', '.join(SUITES)}",
            )
    if q.file:  # a bad line fails now, not after the load test
        from abtui.quality.userfile import load

        load(q.file)
    if q.api not in API_SETTINGS:
        raise SpecError(
            f"{source}: quality.api must be one of {', '.join(API_SETTINGS)}, got {q.api!r}",
            "chat: chat/instruct models; completions: base models; auto: ask the endpoints",
        )
    # the numbers (margins, budget_s, max_tokens …) were checked first: abtui.spec.bounds
