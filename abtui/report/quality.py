"""The quality section of a pair's verdict, for every format: one row per suite (its gate) and
per length bucket, with accuracy per arm, Δacc and its CI, McNemar's p (Holm-adjusted), the flip
rate, and the warnings (a bucket that dropped while its suite passed). Next to the table, the
quality mode that ran (``quality.mode``, stored in the session's spec): ``separate`` (after the
load test) or ``interleaved`` (during it, so the load's latencies include the server's work on
the quality requests and compare only with sessions run in the same mode)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape as html_escape

from rich.cells import cell_len
from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from abtui.quality.gates import QualityVerdict, SuiteGate, pp
from abtui.quality.ppl import ppl_line
from abtui.report.untrusted import printable

COLUMNS = (
    "suite",
    "length",
    "n",
    "acc A",
    "acc B",
    "Δacc",
    "95% CI",
    "McNemar p (Holm)",
    "flip rate",
    "gate",
)


def _acc(x) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.1%}"


def _p(x) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.3g}"


def _entries(qual: QualityVerdict):
    """``(row, gate, is_suite)`` per table row: each suite (with its gate, if any), then its
    length buckets."""
    for s in qual.suites:
        yield s, qual.gate(s.suite), True
        for b in qual.buckets:
            if b.suite == s.suite:
                yield b, None, False


def _word(gate: SuiteGate) -> str:
    """``pass``, ``FAIL`` or ``undecided`` (neither shown: abtui.quality.gates)."""
    return {"pass": "pass", "fail": "FAIL"}.get(gate.state, "undecided")


def rows(qual: QualityVerdict) -> list[list[str]]:
    """Text cells, suites first (each followed by its buckets)."""
    out = []
    for r, g, is_suite in _entries(qual):
        gate = "" if g is None else f"{_word(g)} (≥ −{g.margin * 100:g} pp)"
        out.append(
            [
                r.suite,
                "all" if is_suite else r.bucket,
                str(r.n),
                _acc(r.acc_a),
                _acc(r.acc_b),
                pp(r.delta),
                f"[{pp(r.lo)}, {pp(r.hi)}]",
                f"{_p(r.p)} ({_p(r.p_holm)})",
                _acc(r.flip_rate),
                gate,
            ]
        )
    return out


SHORT_COLUMNS = (
    "suite",
    "len",
    "n",
    "acc A",
    "acc B",
    "Δacc (pp)",
    "95% CI (pp)",
    "p (Holm)",
    "flips",
    "gate",
)


def _num_pp(x) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x * 100:+.1f}"


def short_rows(qual: QualityVerdict) -> list[list[str]]:
    """:func:`rows` in fewer characters, column for column (headers :data:`SHORT_COLUMNS`), for
    a narrow screen: Δacc and its CI without the unit (the header says pp), Holm's p alone, the
    gate as its word (the margins: :func:`gate_rule`)."""
    out = []
    for r, g, is_suite in _entries(qual):
        out.append(
            [
                r.suite,
                "all" if is_suite else r.bucket,
                str(r.n),
                _acc(r.acc_a),
                _acc(r.acc_b),
                _num_pp(r.delta),
                f"[{_num_pp(r.lo)}, {_num_pp(r.hi)}]",
                _p(r.p_holm),
                _acc(r.flip_rate),
                "" if g is None else _word(g),
            ]
        )
    return out


def gate_rule(qual: QualityVerdict) -> str | None:
    """The gates' margins in words, for a table whose gate column is the bare word: ``gate: pass
    when the CI's lower bound ≥ −1 pp`` (one margin), or ``… ≥ −margin (exact 1 pp, niah 15
    pp)``. None when no suite has a gate."""
    margins = {g.suite: f"{g.margin * 100:g} pp" for g in qual.gates}
    if not margins:
        return None
    if len(set(margins.values())) == 1:
        return f"gate: pass when the CI's lower bound ≥ −{next(iter(margins.values()))}"
    each = ", ".join(f"{s} {m}" for s, m in margins.items())
    return f"gate: pass when the CI's lower bound ≥ −margin ({each})"


def notes(qual: QualityVerdict) -> list[str]:
    line = ppl_line(qual.ppl)
    out = [x for x in (line, qual.logprob_line) if x] + list(qual.warnings)
    if qual.unpaired:
        out.append(f"{qual.unpaired} items left out: their request failed in an arm")
    return out


@dataclass(frozen=True, slots=True)
class QualityMode:
    """The quality mode a session ran: ``separate`` or ``interleaved``, with, when interleaved,
    the quality requests of every arm and how many went while the load ran (None where
    unknown)."""

    mode: str
    requests: int | None = None
    sent_during_load: int | None = None

    def to_dict(self) -> dict:
        """The report's ``quality_mode`` (the counts only for an interleaved run)."""
        if self.mode != "interleaved":
            return {"mode": self.mode}
        return {
            "mode": self.mode,
            "requests": self.requests,
            "sent_during_load": self.sent_during_load,
        }


