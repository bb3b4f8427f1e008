"""Seeded synthetic workloads with realistic shapes: lognormal lengths, bursty arrivals.

Chat traffic is not 512-in / 128-out at a constant rate: prompt and answer lengths are skewed
(a long tail of long prompts), and requests come in bursts. :func:`chat_items` builds such a
workload from a :class:`ChatShape` and a seed; the same seed gives the same items and arrival
offsets, so every arm, and every rerun, sees the same workload.

- Lengths: lognormal with the given median and log-space sigma, clamped to ``[lo, hi]``
  (:func:`lognormal_lengths`).
- Arrivals: gamma-distributed gaps with mean ``1/rate`` and coefficient of variation ``cv``
  (:func:`gamma_offsets`): ``cv = 1`` is a Poisson process, ``cv > 1`` is burstier (requests
  bunch up, then gaps), ``cv < 1`` more regular.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from abtui import limits
from abtui.client.items import Item, synthetic_prompt
from abtui.errors import UsageError


@dataclass(frozen=True, slots=True)
class ChatShape:
    """Length and arrival distributions of a chat-like workload."""

    input_median: int = 512  # prompt tokens, median
    input_sigma: float = 0.8  # lognormal sigma of prompt lengths (P90 ≈ 2.8 × median)
    input_range: tuple[int, int] = (16, 8192)
    output_median: int = 160  # max_tokens, median
    output_sigma: float = 0.6  # lognormal sigma of output lengths (P90 ≈ 2.2 × median)
    output_range: tuple[int, int] = (8, 1024)
    cv: float = 1.5  # arrival gaps' coefficient of variation (1 = Poisson)

    def describe(self) -> str:
        return (
            f"lognormal prompts median {self.input_median} tokens (σ {self.input_sigma:g}), "
            f"outputs median {self.output_median} (σ {self.output_sigma:g}), "
            f"gamma arrivals cv {self.cv:g}"
        )

    def dists(self) -> tuple[str, str]:
        """The prompt and ``max_tokens`` distributions in the spec's grammar (the clamp to
        ``input_range`` / ``output_range`` aside), for a spec that states what is sent."""
        return (
            f"lognormal:{self.input_median}:{self.input_sigma:g}",
            f"lognormal:{self.output_median}:{self.output_sigma:g}",
        )


def lognormal_lengths(
    n: int, median: int, sigma: float, lo: int, hi: int, rng: np.random.Generator
) -> list[int]:
    """``n`` integer lengths, lognormal around ``median``, clamped to ``[lo, hi]``."""
    if not (median >= 1 and sigma >= 0 and 1 <= lo <= hi):
        raise UsageError(f"bad length distribution: median {median}, sigma {sigma}, [{lo}, {hi}]")
    x = rng.lognormal(np.log(median), sigma, size=n)
    return np.clip(np.rint(x), lo, hi).astype(int).tolist()


def gamma_offsets(n: int, rate: float, cv: float, rng: np.random.Generator) -> list[float]:
    """Arrival offsets (s) of ``n`` requests at mean ``rate`` req/s; the first at 0."""
    if not (rate > 0 and cv > 0):
        raise UsageError(f"arrivals need rate > 0 and cv > 0, got rate {rate}, cv {cv}")
    if n <= 0:
        return []
    shape = 1.0 / (cv * cv)
    gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps).tolist()


def chat_items(n: int, rate: float, seed: int, shape: ChatShape | None = None) -> list[Item]:
    """``n`` chat-like items at mean ``rate`` req/s (see the module docstring)."""
    shape = shape or ChatShape()
    rng = np.random.default_rng(seed)
    n_in = lognormal_lengths(n, shape.input_median, shape.input_sigma, *shape.input_range, rng)
    n_out = lognormal_lengths(n, shape.output_median, shape.output_sigma, *shape.output_range, rng)
    offsets = gamma_offsets(n, rate, shape.cv, rng)
    words = random.Random(seed)
    return [
        Item(
            index=i,
            id=f"i{i}",
            arrival_s=offsets[i],
            # the index first: no two prompts share a prefix by accident (prefix caching)
            prompt=f"{i} " + synthetic_prompt(max(1, n_in[i] - 1), words),
            max_tokens=n_out[i],
            n_input=n_in[i],
        )
        for i in range(n)
    ]


# ---------------------------------------------------------------- length distributions

DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal", "trace")
MAX_LENGTH = limits.MAX_TOKENS  # sampled lengths are clipped into the limit table's range


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution: ``fixed:N``, ``uniform:LO:HI``, ``normal:MEAN:SD``,
    ``lognormal:MEDIAN:SIGMA`` or ``trace`` (sampled, with replacement, from ``values``)."""

    kind: str
    a: float = 0.0
    b: float = 0.0
    values: tuple[int, ...] = ()

    def sample(self, n: int, rng: np.random.Generator) -> list[int]:
        if self.kind == "fixed":
            x = np.full(n, self.a)
        elif self.kind == "uniform":
            x = rng.integers(int(self.a), int(self.b) + 1, size=n)
        elif self.kind == "normal":
            x = rng.normal(self.a, self.b, size=n)
        elif self.kind == "lognormal":
            x = rng.lognormal(np.log(self.a), self.b, size=n)
        else:
            x = rng.choice(np.asarray(self.values), size=n)
        return np.clip(np.rint(x), 1, MAX_LENGTH).astype(int).tolist()


