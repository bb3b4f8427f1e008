"""``abtui run --until-decided`` against simulated endpoints on 127.0.0.1: the run looks at its
pairs as they come, stops when the anytime-valid verdict is decided, and every output says so;
a run that cannot decide spends its budget and ends INCONCLUSIVE."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from abtui.cli import main
from abtui.client.records import ERROR, OK, RequestRecord
from abtui.errors import SpecError
from abtui.quality.gates import QualityVerdict
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.spec import Spec, validate
from abtui.spec.model import ArmSpec
from abtui.stats.seqdecide import SequentialRun
from abtui.store.reader import SessionReader
from abtui.verdict.policy import ArmLoad, ErrorRates, resolve_policy

BASE = dict(ttft_ms=20.0, itl_ms=2.0, jitter_ms=1.0)
FAST = dict(ttft_ms=12.0, itl_ms=1.2, jitter_ms=1.0)


def _spec(tmp_path, name: str, a: str, b: str, requests: int, until: bool = True) -> str:
    """Medians-only guardrails: P99s cannot be bounded before about 1,000 pairs."""
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
requests = {requests}
input_tokens = 16
output_tokens = 8
[load]
rate = 40
until_decided = {"true" if until else "false"}
[store]
dir = "{tmp_path}"
text = false
[policy]
primary = "e2e.p50"
guardrails = ["ttft.p50", "tpot.p50"]
"""
    )
    return str(p)


def _run(spec: str, capsys) -> tuple[int, str, str]:
    # a run whose load generator fell behind (a CPU-starved box) can never be GO: try again
    for _ in range(3):
        rc = main(["run", spec, "--headless", "--overwrite"])
        cap = capsys.readouterr()
        if "fell behind its schedule" not in cap.out:
            break
    return rc, cap.out, cap.err


def _report_json(path, capsys) -> dict:
    assert main(["report", str(path), "--format", "json"]) in (0, 3, 4)
    return json.loads(capsys.readouterr().out)


@pytest.mark.serial  # GO needs a load generator that kept its schedule: not beside another worker
def test_clearly_faster_candidate_stops_early_with_go(tmp_path, capsys):
    budget = 1500  # 37 s at 40 req/s if it ran out; a decision comes after ~100–200 pairs
    with SimProcess(SimConfig(seed=1, **BASE)) as a, SimProcess(SimConfig(seed=2, **FAST)) as b:
        rc, out, err = _run(_spec(tmp_path, "fast", a.url, b.url, budget), capsys)
    assert rc == 0, out
    assert "stopping: decided GO" in err
    assert "Verdict: GO" in out and "stopped when decided" in out
    assert "until decided: stopped when decided at" in out  # the summary says it too
    path = tmp_path / "fast.duckdb"
    with SessionReader(path) as rd:
        meta = rd.meta()
    assert meta["status"] == "complete"  # decided is a planned end, not an interruption
    seq = meta["sequential"]
    assert seq["stop_reason"] == "decided" and seq["decision"] == "GO"
    assert 100 <= seq["stopped_at"] < budget // 2
    doc = _report_json(path, capsys)
    assert doc["result"] == "GO"
    s = doc["sequential"]
    assert s["stopped_at"] == seq["stopped_at"] and s["looks"][-1]["decision"] == "GO"
    assert {"method", "alpha", "rows", "budget_pairs"} <= set(s)
    assert doc["pairs"][0]["reasons"][0].startswith("anytime-valid verdict (stopped when")
    assert main(["report", str(path), "--format", "html"]) == 0
    html = capsys.readouterr().out
    assert "anytime-valid intervals" in html and "P50 E2E (primary)" in html


def test_clearly_slower_candidate_stops_early_with_no_go(tmp_path, capsys):
    budget = 1500
    with SimProcess(SimConfig(seed=1, **FAST)) as a, SimProcess(SimConfig(seed=2, **BASE)) as b:
        rc, out, err = _run(_spec(tmp_path, "slow", a.url, b.url, budget), capsys)
    assert rc == 3, out
    assert "stopping: decided NO-GO" in err and "Verdict: NO-GO" in out
    with SessionReader(tmp_path / "slow.duckdb") as rd:
        seq = rd.meta()["sequential"]
    assert seq["decision"] == "NO-GO" and seq["stopped_at"] < budget // 2


