"""Perplexity on llama.cpp, engine-side: its own ``llama-perplexity`` tool (same source tree as
``llama-server``) on a fixed text, with an arm's model and cache flags.

``llama-server`` cannot score a prompt: ``/v1/completions`` takes ``echo`` but returns logprobs
for the generated tokens only (as does ``n_probs`` on ``/completion``), so abtui's endpoint PPL
(:mod:`abtui.quality.ppl`) reports it as not supported. ``llama-perplexity`` computes the
standard figure instead: the text is cut into ``ctx``-token chunks, each chunk is evaluated in
one pass and the second half of its tokens is scored, each against everything before it in the
chunk. The K and V of a chunk's first half are written to the KV cache and read back by the
second half's attention, so ``-ctk/-ctv`` quantisation is in the figure (unlike an engine
whose prefill attends to the fresh, unquantised K/V).

::

    r = perplexity(model, ctx=512, extra_args=("-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0"))
    r.ppl, r.stderr, r.tokens   # 26.15, 3.26, 510

Two arms' figures on the same text are strongly correlated (the same hard tokens are hard for
both), so their ± say little about the difference. :func:`compare` runs the tool's own paired
mode: the baseline saves its token distributions (``--kl-divergence-base``), the candidate is
scored against them (``--kl-divergence``): PPL(cand)/PPL(base) with its uncertainty, the mean
KL divergence and how often the top token is the same.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from abtui.engine.ppl_text import PPL_TEXT
from abtui.engine.tinymodel import EngineError

_FINAL = re.compile(r"Final estimate: PPL = ([0-9.]+|nan|inf) \+/- ([0-9.]+|nan|inf)")
_CHUNKS = re.compile(r"calculating perplexity over (\d+) chunks")
_TOO_SHORT = re.compile(r"you need at least (\d+) tokens.*\n.*tokenizes to only (\d+) tokens")


@dataclass(frozen=True, slots=True)
class Perplexity:
    ppl: float
    stderr: float  # llama-perplexity's own ± (from the per-token log-likelihood spread)
    chunks: int
    ctx: int
    seconds: float
    argv: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        """Tokens scored: the second half of each chunk, less the last (it predicts nothing)."""
        return self.chunks * (self.ctx - 1 - self.ctx // 2)


_PAIRED = {
    "ratio": re.compile(r"Mean PPL\(Q\)/PPL\(base\)\s*:\s*(\S+)\s*±\s*(\S+)"),
    "ppl": re.compile(r"Mean PPL\(Q\)\s*:\s*(\S+)\s*±\s*(\S+)"),
    "ppl_base": re.compile(r"Mean PPL\(base\)\s*:\s*(\S+)\s*±\s*(\S+)"),
    "kld": re.compile(r"Mean\s+KLD:\s*(\S+)\s*±\s*(\S+)"),
    "same_top": re.compile(r"Same top p:\s*(\S+)\s*±\s*(\S+)\s*%"),
}


@dataclass(frozen=True, slots=True)
class PerplexityComparison:
    """A candidate's PPL against a baseline's, paired token by token on the same text."""

    base: Perplexity
    cand: Perplexity
    ratio: float  # PPL(cand) / PPL(base)
    ratio_err: float  # its ± (one standard error, from the paired per-token log-likelihoods)
    kld: float  # mean KL divergence(base ‖ cand) per scored token, nats
    kld_err: float
    same_top: float  # fraction of scored tokens whose most likely next token is the same
    same_top_err: float

    def line(self) -> str:
        return (
            f"PPL {self.base.ppl:.3f} → {self.cand.ppl:.3f} (×{self.ratio:.4f} ± "
            f"{self.ratio_err:.4f}), KLD {self.kld:.4f} ± {self.kld_err:.4f} nats, same top "
            f"token {self.same_top:.1%}"
        )


def parse_output(text: str) -> tuple[float, float, int] | None:
    """``(PPL, ±, chunks)`` from llama-perplexity's output, else None."""
    m = _FINAL.search(text)
    if not m:
        return None
    c = _CHUNKS.search(text)
    return float(m[1]), float(m[2]), int(c[1]) if c else 0


