"""Every output states the workload that was sent: the demo draws lognormal prompts and answer
lengths, and the headless summary, the text / Markdown / HTML / JSON reports and the TUI's
verdict screen (80×24) all say so, with the min, median and P99 measured on the requests —
checked here against the items the session file says were sent (the reports used to say
"input fixed:512 tokens; output fixed:160 tokens" about them)."""

from __future__ import annotations

import asyncio
import html
import json
import re

import numpy as np
import pytest

from abtui.cli import main
from abtui.report.export import write_report
from abtui.store.reader import SessionReader


def _stated(values) -> str:
    x = np.asarray(values, dtype=float)
    return f"min {x.min():,.0f} · median {np.median(x):,.0f} · P99 {np.percentile(x, 99):,.0f}"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wl")
    args = ["demo", "--requests", "40", "--rate", "20", "--time-scale", "4", "--seed", "3"]
    args += ["--name", "wl", "--sessions-dir", str(folder), "--headless", "--no-quality"]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(args)
    assert rc in (0, 3, 4)
    path = folder / "wl.duckdb"
    with SessionReader(path) as rd:
        sent = [i for i in rd.items() if "warmup" not in (i.tags or [])]
    assert len(sent) == 40
    prompts = _stated([i.n_input for i in sent])
    # the simulator generates max_tokens: both arms' outputs are the items' max_tokens
    outputs = _stated([i.max_tokens for i in sent] * 2)
    assert len({i.n_input for i in sent}) > 20  # not one fixed length
    return path, out.getvalue(), prompts, outputs, [i.n_input for i in sent]


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _says_what_was_sent(text: str, prompts: str, outputs: str) -> None:
    text = _flat(text)
    assert "prompts lognormal (median 512, σ 0.8), sent " + prompts + " tokens" in text, text
    assert "max_tokens lognormal (median 160, σ 0.6), generated " + outputs in text, text
    assert "fixed:512" not in text and "fixed 512" not in text


def test_headless_summary_states_the_sent_workload(demo_run, capsys):
    path, printed, prompts, outputs, _ = demo_run
    _says_what_was_sent(printed, prompts, outputs)
    assert main(["report", str(path)]) in (0, 3, 4)  # --format text: the same summary
    _says_what_was_sent(capsys.readouterr().out, prompts, outputs)


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_reports_state_the_sent_workload(demo_run, tmp_path, fmt):
    path, _, prompts, outputs, n_input = demo_run
    out = tmp_path / f"r.{fmt}"
    write_report(path, fmt, str(out))
    text = out.read_text(encoding="utf-8")
    if fmt == "json":
        wl = json.loads(text)["workload"]
        assert wl["input_dist"] == "lognormal:512:0.8" and wl["output_dist"] == "lognormal:160:0.6"
        got = [wl["prompt"][k] for k in ("min", "median", "p99")]
        assert got == pytest.approx([min(n_input), np.median(n_input), np.percentile(n_input, 99)])
        text = wl["text"]
    if fmt == "md":
        text = text.replace("\\_", "_")  # Markdown's escape of max_tokens
    if fmt == "html":
        text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    _says_what_was_sent(text, prompts, outputs)


def test_tui_verdict_screen_states_the_sent_workload_at_80x24(demo_run):
    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.verdict import VerdictScreen, load_verdict

    path, _, prompts, outputs, _ = demo_run
    data = load_verdict(path)

    async def drive() -> list[str]:
        app = AbtuiApp()
        async with app.run_test(size=(80, 24)) as pilot:
            await app.push_screen(VerdictScreen(data))
            await pilot.pause()
            slo = app.screen.query_one("#slo")
            slo.scroll_visible(animate=False)
            await pilot.pause()
            lines = [slo.render_line(y).text for y in range(slo.size.height)]
            await pilot.press("q")
        return lines

    lines = asyncio.run(drive())
    assert all(len(ln.rstrip()) <= 80 for ln in lines)
    _says_what_was_sent("\n".join(lines), prompts, outputs)