def test_identical_candidate_spends_its_budget_inconclusive(tmp_path, capsys):
    budget = 240  # 6 s at 40 req/s
    with SimProcess(SimConfig(seed=1, **BASE)) as a, SimProcess(SimConfig(seed=2, **BASE)) as b:
        rc, out, err = _run(_spec(tmp_path, "same", a.url, b.url, budget), capsys)
    assert rc == 4, out
    assert "Verdict: INCONCLUSIVE" in out and "ran its whole budget" in out
    # the fixed design's notes are marked descriptive; throughput at 40 req/s is not extrapolated
    assert "fixed-n notes (descriptive" in out and "set by the open-loop rate (40 req/s" in out
    assert "throughput (output tok/s): about" not in out
    with SessionReader(tmp_path / "same.duckdb") as rd:
        meta = rd.meta()
    seq = meta["sequential"]
    assert meta["status"] == "complete"
    assert seq["stop_reason"] == "budget" and seq["stopped_at"] is None
    assert seq["decision"] in ("NO-GAIN", "UNDECIDED") and seq["pairs"] >= budget - 5
    # the verdict says why it is not GO: no gain possible, or what more data would decide
    assert (
        "nothing to gain" in out
        or "more pairs per arm would decide" in out
        or "no decision in sight" in out
    )


def _records(arm: int, items: list[int], e2e_ms: float, failed=()) -> list[RequestRecord]:
    recs = []
    for i in items:
        t0 = 1_000_000_000 * (i + 1)
        ok = i not in failed
        recs.append(
            RequestRecord(
                arm=arm,
                item=i,
                scheduled_ns=t0,
                dispatched_ns=t0,
                first_byte_ns=t0 + 5_000_000,
                done_ns=t0 + int(e2e_ms * 1e6),
                chunk_ns=[t0 + 5_000_000, t0 + int(e2e_ms * 1e6)] if ok else [],
                chunk_tokens=[1, 1] if ok else [],
                status=OK if ok else ERROR,
                n_output=2 if ok else None,
            )
        )
    return recs


def test_the_run_pairs_items_both_arms_sent(tmp_path):
    from abtui.runner.until import UntilDecided

    u = UntilDecided(Spec(), 10)
    u.add(_records(0, [0, 1, 2, 3], 30.0, failed={2}))
    u.add(_records(1, [3, 1, 0], 20.0))  # item 2 not (yet) sent by the candidate
    s = u.series()
    a, b = s["e2e"]
    assert len(a) == len(b) == 3  # items 0, 1, 3, in schedule order
    assert a == pytest.approx([0.03, 0.03, 0.03]) and b == pytest.approx([0.02] * 3)
    u.add(_records(1, [2], 20.0))
    a, b = u.series()["e2e"]
    assert len(a) == 4 and a[2] != a[2]  # the baseline's failed item 2 is NaN


def test_looks_leave_out_the_items_a_profiling_window_touched():
    """Item k runs from k+1 s to k+1 s + E2E on each arm: the baseline's window over 2.025–2.5 s
    touches item 1 (running until 2.03 s), the candidate's still-open one from 4.5 s items 4
    and 5; those items go on both arms, the rest stay paired."""
    from abtui.runner.until import NEVER, UntilDecided

    u = UntilDecided(Spec(), 10)
    u.add(_records(0, list(range(6)), 30.0))
    u.add(_records(1, list(range(6)), 20.0))
    assert len(u.series()["e2e"][0]) == 6
    s = 1_000_000_000
    windows = [(0, int(2.025 * s), int(2.5 * s)), (1, int(4.5 * s), NEVER)]
    a, b = u.series(windows)["e2e"]
    assert len(a) == len(b) == 3  # items 0, 2, 3
    assert u.look(windows).pairs == 3
    assert (
        len(u.series([(1, int(2.025 * s), int(2.5 * s))])["e2e"][0]) == 6
    )  # its item 1 ended at 2.02 s


def test_until_decided_refuses_what_it_cannot_decide():
    arms = [
        ArmSpec(name=n, url=f"http://127.0.0.1:{9 + k}/v1") for k, n in enumerate(("a", "b", "c"))
    ]
    spec = Spec(arms=arms)
    spec.load.until_decided, spec.load.rate = True, 10.0
    with pytest.raises(SpecError, match="one candidate"):
        validate(spec, "t")
    spec.arms = arms[:2]
    spec.policy.primary = "throughput.requests"
    with pytest.raises(SpecError, match="latency rows only"):
        validate(spec, "t")
    spec.policy.primary = "e2e.p50"
    assert validate(spec, "t").load.until_decided