def parse_length_dist(text: str, where: str, *, output: bool = False) -> LengthDist:
    """``lognormal:512:0.8`` → a :class:`LengthDist`; ``trace:FILE`` reads a workload file's
    prompt lengths (or its ``max_tokens`` when ``output``). Errors name ``where``."""
    from abtui.errors import SpecError

    kind, _, rest = text.strip().partition(":")
    hint = "fixed:N, uniform:LO:HI, normal:MEAN:SD, lognormal:MEDIAN:SIGMA or trace:FILE"
    if kind == "trace":
        if not rest:
            raise SpecError(f"{where}: trace needs a file, as trace:FILE", hint)
        from abtui.workload.jsonl import read_workload

        wl = read_workload(rest, skip_bad=True)
        vals = [it.max_tokens if output else (it.n_input or 1) for it in wl.items]
        return LengthDist("trace", values=tuple(vals))
    if kind not in DISTRIBUTIONS:
        raise SpecError(f"{where}: unknown length distribution {kind!r}", hint)
    try:
        args = [float(x) for x in rest.split(":")] if rest else []
    except ValueError:
        raise SpecError(f"{where}: {text!r} has a parameter that is not a number", hint) from None
    need = 1 if kind == "fixed" else 2
    if len(args) != need:
        raise SpecError(f"{where}: {kind} takes {need} number(s), got {text!r}", hint)
    a, b = (args + [0.0])[:2]
    length = "workload.length"
    rows = {
        "fixed": (length,),
        "uniform": (length, length),
        "normal": (length, "workload.length_sd"),
        "lognormal": (length, "workload.length_sigma"),
    }[kind]
    try:
        for row, v in zip(rows, args, strict=True):
            limits.check(row, v, f"{kind}'s {'length' if row == length else 'spread'}")
    except limits.OutOfRange as e:
        raise SpecError(f"{where}: {text!r}: {e}", hint) from None
    if kind == "uniform" and a > b:
        raise SpecError(f"{where}: {text!r} is not a valid {kind} length distribution", hint)
    return LengthDist(kind, a, b)


def shaped_items(
    n: int,
    offsets: list[float],
    input_dist: LengthDist,
    output_dist: LengthDist,
    seed: int,
    prefix_groups: int = 0,
    prefix_tokens: int = 0,
    first_index: int = 0,
) -> list[Item]:
    """``n`` items with lengths from the distributions; with ``prefix_groups`` = G, item i's
    prompt starts with group (i mod G)'s ``prefix_tokens``-token prefix (identical text within a
    group, different across groups) and continues with its own text, its index first."""
    maker = ShapedItems(
        n, offsets, input_dist, output_dist, seed, prefix_groups, prefix_tokens, first_index
    )
    return [maker.item(k) for k in range(n)]


class ShapedItems:
    """The items of :func:`shaped_items`, made one at a time (``item(k)``: the k-th, the same
    text whichever others are made), so a session can stream them without holding them all."""

    def __init__(
        self,
        n,
        offsets,
        input_dist,
        output_dist,
        seed,
        prefix_groups=0,
        prefix_tokens=0,
        first_index=0,
        task=None,
    ) -> None:
        from abtui.workload.jsonl import PromptSynth

        rng = np.random.default_rng(seed)
        self.n_in = input_dist.sample(n, rng)
        self.n_out = output_dist.sample(n, rng)
        self.offsets = offsets
        self.synth = PromptSynth(seed)
        self.groups, self.prefix_tokens, self.first = prefix_groups, prefix_tokens, first_index
        self.task, self.seed = task, seed

    def item(self, k: int) -> Item:
        i = self.first + k
        n_in = self.n_in[k]
        if self.task is not None:  # a real instruction (abtui.workload.tasks); its own length
            from abtui.workload.tasks import task_prompt

            prompt = task_prompt(self.task, self.seed, f"i{i}", n_in)
            return Item(
                index=i,
                id=f"i{i}",
                arrival_s=self.offsets[k],
                prompt=prompt,
                max_tokens=self.n_out[k],
                n_input=len(prompt.split()),
            )
        prefix = ""
        own = n_in
        # the prefix is part of the prompt length; at least one token is the item's own
        plen = min(self.prefix_tokens, n_in - 1) if self.groups > 0 else 0
        if plen > 0:
            prefix = " ".join(self.synth.block(k % self.groups, self.prefix_tokens)[:plen]) + " "
            own = n_in - plen
        return Item(
            index=i,
            id=f"i{i}",
            arrival_s=self.offsets[k],
            prompt=prefix + self.synth.prompt(f"i{i}", own),
            max_tokens=self.n_out[k],
            n_input=n_in,
        )