def mode_info(meta: dict) -> QualityMode | None:
    """The quality mode a session ran, from its stored meta (``quality_mode``, written when the
    quality items were done; else the spec's ``quality.mode``; ``quality_interleaved``: the
    counts). None when the session ran no quality suite."""
    if not isinstance(meta, dict):
        return None
    mode = meta.get("quality_mode")
    if mode is None:
        spec = meta.get("spec")
        q = spec.get("quality") if isinstance(spec, dict) else None
        if not isinstance(q, dict) or not (q.get("suites") or q.get("file")):
            return None
        mode = q.get("mode") or "separate"
    if str(mode) != "interleaved":
        return QualityMode(str(mode))
    il = meta.get("quality_interleaved")
    il = il if isinstance(il, dict) else {}
    return QualityMode(str(mode), il.get("rows"), il.get("sent_during_load"))


def mode_line(info: QualityMode | None) -> str | None:
    """One sentence saying which mode ran and what it means for the latencies."""
    if not info:
        return None
    mode = info.mode
    if mode == "separate":
        return (
            "quality mode: separate (the quality items were sent after the load test, on "
            "an otherwise idle endpoint; the latency figures are the load test's alone)"
        )
    if mode == "interleaved":
        n, during = info.requests, info.sent_during_load
        sent = (
            f"{during} of {n} quality requests were sent during the load test"
            if isinstance(n, int) and isinstance(during, int)
            else "the quality items were sent during the load test"
        )
        return (
            f"quality mode: interleaved ({sent}, at the same instants for every arm; the "
            "server served them alongside the measured requests, so the latencies compare "
            "only with sessions run in the same mode)"
        )
    return f"quality mode: {mode} (not a mode this abtui knows)"


def console_lines(qual: QualityVerdict | None, mode: QualityMode | None = None) -> list[str]:
    """Plain lines for the headless summary (a fixed-width table); ``mode``: :func:`mode_info`."""
    if not qual:
        return []
    table = [list(COLUMNS)] + rows(qual)
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    lines = ["  quality (paired items, greedy):"]
    if line := mode_line(mode):
        lines.append(f"    {line}")
    lines += [
        "    " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in table
    ]
    lines += [f"    {n}" for n in notes(qual)]
    return lines


def markdown(qual: QualityVerdict | None, esc, mode: QualityMode | None = None) -> list[str]:
    if not qual:
        return []
    lines = [""]
    if line := mode_line(mode):
        lines += [esc(line), ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|---|---|" + "--:|" * 7 + "---|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows(qual)]
    lines += [f"- {esc(n)}" for n in notes(qual)]
    return lines


