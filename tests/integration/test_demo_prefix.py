"""`abtui demo --scenario prefix-caching` headless, small and time-scaled: prefix caching off
against on, the shared-prompt workload, the diagnosis's prefix-cache lines and the reports'
``prefix_cache`` figures."""

from __future__ import annotations

import json

import pytest

from abtui.cli import main
from abtui.demo_prefix import SYSTEM_TOKENS, SYSTEMS, shared_prefix_items
from abtui.metrics.summary import summarize
from abtui.store.reader import SessionReader


def test_shared_prefix_items_share_whole_blocks():
    items = shared_prefix_items(50, 10.0, seed=1)
    systems = {i.messages[0]["content"] for i in items}
    assert len(systems) == SYSTEMS
    assert all(len(s.split()) == SYSTEM_TOKENS and SYSTEM_TOKENS % 16 == 0 for s in systems)
    questions = [i.messages[1]["content"].split()[0] for i in items]
    assert questions == [str(i) for i in range(50)]  # the index first: no shared question


def test_prefix_caching_demo_headless(tmp_path, capsys):
    rc = main(
        [
            "demo",
            "--scenario",
            "prefix-caching",
            "--requests",
            "60",
            "--rate",
            "10",
            "--time-scale",
            "4",
            "--name",
            "pc",
            "--sessions-dir",
            str(tmp_path),
            "--headless",
        ]
    )
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "--scenario prefix-caching" in cap.err and "no-cache" in cap.out
    assert "prefix cache: hit 0.0% of" in cap.out  # the baseline's responses say 0 cached
    path = tmp_path / "pc.duckdb"
    with SessionReader(path) as rd:
        t = rd.request_table()
        models = [a["model"] for a in rd.arms()]
    assert len(t) == 120 and set(t.status) == {"ok"}
    assert models == ["h100-sxm:llama-3-8b:bf16"] * 2  # the same preset on both arms
    base, cand = summarize(t, 0, {}), summarize(t, 1, {})
    assert cand.ttft.p50 < 0.6 * base.ttft.p50  # the cached prefill is not computed
    out = tmp_path / "r.json"
    assert main(["report", str(path), "--format", "json", "-o", str(out)]) in (0, 3, 4)
    doc = json.loads(out.read_text())
    pc = doc["prefix_cache"]["arms"]
    off, on = pc["no-cache"], pc["prefix-cache"]
    assert off["responses"]["hit_rate"] == 0 and off["responses"]["requests"] == 60
    resp = on["responses"]
    assert resp["source"] == "usage.prompt_tokens_details.cached_tokens"
    # every request but each app's first serves its whole system prompt from the cache
    assert 0.75 < resp["hit_rate"] < SYSTEM_TOKENS / (SYSTEM_TOKENS + 8)
    assert [x["turn"] for x in resp["turns"]] == [0]
    assert on["server"]["hit_rate"] == pytest.approx(resp["hit_rate"], abs=0.05)
    assert on["server"]["source"] == "vllm prefix_cache_hits/queries"
    split = resp["ttft_p50_s"]
    assert split["n_cached"] >= 60 - SYSTEMS and split["cached"] < split["uncached"]
    md = tmp_path / "r.md"
    main(["report", str(path), "--format", "md", "-o", str(md)])
    assert "prefix cache: hit" in md.read_text()


@pytest.mark.parametrize(
    ("flag", "said"),
    [("--ablation", "two demos"), ("--profile", "goes with the precision demo")],
)
def test_a_second_demo_flag_with_the_scenario_is_refused(tmp_path, capsys, flag, said):
    argv = ["demo", "--scenario", "prefix-caching", flag, "--sessions-dir", str(tmp_path)]
    assert main([*argv, "--headless"]) == 2
    assert said in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing started, nothing written
