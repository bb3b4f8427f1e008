"""The verdict's and the run's records and their JSON: each record's ``to_dict`` read back with
``from_dict`` gives the same JSON (what a session file stores is what the record says), and a
partial or older document reads without a crash, with the neutral values the verdict needs."""

from __future__ import annotations

import json
import math

import numpy as np

from abtui.runner.machine import MachineUse, machine_words
from abtui.stats import seqdecide as sd
from abtui.verdict.policy import SessionInfo, evaluate
from abtui.verdict.sequential import applies, headline, would_decide
from abtui.verdict.stored import verdict_from_dict
from tests.synthetic import ArmTruth, synthetic_table


def _json(d: dict) -> dict:
    """What a session file gives back: NaN and inf are not JSON, so they must be gone."""
    return json.loads(json.dumps(d, allow_nan=False))


def _series(n: int, ratio: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for m in ("ttft", "tpot", "e2e"):
        a = rng.lognormal(0.0, 0.3, n)
        out[m] = (a, a * ratio * rng.lognormal(0.0, 0.05, n))
    return out


def _run(quality: dict | None = None) -> sd.SequentialRun:
    """The record a run --until-decided stores: its looks, the last verdict (P99 rows whose
    upper bounds are still infinite: ``null`` in JSON), how it ended, its quality gate."""
    mon = sd.Monitor(sd.Design(guardrails=("ttft.p50", "ttft.p99", "tpot.p50")))
    full = _series(300, 0.8, 3)
    for t in (120, 200, 300):
        mon.look({k: (a[:t], b[:t]) for k, (a, b) in full.items()})
    end = sd.RunEnd("budget", 300, 40.125, None, 0.031)
    return sd.SequentialRun(**{**_fields(mon.record()), "end": end, "quality": quality})


def _fields(r: sd.SequentialRun) -> dict:
    return {k: getattr(r, k) for k in sd.SequentialRun.__dataclass_fields__}


def test_the_sequential_record_reads_back_as_the_json_it_wrote():
    for quality in (None, {"stop_reason": "decided", "suites": []}):
        run = _run(quality)
        doc = _json(run.to_dict())
        back = sd.SequentialRun.from_dict(doc)
        assert back.to_dict() == doc and json.dumps(back.to_dict()) == json.dumps(doc)
        assert ("quality" in doc) is (quality is not None) and back.quality == quality
    assert back.last.rows[2].key == "ttft.p99" and math.isnan(back.last.rows[2].hi)
    assert doc["rows"][2]["hi"] is None and doc["rows"][2]["decided"] is False
    assert [x.pairs for x in back.looks] == [120, 200, 300] and back.pairs == 300
    assert back.stop_reason == "budget" and back.budget_pairs == 300
    # the keys in the order the run writes them: the design, the last look, how it ended
    assert list(doc)[:7] == [
        "method",
        "alpha",
        "primary",
        "guardrails",
        "v_opt_pairs",
        "looks",
        "stopped_at",
    ]
    assert list(doc)[7:14] == ["decision", "stop", "reason", "pairs", "more", "rows"] + [
        "stop_reason"
    ]


def test_a_run_without_a_look_or_an_end_writes_neither():
    """A run that failed before its first look stores the design and no verdict; a monitor
    alone has no end."""
    mon = sd.Monitor(sd.Design())
    doc = _json(mon.record().to_dict())
    assert "decision" not in doc and "stop_reason" not in doc
    back = sd.SequentialRun.from_dict(doc)
    assert back.last is None and back.end is None and back.to_dict() == doc
    pol = evaluate(synthetic_table(10, [ArmTruth(), ArmTruth()], seed=1), [], {}).policy
    assert not applies(back, pol)  # nothing decided: the fixed verdict stays


def test_a_partial_sequential_document_reads_with_neutral_values():
    """What the verdict's readers took from a missing key: no looks, 0 pairs, no budget, a row
    without a bound not counted."""
    back = sd.SequentialRun.from_dict({"decision": "UNDECIDED", "rows": [{"key": "e2e.p50"}]})
    assert back.pairs == 0 and back.looks == () and back.budget_pairs is None
    row = back.rows[0]
    assert row.state == sd.UNDECIDED and math.isnan(row.hi) and row.more is None
    assert headline(back) == "anytime-valid verdict (ended at 0 pairs, 0 look(s)): UNDECIDED: "
    assert would_decide(back).startswith("no decision in sight")


def test_session_info_and_the_machine_read_back():
    full = SessionInfo("ab", "/x/ab.duckdb", "poisson 40 req/s", ("base", "cand"), "complete")
    doc = _json(full.to_dict())
    assert list(doc) == ["name", "path", "load", "arms", "status"]
    assert SessionInfo.from_dict(doc) == full
    bare = SessionInfo(status="complete")  # a verdict of a bare table: the status only
    assert (
        bare.to_dict() == {"status": "complete"}
        and SessionInfo.from_dict({"status": "complete"}) == bare
    )
    m = MachineUse(2, 10.0, 1.5, 0.5, 1.0, None, 1.2)
    assert MachineUse.from_dict(_json(m.to_dict())) == m
    assert machine_words(m).startswith("the machine: while measuring, other processes kept 1.0")
    assert MachineUse.from_dict({"cpus": 2}) is None and MachineUse.from_dict(None) is None


def test_a_stored_verdict_keeps_its_session_record():
    t = synthetic_table(200, [ArmTruth(), ArmTruth(ttft_scale=0.8)], seed=2)
    arms = [{"name": "base"}, {"name": "cand"}]
    info = SessionInfo("ab", "ab.duckdb", None, ("base", "cand"))
    v = evaluate(t, arms, {"policy": {"resamples": 200}}, session=info)
    assert v.session == SessionInfo("ab", "ab.duckdb", None, ("base", "cand"), "complete")
    doc = _json(v.to_dict())
    assert doc["session"] == {
        "name": "ab",
        "path": "ab.duckdb",
        "load": None,
        "arms": ["base", "cand"],
        "status": "complete",
    }
    back = verdict_from_dict(doc, t, {})
    assert back.session == v.session and _json(back.to_dict()) == doc