def perplexity(
    model: Path,
    *,
    ctx: int = 512,
    extra_args: tuple[str, ...] = (),
    text: str = PPL_TEXT,
    threads: int = 1,
    binary: Path | None = None,
    timeout_s: float = 600.0,
    _paired: dict | None = None,
) -> Perplexity:
    """Run ``llama-perplexity`` on ``text`` with ``model`` and ``extra_args`` (an arm's cache
    and attention flags: ``-fa on -ctk q4_0 -ctv q4_0``…); raises :class:`EngineError` with the
    tool's own last lines when it gives no estimate."""
    from abtui.engine.build import require_tool

    tool = binary or require_tool("llama-perplexity")
    with tempfile.TemporaryDirectory(prefix="abtui-ppl-") as tmp:
        f = Path(tmp) / "text.txt"
        f.write_text(text, encoding="utf-8")
        argv = [
            str(tool),
            "-m",
            str(model),
            "-f",
            str(f),
            "-c",
            str(ctx),
            "-t",
            str(threads),
            "-tb",
            str(threads),
            *extra_args,
        ]
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise EngineError(
                f"llama-perplexity on {model.name} ran past {timeout_s:g} s",
                f"run it by hand: {' '.join(argv)}",
            ) from None
        seconds = time.monotonic() - t0
    out = p.stdout + "\n" + p.stderr
    got = parse_output(out)
    if _paired is not None:  # --kl-divergence: no "Final estimate", a statistics block instead
        got = None
        vals = {k: rx.search(out) for k, rx in _PAIRED.items()}
        if all(vals.values()):
            _paired.update({k: (float(m[1]), float(m[2])) for k, m in vals.items()})  # type: ignore[index]
            c = re.search(r"computing over (\d+) chunks", out)
            got = (_paired["ppl"][0], _paired["ppl"][1], int(c[1]) if c else 0)
    if got is None:
        if m := _TOO_SHORT.search(out):
            raise EngineError(
                f"the text is {m[2]} tokens for {model.name}: a {ctx}-token "
                f"context needs at least {m[1]}",
                "give a longer text or a smaller ctx",
            )
        raise EngineError(
            f"llama-perplexity on {model.name} gave no estimate (exit {p.returncode}): "
            f"{out.strip()[-1500:]}",
            f"run it by hand: {' '.join(argv)}",
        )
    ppl, err, chunks = got
    return Perplexity(ppl, err, chunks, ctx, seconds, argv)


def compare(
    base_model: Path,
    cand_model: Path,
    *,
    base_args: tuple[str, ...] = (),
    cand_args: tuple[str, ...] = (),
    ctx: int = 512,
    text: str = PPL_TEXT,
    threads: int = 1,
    binary: Path | None = None,
    timeout_s: float = 600.0,
) -> PerplexityComparison:
    """The baseline's PPL (saving its distributions), then the candidate's scored against them.
    Both models must share a vocabulary (quantisations of one model, cache settings)."""
    with tempfile.TemporaryDirectory(prefix="abtui-kld-") as tmp:
        logits = Path(tmp) / "base.kld"
        base = perplexity(
            base_model,
            ctx=ctx,
            text=text,
            threads=threads,
            binary=binary,
            timeout_s=timeout_s,
            extra_args=(*base_args, "--kl-divergence-base", str(logits)),
        )
        out: dict[str, tuple[float, float]] = {}
        cand = perplexity(
            cand_model,
            ctx=ctx,
            text=text,
            threads=threads,
            binary=binary,
            timeout_s=timeout_s,
            _paired=out,
            extra_args=(*cand_args, "--kl-divergence-base", str(logits), "--kl-divergence"),
        )
    return PerplexityComparison(
        base, cand, *out["ratio"], *out["kld"], out["same_top"][0] / 100, out["same_top"][1] / 100
    )