def html(qual: QualityVerdict | None, mode: QualityMode | None = None) -> str:
    if not qual:
        return ""
    h = ["<h3>Quality</h3>"]
    if line := mode_line(mode):
        h.append(f'<p class="quality-mode">{html_escape(line)}</p>')
    h += ["<table><tr>" + "".join(f"<th>{html_escape(c)}</th>" for c in COLUMNS) + "</tr>"]
    h += ["<tr>" + "".join(f"<td>{html_escape(c)}</td>" for c in r) + "</tr>" for r in rows(qual)]
    h.append("</table>")
    h += [f'<p class="muted">{html_escape(n)}</p>' for n in notes(qual)]
    return "".join(h)


# The quality table's columns (indices into abtui.report.quality.COLUMNS) left out one group at
# a time while the table is wider than the screen: flip rate, p, n, the accuracies, the CI.
# Suite, length, Δacc and the gate's word stay.
QUALITY_LEFT_OUT = ((8,), (7,), (2,), (3, 4), (6,))
GATE_STYLE = {"pass": "green", "FAIL": "bold red"}


def _width(head: tuple[str, ...], cells: list[list[str]], keep: list[int]) -> int:
    """The width rich gives a table of the columns ``keep`` laid out as :func:`quality_table`
    does (one space each side of a cell, none at the outer edges)."""
    return sum(max(cell_len(r[i]) for r in [head, *cells]) for i in keep) + 2 * (len(keep) - 1)


def fitted_table(
    qual: QualityVerdict,
    mode: QualityMode | None,
    width: int,
    extra: int = 0,
    elsewhere: str | None = None,
) -> Group:
    """The pair's quality section for ``width`` columns: a title, the quality mode, the table,
    and the notes (sentences, wrapped). The report's table (abtui.report.quality.rows) where it
    fits; narrower, its short cells (``short_rows``; the gates' margins in the caption), less
    the columns of QUALITY_LEFT_OUT in turn until it fits, so that no row wraps at 80 columns.
    The caption says what was left out and from what width it shows (``extra``: the screen's
    columns beside the table, to state that width as the terminal's) or, for printed text (no
    terminal to widen), ``elsewhere``: where the full table is."""
    cells = [[printable(c) for c in r] for r in rows(qual)]
    head, every = COLUMNS, list(range(len(COLUMNS)))
    full = _width(head, cells, every)
    caption = []
    if full <= width:
        keep = every
    else:
        cells = [[printable(c) for c in r] for r in short_rows(qual)]
        head, keep, gone = SHORT_COLUMNS, every, []
        for group in QUALITY_LEFT_OUT:
            if _width(head, cells, keep) <= width:
                break
            keep = [i for i in keep if i not in group]
            gone.append(group)
        back, shown = [], list(keep)  # the columns come back in the reverse order
        for group in reversed(gone):
            shown = sorted(shown + list(group))
            back.append(
                f"{' and '.join(head[i] for i in group)} from {_width(head, cells, shown) + extra}"
            )
        caption = [
            gate_rule(qual),
            "p: McNemar's, Holm-adjusted" if 7 in keep else None,
        ]
        if elsewhere:  # printed: the columns left out are named, and where they are
            names = ", ".join(head[i] for g in gone for i in g)
            caption.append(f"left out: {names}; every column: {elsewhere}" if gone else None)
        else:
            caption.append(f"left out: {', '.join(back)} columns wide" if back else None)
            caption.append(f"the report's full table from {full + extra} columns")
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False, padding=(0, 1))
    for i in keep:
        t.add_column(escape(head[i]), no_wrap=True, justify="left" if i in (0, 1, 9) else "right")
    for r in cells:
        gate = Text(r[9], GATE_STYLE.get(r[9].split(" ")[0], ""))
        t.add_row(*[gate if i == 9 else Text(r[i]) for i in keep])
    if caption:
        t.caption, t.caption_justify = " · ".join(x for x in caption if x), "left"
    parts = [Text("quality (paired items, greedy)", "bold")]
    if line := mode_line(mode):
        parts.append(Text(line, "dim"))
    parts.append(t)
    if said := notes(qual):
        parts.append(Text("\n".join(printable(n) for n in said)))
    return Group(*parts)
