"""End to end: quality suites through `abtui run` against two simulated endpoints whose quality
faces differ (int4 weights + fp8 KV degrade long-context retrieval) or are identical."""

from __future__ import annotations

import io
import json

from rich.console import Console

from abtui.cli import main
from abtui.report.export import write_report
from abtui.sim.engine import SimConfig
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader

BASE = "h100:llama-3.1-8b:bf16"  # a 128k-context model: haystacks up to quality.max_length


def _spec(tmp_path, name, a, b, quality: str) -> str:
    # These tests are about the quality gates. Two simulator processes' 12-request latency rows
    # on a shared CPU can differ for real (a 2 ms TTFT +29 % [+8, +98] once, an identical-variant
    # run NO-GO), so δ = 90 % keeps latency from deciding here; the verdict is the gates'.
    p = tmp_path / f"{name}.toml"
    p.write_text(
        f"""
name = "{name}"
[[arms]]
name = "base"
url = "{a}"
[[arms]]
name = "cand"
url = "{b}"
[workload]
requests = 12
input_tokens = 16
output_tokens = 8
[load]
rate = 20
[request]
ignore_eos = true  # the load test's setting; quality requests stop naturally anyway
[store]
dir = "{tmp_path}"
[policy]
delta = 0.9
delta_tail = 0.9
[quality]
{quality}
"""
    )
    return str(p)


def _sims(cand: str):
    opts = lambda p: PresetOptions(p, time_scale=200)  # noqa: E731
    return SimProcess(SimConfig(seed=3, preset=opts(BASE))), SimProcess(
        SimConfig(seed=3, preset=opts(cand))
    )


def _pair(path):
    with SessionReader(path) as rd:
        return rd.quality(), rd.verdicts()[-1]["result"]["pairs"][0]


def test_degraded_long_context_candidate_fails_the_quality_gate(tmp_path, capsys):
    sa, sb = _sims("h100:llama-3.1-8b:int4:kv=fp8")
    with sa as a, sb as b:
        spec = _spec(
            tmp_path,
            "degraded",
            a.url,
            b.url,
            'suites = ["niah", "keys", "exact"]\nper_cell = 6\nmax_length = 32768',
        )
        rc = main(["run", spec, "--headless"])
    out = capsys.readouterr().out
    assert rc == 3, out
    rows, pair = _pair(tmp_path / "degraded.duckdb")
    assert pair["result"] == "NO-GO"
    reasons = " ".join(pair["reasons"])
    assert "quality: keys accuracy" in reasons and "dropped beyond the −1 pp margin" in reasons
    assert "worst at 32k" in reasons
    q = pair["quality"]
    keys = next(s for s in q["suites"] if s["suite"] == "keys")
    assert keys["hi"] < 0 and keys["c"] == 0 and keys["b"] > 0  # one draw per prompt: B ⊂ A
    long = [x for x in q["buckets"] if x["suite"] == "keys" and x["bucket"] == "32k"][0]
    short = [x for x in q["buckets"] if x["suite"] == "keys" and x["bucket"] == "1k"][0]
    assert long["delta"] < short["delta"]
    # one row per arm × item, with the output, natural stop despite ignore_eos
    n_items = len({r["item"] for r in rows})
    assert len(rows) == 2 * n_items
    details = [json.loads(r["detail"]) for r in rows]
    assert all(d["finish_reason"] == "stop" for d in details)
    assert all(
        r["correct"] == (d["references"][0] in d["output"])
        for r, d in zip(rows, details, strict=True)
    )
    # the endpoints were asked and timed first: chat (the simulator serves it), the plan said
    assert all(d["api"] == "chat" for d in details)
    with SessionReader(tmp_path / "degraded.duckdb") as rd:
        plan = rd.meta()["quality_plan"]
        events = [e["message"] for e in rd.events() if e["kind"] == "quality"]
    assert plan["api"] == "chat" and plan["api_why"] == "every arm: it answers chat requests"
    assert plan["lengths"] == [1024, 2048, 4096, 8192, 16384, 32768] and plan["left_out"] == []
    assert plan["tokens_per_word"] == 1.0 and plan["cost"]["b"] >= 0
    assert any(m.startswith(f"{n_items} items per arm, chat (every arm") for m in events)
    # the simulator's (simulated) logprobs: int4 weights raise the fixed text's perplexity
    # (tests/unit/test_quality_logprobs.py checks these lines, and the unsupported case, in detail)
    assert q["ppl"]["cand"]["ppl"] > q["ppl"]["base"]["ppl"]
    assert "logprob agreement on base's greedy continuation" in out
    # the headless summary and the reports show the quality section
    assert "quality (paired items, greedy):" in out and "FAIL (≥ −1 pp)" in out
    for fmt in ("md", "html", "json"):
        dest = tmp_path / f"r.{fmt}"
        write_report(tmp_path / "degraded.duckdb", fmt, str(dest))
        text = dest.read_text()
        assert "keys" in text and (
            "FAIL" in text if fmt != "json" else '"passed": false' in text
        ), fmt
    assert "quality: keys accuracy" in _tui_verdict_text(tmp_path / "degraded.duckdb")


