"""`abtui demo --ablation` end to end, small and time-scaled: four simulated endpoints, the 2×2,
the factorial in the printed verdict and in the stored one, with the quality suites' accuracy
interaction."""

from __future__ import annotations

from abtui.cli import main
from abtui.verdict.saved import session_verdict


def test_demo_ablation_runs_the_2x2(tmp_path, capsys):
    rc = main(
        [
            "demo",
            "--ablation",
            "--requests",
            "40",
            "--time-scale",
            "4",
            "--name",
            "abl",
            "--sessions-dir",
            str(tmp_path),
            "--headless",
        ]
    )
    cap = capsys.readouterr()
    assert rc == 0, cap.err  # the demo's exit code is 0 for any complete run
    assert "2×2 factorial on four simulated H100s" in cap.err
    assert "h100:llama-3-8b:int4:spec=k4a0.7" in cap.err
    assert "factorial ablation: int4 × spec (4 arms" in cap.out
    sv = session_verdict(tmp_path / "abl.duckdb", store=False)
    fac = sv.verdict.factorial
    assert [a.name for a in fac.arms] == ["base", "int4", "spec", "int4+spec"]
    row = fac.row("tpot.p50")
    assert set(row.values) == {"base", "int4", "spec", "int4+spec"}
    assert row.interactions[0].term == "int4×spec"
    # the quality suites ran on all four arms: the simulator's faces answer from the weights and
    # speculative decoding changes no answer, so every item's difference in differences is 0
    assert "quality: niah and keys after the load test" in cap.err
    suites = {s.suite: s for s in fac.quality.suites}
    assert set(suites) == {"niah", "keys"}
    for s in suites.values():
        assert s.n >= 30 and s.accuracy["spec"] == s.accuracy["base"]
        assert s.accuracy["int4+spec"] == s.accuracy["int4"]
        inter = s.interactions[0]
        assert inter.estimate == 0 and inter.lo < 0 < inter.hi and inter.state == "clear"
        assert s.only_combination.lost == s.only_combination.gained == 0
    assert "interaction int4×spec +0.0 pp [" in cap.out
    # (40 time-scaled requests on a shared CI box measure the CPU more than the simulated GPUs:
    # the physics is checked offline, below)


def _offline_interaction(weights: str, concurrency: int = 48, n: int = 400) -> float:
    """The P50 TPOT interaction of the demo's 2×2 in the offline simulator (no HTTP, no CPU
    contention): a saturated queue keeps ``concurrency`` requests decoding, as the demo's closed
    loop does."""
    import math

    import numpy as np

    from abtui.demo_ablation import ARMS, preset_of
    from abtui.sim.batching import BatchEngine, EngineOptions
    from abtui.sim.offline import simulate
    from abtui.sim.presets import parse_preset
    from abtui.workload.synthetic import chat_items

    reqs = [(0.0, it.n_input, it.max_tokens) for it in chat_items(n, 1.0, 0)]
    m = {}
    for name, on in ARMS:
        preset = parse_preset(preset_of(on).replace("int4", weights))
        timings = simulate(BatchEngine(preset, EngineOptions(max_num_seqs=concurrency)), reqs)
        m[name] = float(np.median([t.tpot for t in timings]))
    return math.expm1(
        math.log(m["int4+spec"]) - math.log(m["int4"]) - math.log(m["spec"]) + math.log(m["base"])
    )


def test_int4_and_speculation_interact_from_the_roofline_fp8_does_not_the_same_way():
    # weight-only INT4 shrinks decode bytes, not FLOPs: with 5 verify tokens a request the step
    # goes compute-bound, and both shrink only decode (prefill stays): the combination gains less
    assert _offline_interaction("int4") > 0.15
    # W8A8 FP8 halves bytes and FLOP time (and prefill): no such antagonism
    assert _offline_interaction("fp8") < 0.02


def test_demo_ablation_quality_suites_and_no_quality():
    from abtui.demo import QUALITY_MARGIN
    from abtui.demo_ablation import AblationOptions, build_spec

    urls = [f"http://127.0.0.1:{8000 + i}/v1" for i in range(4)]
    spec = build_spec(AblationOptions(), urls, 10, 512, 160)
    assert spec.quality.suites == ["niah", "keys"] and spec.quality.margin == QUALITY_MARGIN
    assert build_spec(AblationOptions(quality=False), urls, 10, 512, 160).quality.suites == []