def test_a_stop_request_gives_the_anytime_valid_verdict_so_far(tmp_path):
    import threading

    from abtui.headless import load_checked_spec
    from abtui.runner.session import run_session
    from abtui.verdict.saved import session_verdict

    stop = threading.Event()
    with SimProcess(SimConfig(seed=1, **BASE)) as a, SimProcess(SimConfig(seed=2, **BASE)) as b:
        spec, text = load_checked_spec(_spec(tmp_path, "quit", a.url, b.url, 4000))
        timer = threading.Timer(6.0, stop.set)  # ~200 pairs in, far from the budget
        timer.start()
        try:
            res = run_session(spec, text, stop_request=stop)
        finally:
            timer.cancel()
    assert res.status == "interrupted"
    sv = session_verdict(res.path)
    seq = sv.meta["sequential"]
    assert seq["stop_reason"] == "interrupted" and 0 < seq["pairs"] < 1000
    assert sv.result == "INCONCLUSIVE"  # identical arms: never GO, whenever it stops
    assert sv.verdict.pairs[0].reasons[0].startswith("anytime-valid verdict (stopped early")
    assert sv.to_dict()["sequential"]["pairs"] == seq["pairs"]


def test_a_budget_too_small_for_the_tails_is_said():
    from abtui.runner.until import UntilDecided

    note = UntilDecided(Spec(), 200).budget_note()  # default guardrails: P99s
    assert note and "ttft.p99" in note and "cannot end GO" in note and "--requests 1000" in note
    assert UntilDecided(Spec(), 2000).budget_note() is None


def test_the_command_line_budget_defaults_to_room_for_the_tails():
    from abtui.cli import build_parser
    from abtui.cli.run import UNTIL_DECIDED_REQUESTS, apply_flags

    urls = ["--baseline", "http://127.0.0.1:9/v1", "--candidate", "http://127.0.0.1:10/v1"]
    args = build_parser().parse_args(["run", *urls, "--rate", "5", "--until-decided"])
    assert apply_flags(Spec(), args).workload.requests == UNTIL_DECIDED_REQUESTS
    args = build_parser().parse_args(["run", *urls, "--until-decided", "--requests", "300"])
    assert apply_flags(Spec(), args).workload.requests == 300


def _pair(**kw):
    from types import SimpleNamespace

    base = dict(
        baseline="base",
        candidate="cand",
        result="GO",
        reasons=["fixed"],
        errors=ErrorRates(rate_a=0.0, rate_b=0.0, p_higher=1.0),
        quality=None,
        findings=None,
        generator={
            "base": ArmLoad.from_dict({"load_kept": True, "flattery": {}}),
            "cand": ArmLoad.from_dict({"load_kept": True}),
        },
    )
    return SimpleNamespace(**{**base, **kw})


def _seq(decision="GO", hi=-0.30) -> SequentialRun:
    """A stored sequential verdict, partial as an older or hand-made document may be."""
    rows = [
        {"key": "e2e.p50", "state": "IMPROVED", "hi": hi, "delta": 0.02},
        {"key": "ttft.p50", "state": "SHOWN", "hi": -0.2, "delta": 0.02},
    ]
    return SequentialRun.from_dict(
        {
            "decision": decision,
            "reason": "r",
            "primary": "e2e.p50",
            "guardrails": ["ttft.p50"],
            "alpha": 0.05,
            "pairs": 120,
            "looks": [{"pairs": 120, "decision": decision}],
            "stop_reason": "decided",
            "budget_pairs": 1000,
            "rows": rows,
            "more": None,
        }
    )


