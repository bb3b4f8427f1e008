"""Reasoning and answer TPOT in the live panes, the compare view and ``abtui open``: a real
`abtui run` against simulators with ``--reasoning-tokens`` (loopback), then its session file
replayed. The TPOT histogram's title adds ``TPOT(r)`` and ``TPOT(a)`` (as TTFT's adds TTFO) at
80×24 and 160×48, the compare view's table gets their columns, and the figures are the
catalogue's for the same stored requests (abtui.metrics.catalogue); a run without reasoning
shows neither."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re

import numpy as np
import pytest
from test_tui_fit import _panes
from tui_fixtures import compare_view_lines

from abtui.cli import main
from abtui.client.records import RequestRecord
from abtui.metrics.catalogue import per_request_values
from abtui.metrics.live import LiveArm
from abtui.metrics.table import NA
from abtui.metrics.windows import completion_ns
from abtui.runner.live_replay import Replay
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader
from abtui.tui.app import AbtuiApp
from abtui.tui.screens.open import OpenScreen
from abtui.tui.widgets.charts import fmt_s
from abtui.verdict.saved import session_verdict

REASON = 8  # reasoning tokens before each answer


def _session(tmp, name: str, reasoning: int):
    with (
        SimProcess(SimConfig(ttft_ms=5, itl_ms=4, reasoning_tokens=reasoning, seed=1)) as a,
        SimProcess(SimConfig(ttft_ms=4, itl_ms=2, reasoning_tokens=reasoning, seed=2)) as b,
    ):
        args = ["run", "--baseline", a.url, "--candidate", b.url, "--api", "chat"]
        args += ["--rate", "40", "--requests", "30", "--output-tokens", "16", "--warmup", "1"]
        args += ["--name", name, "--sessions-dir", str(tmp), "--headless"]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            rc = main(args)
    assert rc in (0, 3, 4)
    return tmp / f"{name}.duckdb"


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tpot_split")
    return _session(tmp, "think", REASON), _session(tmp, "plain", 0)


def _ms(text: str, label: str) -> list[float]:
    return [float(v) for v in re.findall(rf"{re.escape(label)} ?▲(?:P50 )?([\d.]+)ms", text)]


def _catalogue_p50(path, arm: int, metric: str) -> float:
    t = SessionReader(path).request_table()
    t = t.select((t.arm == arm) & t.ok)
    return float(np.nanmedian(per_request_values(t, metric)))


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_panes_show_reasoning_and_answer_tpot(sessions, size):
    think, plain = sessions
    lines, _ = asyncio.run(_panes(OpenScreen(Replay(think), "stored session, complete"), size))
    heads = [ln for ln in lines if "TPOT ▲" in ln]
    assert heads, "\n".join(lines)
    r_label, a_label = ("TPOT(r)", "TPOT(a)") if size[0] > 80 else ("r", "a")
    for h in heads:
        assert _ms(h, r_label) and _ms(h, a_label), h
    # each arm's figures: the running estimates of the catalogue's (binned: within ≈ 6 %)
    text = "\n".join(lines)
    for arm in (0, 1):
        for metric, label in (("tpot_reasoning", r_label), ("tpot_answer", a_label)):
            want = _catalogue_p50(think, arm, metric) * 1e3
            got = [v for h in heads for v in _ms(h, label)]
            assert any(abs(v / want - 1) < 0.07 for v in got), (metric, want, text)
    lines, _ = asyncio.run(_panes(OpenScreen(Replay(plain), "stored session, complete"), size))
    plain_text = "\n".join(lines)
    assert "TPOT ▲" in plain_text and "TPOT(r)" not in plain_text and "r▲" not in plain_text


def _fed(path, arm: int) -> LiveArm:
    """A LiveArm fed the stored requests of ``arm`` one by one, as the live run's observer
    feeds it its records."""
    t = SessionReader(path).request_table().for_arm(arm)
    live = LiveArm()

    def val(col, k):
        return None if col[k] == NA else int(col[k])

    for k in np.argsort(completion_ns(t), kind="stable"):
        first, last = int(t.first_token_ns[k]), int(t.last_token_ns[k])
        live.add(
            RequestRecord(
                arm=arm,
                item=int(t.item[k]),
                scheduled_ns=int(t.scheduled_ns[k]),
                dispatched_ns=int(t.dispatched_ns[k]),
                connect_ns=int(t.connect_ns[k]),
                chunk_ns=[first, last] if NA not in (first, last) else [],
                status=str(t.status[k]),
                n_output=val(t.n_output, k),
                first_output_ns=val(t.first_output_ns, k),
                reasoning_tokens=val(t.reasoning_tokens, k),
            )
        )
    return live


def test_live_figures_follow_the_catalogue(sessions):
    """The running histograms (before the verdict), of the live run and of its replay, are fed
    by the catalogue's formulas: the same bins both ways, medians within a bin (≈ 6 %) of the
    exact ones."""
    think, plain = sessions
    arms = Replay(think).end_state()
    for arm in (0, 1):
        v, fed = arms[arm].live.view(), _fed(think, arm).view()
        for metric in ("tpot_reasoning", "tpot_answer"):
            h, h_fed = getattr(v, metric), getattr(fed, metric)
            assert h is not None and np.array_equal(h.counts, h_fed.counts), metric
            want = _catalogue_p50(think, arm, metric)
            assert abs(h.p50 / want - 1) < 0.07, (metric, h.p50, want)
            assert h.n == 30  # every measured request: each reasoned and answered
    for arm in (0, 1):  # without reasoning neither is shown, live or replayed
        fed, v = _fed(plain, arm).view(), Replay(plain).end_state()[arm].live.view()
        assert fed.tpot_reasoning is fed.tpot_answer is v.tpot_reasoning is v.tpot_answer is None


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_compare_view_table_has_split_tpot(sessions, size):
    """The compare view's table has TPOT(r) and TPOT(a) P50/P99 columns (at 80 columns in a
    second block under the first), each arm's P50 the catalogue's (binned); not without
    reasoning."""
    think, plain = sessions

    lines = compare_view_lines(think, size)
    k, head = next((k, ln) for k, ln in enumerate(lines) if "TPOT(r) P50" in ln)
    assert "TPOT(a) P50" in head and "tok/s" in "".join(lines[k - 3 : k + 1]), "\n".join(lines)
    at = head.index("TPOT(r) P50")
    for arm, row in enumerate(lines[k + 1 : k + 3]):
        ms = [float(v) for v in re.findall(r"([\d.]+)ms", row[at:])]  # r P50, P99, a P50, P99
        for metric, got in (("tpot_reasoning", ms[0]), ("tpot_answer", ms[2])):
            want = _catalogue_p50(think, arm, metric) * 1e3
            assert abs(got / want - 1) < 0.07, (metric, got, want, row)
    text = "\n".join(compare_view_lines(plain, size))
    assert "TPOT P50" in text and "TPOT(r)" not in text and "TPOT(a)" not in text


def test_verdict_figures_in_the_panes(sessions):
    """Once the verdict is in, the panes show its whole-run reasoning and answer TPOT (the
    catalogue's rows of the comparison), as they do TTFT's and TTFO's."""
    think, _ = sessions
    pair = session_verdict(think).verdict.pairs[0]
    want = {}
    for metric in ("tpot_reasoning", "tpot_answer"):
        e = pair.comparison.get(f"{metric}.p50")
        want[metric] = (fmt_s(e.a), fmt_s(e.b))

    async def drive():
        app = AbtuiApp()
        async with app.run_test(size=(80, 24)) as pilot:
            await app.push_screen(OpenScreen(Replay(think), "stored session, complete"))
            await pilot.pause()
            app.screen.set_verdict([pair])
            for _ in range(3):
                await pilot.pause()
            text = [s.text for s in app.screen._compositor.render_strips()]
            await pilot.press("q")
        return text

    heads = [ln for ln in asyncio.run(drive()) if "TPOT ▲" in ln]
    assert heads
    for side in (0, 1):  # the baseline's pane on the left, the candidate's on the right
        r50, a50 = want["tpot_reasoning"][side], want["tpot_answer"][side]
        assert any(f"r▲{r50} a▲{a50}" in h.split("││")[side] for h in heads), (r50, a50, heads)
