"""``abtui run --profile`` against two simulators over loopback: each arm's server profiles a
window of the measured phase (``/start_profile``, ``/stop_profile``), the session file keeps
the window and the analysed profile, the requests that ran in the window are left out of the
latency figures on every arm, and every report (and the verdict screen) shows the profile
from the file alone, with the traces gone."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from profiled_sims import BF16, FP8, profiled_sim_configs

from abtui.cli import main
from abtui.errors import SpecError
from abtui.sim.engine import SimConfig
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.process import SimProcess
from abtui.sim.profiler import ProfilerConfig
from abtui.spec import load_spec, validate
from abtui.store.reader import SessionReader


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """One run: 120 requests per arm at 30 req/s; the window 0.5 s into the measured phase,
    1 s long, at most 300 steps recorded (the trace written quickly)."""
    tmp = tmp_path_factory.mktemp("profiled")
    cfgs = profiled_sim_configs(tmp)
    with SimProcess(cfgs[0]) as a, SimProcess(cfgs[1]) as b:
        spec = tmp / "spec.toml"
        spec.write_text(
            f'name = "prof"\n[[arms]]\nname = "bf16"\nurl = "{a.url}"\n'
            f'[[arms]]\nname = "fp8"\nurl = "{b.url}"\n'
            "[workload]\nrequests = 120\ninput_tokens = 256\noutput_tokens = 48\n"
            "[load]\nrate = 30\n"
            '[profile]\nafter = "0.5s"\nduration = "1s"\nsteps = 300\noptimises = ["gemm"]\n'
        )
        rc = main(["run", str(spec), "--headless", "--sessions-dir", str(tmp / "s")])
    assert rc in (0, 3, 4)
    return tmp, tmp / "s" / "prof.duckdb"


def test_the_session_keeps_the_window_and_the_profile(profiled):
    tmp, path = profiled
    with SessionReader(path) as rd:
        meta = rd.meta()
        excluded = rd.profiled_counts()
        kept = rd.request_table()
        every = rd.request_table(include_warmup=True)
    window = meta["profile_window"]
    assert [w["name"] for w in window["arms"]] == ["bf16", "fp8"]
    t0 = meta["segments"][0]["t0_ns"]
    for w in window["arms"]:
        assert w["error"] is None
        assert w["start_ns"] >= t0 + 0.5e9 and w["end_ns"] - w["start_ns"] >= 1e9
    # the window's items left out on both arms alike; the rest kept
    assert excluded[0] == excluded[1] > 0
    n_measured = int((~every.warmup).sum())
    assert len(kept.arm) == n_measured - excluded[0] - excluded[1] > 0
    doc = meta["profile"]
    assert doc["optimises"] == ["gemm"]
    for arm in doc["arms"]:
        assert arm["error"] is None and len(arm["traces"]) == 1
        # named as abtui asked (vLLM's profile_prefix), in the arm's own folder
        assert arm["traces"][0].startswith(str(tmp / "traces" / arm["name"] / "abtui_"))
        phases = arm["profile"]["phases"]
        assert phases["decode"]["steps"] > 20
        for name, ph in phases.items():
            if name == "unmarked":
                continue
            assert sum(ph["share_of_busy"].values()) == pytest.approx(1.0, abs=1e-3), name
            assert sum(ph["share_of_time"].values()) == pytest.approx(1.0, abs=1e-3), name
        assert phases["decode"]["share_of_time"]["gemm"] > 0.8
    [block] = doc["amdahl"]
    [dec] = [x for x in block["lines"] if x["phase"] == "decode"]
    assert block["candidate"] == "fp8"
    assert dec["bound_if_free"] == pytest.approx(1 / (1 - dec["share"]), rel=1e-4)
    assert 1.3 < dec["measured"] <= dec["bound_if_free"]  # FP8 weights: GEMV ~2× faster


def test_reports_show_the_profile_without_the_traces(profiled, capsys):
    tmp, path = profiled
    shutil.rmtree(tmp / "traces")  # the reports read the session file alone
    out = tmp / "r.json"
    assert main(["report", str(path), "--format", "json", "-o", str(out)]) in (0, 3, 4)
    doc = json.loads(out.read_text())["profile"]
    assert doc["excluded"]["bf16"] > 0 and doc["window"]["arms"][1]["name"] == "fp8"
    for arm in doc["arms"]:
        shares = arm["profile"]["phases"]["decode"]["share_of_time"]
        assert sum(shares.values()) == pytest.approx(1.0, abs=1e-3)
    assert any(x["phase"] == "decode" for x in doc["amdahl"][0]["lines"])
    assert any(
        line.lstrip().startswith("Amdahl, GEMM/GEMV on bf16: decode") for line in doc["lines"]
    )
    html = tmp / "r.html"
    main(["report", str(path), "--format", "html", "-o", str(html)])
    page = html.read_text()
    assert '<svg id="profile-bars"' in page and "fp8 · decode" in page
    md = tmp / "r.md"
    main(["report", str(path), "--format", "md", "-o", str(md)])
    text = md.read_text()
    assert "## Profile: where each server's time went" in text and "bf16 decode (" in text
    capsys.readouterr()
    main(["report", str(path)])
    printed = capsys.readouterr().out
    assert "Profile: a window of" in printed and "left out of the latency figures" in printed
    n = doc["excluded"]["bf16"]
    assert f"ran while the servers profiled (bf16 {n}, fp8 {n}) were slowed" in printed


def test_the_verdict_screen_shows_the_profile_at_80x24(profiled):
    from abtui.tui.app import AbtuiApp
    from abtui.tui.screens.verdict import VerdictScreen, load_verdict

    _, path = profiled
    data = load_verdict(path)

    async def drive() -> str:
        app = AbtuiApp()
        async with app.run_test(size=(80, 24)) as pilot:
            await app.push_screen(VerdictScreen(data))
            await pilot.pause()
            text = str(app.screen.query_one("#diagnosis").render())
            await pilot.press("q")
        return text

    text = asyncio.run(drive())
    assert "Profile: a window of" in text
    assert "fp8 decode (" in text and "Amdahl, GEMM/GEMV on bf16: decode" in text


def test_a_bad_profile_section_names_the_field(tmp_path):
    head = '[[arms]]\nname = "a"\nurl = "http://127.0.0.1:1/v1"\n'
    head += '[[arms]]\nname = "b"\nurl = "http://127.0.0.1:2/v1"\n'
    head += "[load]\nrate = 5\n"
    for body, word in (
        ('[profile]\noptimises = ["gemv"]\n', "profile.optimises: unknown class 'gemv'"),
        ("[profile]\nfactor = 1\n", "profile.factor"),
        ('[profile]\ntraces = { c = "/x" }\n', "profile.traces: no arm named 'c'"),
        ('[profile.classes]\ngemm = ["("]\n', "profile.classes.gemm: the pattern"),
        ('[profile]\nduration = "soon"\n', "profile.duration"),
    ):
        f = tmp_path / "s.toml"
        f.write_text(head + body)
        with pytest.raises(SpecError, match=word.replace("(", r"\(")):
            validate(load_spec(f)[0], str(f))
    f.write_text(head + '[profile.classes]\nmoe = ["topk"]\n[profile]\noptimises = ["moe"]\n')
    spec = validate(load_spec(f)[0], str(f))
    assert spec.profile.enabled and spec.profile.optimises == ["moe"]


def test_a_server_without_the_routes_is_named_and_the_other_arm_profiled(tmp_path, capsys):
    """The baseline profiles into a folder named by --profile-trace; the candidate was started
    without --profiler-config (404): its error is stored and said, the run goes on, and only
    the baseline's window leaves items out."""
    folder = tmp_path / "traces"
    prof = ProfilerConfig(str(folder), detailed=True)
    cfg_a = SimConfig(preset=PresetOptions(BF16, time_scale=8.0), profiler=prof)
    cfg_b = SimConfig(preset=PresetOptions(FP8, time_scale=8.0))
    with SimProcess(cfg_a) as a, SimProcess(cfg_b) as b:
        argv = ["run", "--headless", "--baseline", a.url, "--candidate", b.url, "--rate", "30"]
        argv += ["--requests", "60", "--input-tokens", "128", "--output-tokens", "32"]
        argv += ["--profile-after", "0.3s", "--profile-for", "0.5s", "--profile-steps", "100"]
        argv += ["--profile-trace", f"baseline={folder}", "--optimises", "gemm,attention"]
        argv += ["--name", "half", "--sessions-dir", str(tmp_path / "s")]
        assert main(argv) in (0, 3, 4)
    out = capsys.readouterr().out
    assert "POST /start_profile: HTTP 404" in out and "--profiler-config" in out
    with SessionReader(tmp_path / "s" / "half.duckdb") as rd:
        meta = rd.meta()
        excluded = rd.profiled_counts()
    base, cand = meta["profile_window"]["arms"]
    assert base["start_ns"] and base["error"] is None
    assert cand["start_ns"] is None and "404" in cand["error"]
    assert excluded[0] == excluded[1] > 0  # the baseline's window, both arms' items
    doc = meta["profile"]
    assert doc["arms"][0]["traces"][0].startswith(str(folder))
    assert doc["arms"][0]["profile"]["phases"]["decode"]["steps"] <= 100
    assert "404" in doc["arms"][1]["error"] and doc["diff"] == []
    [block] = doc["amdahl"]  # the bound alone, on the baseline's profile
    assert block["candidate"] is None and block["lines"][0]["classes"] == ["gemm", "attention"]