def test_the_sequential_verdict_keeps_the_checks_it_does_not_make():
    from types import SimpleNamespace

    from abtui.verdict.sequential import apply_sequential

    def verdict(pair):
        pol = resolve_policy({"primary": "e2e.p50", "guardrails": ["ttft.p50"], "alpha": 0.05})
        return SimpleNamespace(pairs=[pair], policy=pol, result="?")

    v = verdict(_pair())
    apply_sequential(v, _seq(), {"status": "complete"})
    assert v.result == "GO" and v.pairs[0].reasons[-1].startswith("fixed-n view")
    rose = ErrorRates(rate_a=0.0, rate_b=0.2, p_higher=1e-6)
    v = verdict(_pair(errors=rose))
    apply_sequential(v, _seq(), {})  # no requests to bound the rise with: it only forbids GO
    assert v.result == "INCONCLUSIVE" and any("errors rose" in r for r in v.pairs[0].reasons)
    from abtui.metrics.table import RequestTable

    recs = _records(0, list(range(400)), 30.0)
    recs += _records(1, list(range(400)), 20.0, failed=set(range(0, 400, 5)))
    v = verdict(_pair(errors=rose))
    apply_sequential(v, _seq(), {}, RequestTable.from_records(recs))
    assert v.result == "NO-GO" and any("anytime-valid" in r for r in v.pairs[0].reasons)
    undecided = QualityVerdict((), (), 0, (), (), ("gsm8k not shown non-inferior",), ())
    v = verdict(_pair(quality=undecided))
    apply_sequential(v, _seq(), {})
    assert v.result == "INCONCLUSIVE"
    # the baseline's stalls could have flattered the primary by 50 %: its bound would be +5 %
    flattery = {"e2e.p50": 1.5, "ttft.p50": 1.0}
    gen = {"base": ArmLoad.from_dict({"load_kept": True, "flattery": flattery})}
    v = verdict(_pair(generator=gen))
    apply_sequential(v, _seq(), {})
    assert v.result == "INCONCLUSIVE" and "explain P50 E2E" in " ".join(v.pairs[0].reasons)
    # the candidate did not get the offered load; the baseline fell behind, no row bounded
    gen = {
        "base": ArmLoad.from_dict({"load_kept": True, "behind": True}),
        "cand": ArmLoad.from_dict({"load_kept": False}),
    }
    v = verdict(_pair(generator=gen))
    apply_sequential(v, _seq(), {})
    said = " ".join(v.pairs[0].reasons)
    assert v.result == "INCONCLUSIVE" and "cand fell behind its schedule: it did not" in said
    assert "P50 E2E, P50 TTFT cannot be bounded" in said
    v = verdict(_pair(result="NO-GO"))  # the fixed-n view does not decide
    apply_sequential(v, _seq(decision="UNDECIDED"), {})
    assert v.result == "INCONCLUSIVE"
    v = verdict(_pair())  # a report with another primary keeps the fixed verdict, says so
    v.policy = replace(v.policy, primary="ttft.p50")
    apply_sequential(v, _seq(), {})
    assert v.result == "?"
    assert "policy here differs" in v.pairs[0].reasons[-1]


def test_unbounded_flattery_blocks_go_read_back_as_when_fresh():
    # the baseline's stalls could account for the whole P50 E2E (flattery inf) while it kept
    # up on average (not "behind"): fresh and read back from a stored verdict, no GO
    import json
    import math
    from types import SimpleNamespace

    from abtui.verdict.sequential import apply_sequential

    fresh = ArmLoad(0.5, 0.9, False, 0.03, True, {"e2e.p50": math.inf, "ttft.p50": 1.0})
    stored = json.loads(json.dumps(fresh.to_dict()))
    assert stored["flattery"]["e2e.p50"] is None and stored["flattery_unbounded"] == ["e2e.p50"]
    assert ArmLoad.from_dict(stored) == fresh
    pol = resolve_policy({"primary": "e2e.p50", "guardrails": ["ttft.p50"], "alpha": 0.05})
    for base in (fresh, ArmLoad.from_dict(stored)):
        gen = {"base": base, "cand": ArmLoad.from_dict({"load_kept": True})}
        v = SimpleNamespace(pairs=[_pair(generator=gen)], policy=pol, result="?")
        apply_sequential(v, _seq(), {})
        assert v.result == "INCONCLUSIVE" and "explain P50 E2E" in " ".join(v.pairs[0].reasons)
    # a verdict stored before the list existed: null reads as not bounded, as it always did
    del stored["flattery_unbounded"]
    assert ArmLoad.from_dict(stored).flattery["e2e.p50"] is None


