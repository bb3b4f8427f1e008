"""`abtui demo` end to end: two simulated GPUs in child processes, the chat-like workload,
the summary and the session file — small and time-scaled so that it runs in seconds."""

from __future__ import annotations

import json
import re

import numpy as np

from abtui.cli import main
from abtui.demo import arm_names
from abtui.metrics.summary import summarize
from abtui.store.reader import SessionReader


def test_demo_runs_end_to_end_and_fp8_decodes_faster(tmp_path, capsys):
    rc = main(
        [
            "demo",
            "--requests",
            "40",
            "--rate",
            "20",
            "--time-scale",
            "2",
            "--seed",
            "3",
            "--name",
            "demo-test",
            "--sessions-dir",
            str(tmp_path),
            "--headless",
        ]
    )
    cap = capsys.readouterr()
    assert rc in (0, 3, 4), cap.err  # the verdict's exit code (GO / NO-GO / INCONCLUSIVE)
    assert "h100:llama-3-8b:bf16" in cap.err and "simulated" in cap.err
    # the intro names the arrival process in the run header's words (it said "gamma arrivals
    # cv 1" over a header saying "poisson"), and says that 40 requests cannot call a P99
    load = re.search(r"^  load: (.+), 40 requests per arm$", cap.err, re.M)
    workload = re.search(
        r"^  workload: 40 chat-like requests per arm \((.+?)\), (.+)$", cap.err, re.M
    )
    assert load and workload, cap.err
    assert workload[2].startswith(load[1] + ", lognormal prompts") and load[1] == "poisson 20 req/s"
    assert "gamma" not in cap.err and "below the 1,000 per arm a P99 guardrail needs" in workload[1]
    assert "TPOT (ms)" in cap.out and "fp8/bf16" in cap.out
    with SessionReader(tmp_path / "demo-test.duckdb") as rd:
        assert rd.complete
        arms = rd.arms()
        items = rd.items()
        t = rd.request_table()
        slo = rd.meta()["spec"]["slo"]
        quality = rd.quality()
    assert [(a["name"], a["model"]) for a in arms] == [
        ("bf16", "h100-sxm:llama-3-8b:bf16"),
        ("fp8", "h100-sxm:llama-3-8b:fp8"),
    ]
    assert len(t) == 80 and set(t.status) == {"ok"}
    # the chat-like workload: varied lengths, every request generated its max_tokens
    measured = [i for i in items if "warmup" not in i.tags]
    assert len({i.n_input for i in measured}) > 20 and len({i.max_tokens for i in measured}) > 20
    want = {i.index: i.max_tokens for i in measured}
    assert all(n == want[i] for i, n in zip(t.item, t.n_output, strict=True))
    # SLOs are the modelled GPU's, on the endpoint's (time-scaled) clock
    assert slo == {"ttft": 0.1, "tpot": 0.005}
    # the physics shows through: FP8 weights decode faster than BF16 (memory-bound decode)
    bf16, fp8 = summarize(t, 0, {}), summarize(t, 1, {})
    assert fp8.tpot.p50 < 0.8 * bf16.tpot.p50
    a, b = t.select(t.arm == 0), t.select(t.arm == 1)
    assert (
        np.sort(a.scheduled_ns - a.scheduled_ns.min())
        == np.sort(b.scheduled_ns - b.scheduled_ns.min())
    ).all()
    # the quality suites ran after the load, paired, and the verdict shows their table; the
    # faces differ by 0.3 pp at these lengths, and the demo says that is below one flip
    assert {json.loads(r["detail"])["suite"] for r in quality} == {"niah", "keys"}
    assert len(quality) == 2 * len({r["item"] for r in quality}) >= 2 * 24
    assert "quality (paired items, greedy):" in cap.out and "niah   all" in cap.out
    note = cap.out.splitlines()[-1]
    assert note.startswith("demo: the simulator's model of quality") and "niah -0.3 pp" in note
    assert ".py" not in note  # a user is not sent to read a source file
    assert "less than one flip" in note and "logprob agreement line shows" in note
    # where fp8's small shift does show: the simulated logprobs (top-1 below 100%, KL > 0)
    top1 = re.search(
        r"logprob agreement on bf16's greedy continuation .*?top-1 ([0-9.]+)%", cap.out
    )
    assert top1 and float(top1[1]) < 100.0


def test_the_demos_defaults_can_call_its_p99_guardrails(capsys):
    """At its defaults the demo sends enough requests per arm for every P99 row to be called
    (10 samples beyond the quantile: 1,000), with room for a few errors, and says so."""
    from abtui.cli import build_parser
    from abtui.demo import DemoOptions, build_spec, intro
    from abtui.metrics.tails import tail_min_n
    from abtui.workload.synthetic import ChatShape

    need = tail_min_n("p99")
    assert need == 1000
    args = build_parser().parse_args(["demo"])
    opts = DemoOptions()
    assert args.requests == opts.requests >= 1.05 * need  # the CLI shows the same default
    spec = build_spec(
        opts, ("http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"), opts.requests, 512, 160
    )
    assert any(g.endswith(".p99") for g in spec.policy.guardrails)  # they are guardrails there
    text = intro(opts, spec, ChatShape(cv=1.0))
    assert f"{opts.requests} chat-like requests per arm (enough for the P99 guardrails" in text
    assert "poisson 13 req/s" in text and "gamma" not in text
    # a couple of minutes at most: the arrivals span requests / rate seconds of the real clock
    assert opts.requests / opts.rate / opts.time_scale <= 90


def test_demo_without_quality(tmp_path, capsys):
    rc = main(
        [
            "demo",
            "--requests",
            "6",
            "--rate",
            "20",
            "--time-scale",
            "20",
            "--no-quality",
            "--name",
            "dq",
            "--sessions-dir",
            str(tmp_path),
            "--headless",
        ]
    )
    out = capsys.readouterr().out
    assert rc in (0, 3, 4) and "quality (paired" not in out and "quality faces" not in out
    with SessionReader(tmp_path / "dq.duckdb") as rd:
        assert rd.complete and rd.quality() == []


def test_demo_bad_preset_names_the_flag(tmp_path, capsys):
    rc = main(
        ["demo", "--candidate-preset", "h100:llama-3-8b:fp9", "--sessions-dir", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--candidate-preset" in err and "fp9" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # nothing started, nothing written


def test_arm_names():
    assert arm_names("h100:llama-3-8b:bf16", "h100:llama-3-8b:fp8") == ("bf16", "fp8")
    assert arm_names("h100:llama-3-8b:bf16", "h200:llama-3-8b:bf16") == ("h100", "h200")
    assert arm_names("a:b:c", "a:b:c") == ("baseline", "candidate")
    assert arm_names("h100:m:bf16", "h100:m:bf16:kv=fp8") == ("h100:m:bf16", "h100:m:bf16:kv=fp8")