def _tui_verdict_text(path) -> str:
    """The TUI's verdict screen on the saved session: its banner and quality section."""
    import asyncio
    import time

    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.verdict import VerdictScreen

    async def drive() -> str:
        app = AbtuiApp(session=path)
        async with app.run_test(size=(160, 48)) as pilot:
            t_end = time.monotonic() + 120
            while time.monotonic() < t_end and not (
                isinstance(app.screen, VerdictScreen) and app.screen.query("#banner")
            ):  # pushed before its widgets mount: wait for them
                await pilot.pause(0.1)
            banner = io.StringIO()  # the banner's renderable (reasons as bullets), as text
            Console(file=banner, width=160, color_system=None).print(
                app.screen.query_one("#banner").content
            )
            texts = [banner.getvalue()]
            chart = app.screen.query_one("#quality-0")  # the quality table, as the screen shows it
            app.screen.query_one("VerticalScroll").scroll_to_widget(chart, animate=False, top=True)
            await pilot.pause()
            await pilot.pause()
            texts += [s.text.rstrip() for s in app.screen._compositor.render_strips()]
            await pilot.press("q")
        return "\n".join(texts)

    text = asyncio.run(drive())
    assert "FAIL (≥ −1 pp)" in text and "32k" in text
    return text


def test_identical_variants_pass_the_gate_user_suite_included(tmp_path, capsys):
    suite = tmp_path / "mine.jsonl"
    suite.write_text(
        '{"id": "a", "prompt": "Repeat this code exactly: KLM-042", "reference": "KLM-042", "scorer": "word"}\n'
        '{"id": "b", "prompt": "What is the capital of Peru? Answer with the city only.", "reference": "Lima", "scorer": "word"}\n'
    )
    sa, sb = _sims(BASE)
    with sa as a, sb as b:
        # a 25 pp margin: 4 haystacks per cell (30-50 items a suite) cannot show 1 pp
        spec = _spec(
            tmp_path, "same", a.url, b.url, "per_cell = 4\nmax_length = 8192\nmargin = 0.25"
        )
        rc = main(
            ["run", spec, "--headless", "--quality", "niah,exact", "--quality-file", str(suite)]
        )
    out = capsys.readouterr().out
    assert rc in (0, 4), out
    rows, pair = _pair(tmp_path / "same.duckdb")
    q = pair["quality"]
    assert {s["suite"] for s in q["suites"]} == {"niah", "exact", "mine"}
    gates = {g["suite"]: g for g in q["gates"]}
    assert gates["niah"]["passed"] and gates["exact"]["passed"] and not q["no_go"], [
        (s["suite"], s["n"], s["lo"]) for s in q["suites"]
    ]
    assert all(s["b"] == 0 and s["c"] == 0 and s["delta"] == 0 for s in q["suites"])
    # the user's 2-item suite: no flip, but 2 items never show non-inferiority
    assert gates["mine"]["state"] == "inconclusive" and rc == 4
    assert [r for r in pair["reasons"] if "quality" in r] == q["undecided"]
    assert "mine" in q["undecided"][0] and "about 30 items would decide" in q["undecided"][0]
    mine = [json.loads(r["detail"]) for r in rows if json.loads(r["detail"])["suite"] == "mine"]
    assert len(mine) == 4 and all(d["output"].strip() in ("KLM-042", "Lima") for d in mine)


def test_a_context_too_small_for_a_haystack_skips_the_suites_and_keeps_the_run(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "hidden_size": 2048,
                "num_hidden_layers": 16,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "intermediate_size": 8192,
                "vocab_size": 128256,
                "max_position_embeddings": 1024,
            }
        )
    )
    opts = PresetOptions("h100:tiny:bf16", model_config=str(cfg), time_scale=200)
    with (
        SimProcess(SimConfig(seed=3, preset=opts)) as a,
        SimProcess(SimConfig(seed=3, preset=opts)) as b,
    ):
        spec = _spec(tmp_path, "small", a.url, b.url, 'suites = ["niah"]')
        rc = main(["run", spec, "--headless"])
    captured = capsys.readouterr()
    assert rc in (0, 4), captured.out
    assert (
        "quality suites not run" in captured.err and "too small for the retrieval" in captured.err
    )
    with SessionReader(tmp_path / "small.duckdb") as rd:
        assert rd.meta()["status"] == "complete" and rd.quality() == []