def test_quality_items_are_sent_until_a_bucket_decides_the_gate(tmp_path, capsys):
    """The simulator's 128k model, INT4 weights + FP8 KV against BF16, keys suite: the run
    sends rounds of new haystacks until the anytime-valid gate fails the suite at the length
    that dropped (32k), where the fixed design's 3 haystacks per length only dilute it."""
    from abtui.sim.preset_cli import PresetOptions

    opts = lambda p: PresetOptions(p, time_scale=50)  # noqa: E731
    base, cand = "h100:llama-3.1-8b:bf16", "h100:llama-3.1-8b:int4:kv=fp8"
    with (
        SimProcess(SimConfig(preset=opts(base))) as a,
        SimProcess(SimConfig(preset=opts(cand))) as b,
    ):
        p = tmp_path / "q.toml"
        p.write_text(
            f'name = "q"\n[[arms]]\nname = "bf16"\nurl = "{a.url}"\n[[arms]]\n'
            f'name = "int4"\nurl = "{b.url}"\n[workload]\nrequests = 40\ninput_tokens = 16\n'
            f"output_tokens = 8\n[load]\nrate = 20\nuntil_decided = true\n[store]\n"
            f'dir = "{tmp_path}"\ntext = false\n[quality]\nsuites = ["keys"]\n'
        )
        rc, out, err = _run(str(p), capsys)
    assert rc == 3, out  # NO-GO: the quality gate failed
    with SessionReader(tmp_path / "q.duckdb") as rd:
        q = rd.meta()["sequential"]["quality"]
        stored = rd.quality()
    assert q["stop_reason"] == "decided" and q["decided"] and q["rounds"] > 3
    (suite,) = q["suites"]
    failed = [x for x in suite["buckets"] if x["state"] == "fail"]
    assert suite["state"] == "fail" and [x["bucket"] for x in failed] == ["32k"]
    assert failed[0]["hi"] < -0.01
    # 6 lengths × 2 questions a round, fewer once a length passed; every one stored
    assert 3 * 12 < q["items_per_arm"] <= 12 * q["rounds"]
    assert len(stored) == 2 * q["items_per_arm"]
    assert "quality until decided, round" in err
    assert f"quality until decided: decided after {q['rounds']} round(s)" in out  # the summary
    assert "keys at 32k accuracy" in out and "anytime-valid quality gate" in out
    doc = _report_json(tmp_path / "q.duckdb", capsys)
    assert doc["result"] == "NO-GO" and doc["sequential"]["quality"]["suites"][0]["state"] == "fail"


def test_ttfo_can_be_the_sequential_primary(tmp_path, capsys):
    """A reasoning model that thinks 2 tokens instead of 8 answers sooner at the same TTFT:
    with ``ttfo.p50`` as the primary, the run looks at TTFO and stops on GO."""
    with (
        SimProcess(SimConfig(seed=1, reasoning_tokens=8, **BASE)) as a,
        SimProcess(SimConfig(seed=2, reasoning_tokens=2, **BASE)) as b,
    ):
        p = tmp_path / "ttfo.toml"
        text = _spec(tmp_path, "ttfo", a.url, b.url, 1500)
        body = (
            open(text)
            .read()
            .replace(
                'guardrails = ["ttft.p50", "tpot.p50"]', 'primary = "ttfo.p50"\nguardrails = []'
            )
        )
        body = body.replace('primary = "e2e.p50"\n', "") + '\n[request]\napi = "chat"\n'
        body = body.replace("output_tokens = 8", "output_tokens = 16")  # an answer after it
        p.write_text(body)
        rc, out, err = _run(str(p), capsys)
    assert rc == 0, out
    with SessionReader(tmp_path / "ttfo.duckdb") as rd:
        seq = rd.meta()["sequential"]
    assert seq["stop_reason"] == "decided" and seq["decision"] == "GO"
    (row,) = seq["rows"]
    assert row["key"] == "ttfo.p50" and row["state"] == "IMPROVED"
    assert -0.5 < row["effect"] < -0.15 and seq["stopped_at"] < 750  # 36 ms → 24 ms


def test_errors_rose_is_no_go_only_when_the_anytime_valid_rise_is_above_zero():
    """A run stopped at a data-dependent time: the error check is the betting interval of the
    paired rise, not a fixed-n test. 400 items, the candidate failing 1 in 4 where the baseline
    never does, is shown (NO-GO); 3 failures in 400 are higher but not shown (no GO)."""
    from abtui.metrics.table import RequestTable
    from abtui.verdict.sequential import _errors, error_rise

    def table(cand_fails: set[int]) -> RequestTable:
        a = _records(0, list(range(400)), 30.0)
        b = _records(1, list(range(400)), 20.0, failed=cand_fails)
        return RequestTable.from_records(a + b)

    many = error_rise(table(set(range(0, 400, 4))), 0, 1, 0.05)
    assert many[0] == 400 and 0 < many[1] < 0.25 < many[2]
    few = error_rise(table({5, 50, 300}), 0, 1, 0.05)
    assert few[1] <= 0 < few[2]
    assert error_rise(RequestTable.from_records(_records(0, [1], 30.0)), 0, 1, 0.05) is None

    pair = type("P", (), {"errors": ErrorRates(0.0, 0.25, 1e-9)})()
    no_go, block = _errors(pair, many)
    assert no_go and not block and "anytime-valid" in no_go[0]
    pair = type("P", (), {"errors": ErrorRates(0.0, 0.0075, 0.06)})()
    no_go, block = _errors(pair, few)
    assert not no_go and block[0].endswith("not shown")
    pair = type("P", (), {"errors": ErrorRates(0.01, 0.0, 1.0)})()
    assert _errors(pair, few) == ([], [])  # fewer errors: nothing to say
