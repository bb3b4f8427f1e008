"""Quality items interleaved with the load test (``quality.mode = "interleaved"``), against two
simulated endpoints (time-scaled): the same items and scores as after the load, none of them in
the load's figures, the verdict still gated on them, and a stop keeps what was answered."""

from __future__ import annotations

import json
import threading

import pytest

from abtui.cli import main
from abtui.errors import SpecError
from abtui.metrics.summary import summarize
from abtui.quality.interleave import load_span_s, schedule
from abtui.runner.observer import NullObserver
from abtui.runner.session import run_session
from abtui.sim.engine import SimConfig
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.process import SimProcess
from abtui.spec import load_spec, validate
from abtui.store.reader import SessionReader

BASE = "h100:llama-3.1-8b:bf16"
DEGRADED = "h100:llama-3.1-8b:int4:kv=fp8"
REQUESTS = 60  # at 20 req/s: a 3 s schedule for the quality items to spread over
QUALITY = 'suites = ["keys", "exact"]\nper_cell = 2\nmax_length = 32768\nseed = 5'


def _spec(tmp_path, name: str, a: str, b: str, quality: str, load: str = "rate = 20") -> str:
    p = tmp_path / f"{name}.toml"
    p.write_text(f"""
name = "{name}"
[[arms]]
name = "base"
url = "{a}"
[[arms]]
name = "cand"
url = "{b}"
[workload]
requests = {REQUESTS}
input_tokens = 16
output_tokens = 8
[load]
{load}
[store]
dir = "{tmp_path}"
[quality]
{quality}
""")
    return str(p)


def _sim(preset: str) -> SimProcess:
    return SimProcess(SimConfig(seed=3, preset=PresetOptions(preset, time_scale=200)))


def _stored(path):
    with SessionReader(path) as rd:
        rows = rd.quality()
        table = rd.request_table()
        meta = rd.meta()
        verdicts = rd.verdicts()
    pair = verdicts[-1]["result"]["pairs"][0] if verdicts else None
    return rows, table, meta, pair


def _answers(rows) -> list[tuple]:
    """What both modes must agree on: arm, item, score, and the detail minus send times."""
    out = []
    for r in rows:
        d = json.loads(r["detail"])
        d.pop("offset_s", None), d.pop("sent_s", None)
        out.append((r["arm"], r["item"], r["score"], r["correct"], json.dumps(d, sort_keys=True)))
    return sorted(out)


def test_interleaved_stores_what_separate_does_and_stays_out_of_the_load_figures(tmp_path, capsys):
    with _sim(BASE) as a, _sim(DEGRADED) as b:
        spec = _spec(tmp_path, "sep", a.url, b.url, QUALITY)
        rc_sep = main(["run", spec, "--headless"])
        spec = _spec(tmp_path, "mix", a.url, b.url, QUALITY)
        rc_mix = main(["run", spec, "--headless", "--quality-mode", "interleaved"])
    out = capsys.readouterr().out
    sep_rows, sep_t, sep_meta, sep_pair = _stored(tmp_path / "sep.duckdb")
    rows, t, meta, pair = _stored(tmp_path / "mix.duckdb")
    assert (sep_meta["quality_mode"], meta["quality_mode"]) == ("separate", "interleaved")

    # the same items, outputs and scores (the simulator's answers do not depend on load)
    n_items = len({r["item"] for r in sep_rows})
    assert n_items > 30 and len(rows) == len(sep_rows) == 2 * n_items
    assert _answers(rows) == _answers(sep_rows)

    # sent during the load, at the same offsets for both arms
    info = meta["quality_interleaved"]
    assert info["span_s"] == pytest.approx(max(i.arrival_s for i in _items(tmp_path)), abs=1e-9)
    assert info["rows"] == len(rows)
    # most were sent before the last load request ended (an item waits only for a free slot
    # of quality.concurrency; half is a wide margin for a loaded machine)
    assert info["sent_during_load"] >= len(rows) / 2, info
    details = [json.loads(r["detail"]) for r in rows]
    offsets = {}
    for r, d in zip(rows, details, strict=True):
        offsets.setdefault(r["item"], set()).add(d["offset_s"])
    assert all(len(o) == 1 for o in offsets.values())  # paired in time
    assert len({next(iter(o)) for o in offsets.values()}) == n_items  # spread, not all at t0

    # none of them in the load's figures: the request table and the summaries count the
    # load's requests only, exactly as in separate mode
    for table in (sep_t, t):
        for arm in (0, 1):
            s = summarize(table, arm)
            assert s.sent == s.ok == REQUESTS, (arm, s.sent)
        assert len(table) == 2 * REQUESTS

    # the verdict still gates on quality in both modes: the degraded candidate's keys suite
    # (2 of 24 answers lost at seed 5) is not shown non-inferior, so it cannot be GO
    assert rc_sep == rc_mix == 4, out
    for p in (sep_pair, pair):
        keys = next(g for g in p["quality"]["gates"] if g["suite"] == "keys")
        assert p["result"] == "INCONCLUSIVE" and keys["state"] == "inconclusive"
        assert any("quality: keys accuracy" in r and "underpowered" in r for r in p["reasons"])


def _items(tmp_path):
    with SessionReader(tmp_path / "mix.duckdb") as rd:
        return [i for i in rd.items() if "warmup" not in i.tags]


class _StopHalfway(NullObserver):
    """Asks for a stop once arm 0 has half its load requests back."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop

    def progress(self, snap) -> None:
        if snap.arms[0].done >= REQUESTS // 2:
            self.stop.set()


def test_a_stop_keeps_the_interleaved_rows_already_answered(tmp_path):
    with _sim(BASE) as a, _sim(BASE) as b:
        spec, text = load_spec(
            _spec(tmp_path, "stop", a.url, b.url, QUALITY + '\nmode = "interleaved"', "rate = 10")
        )
        validate(spec)
        stop = threading.Event()
        res = run_session(spec, text, _StopHalfway(stop), stop_request=stop)
    assert res.status == "interrupted"
    rows, _, meta, _ = _stored(res.path)
    info = meta["quality_interleaved"]
    # stopped about halfway through a 6 s schedule: some answered, the rest never sent
    assert 0 < len(rows) < 2 * info["items"], (len(rows), info)
    details = [json.loads(r["detail"]) for r in rows]
    assert all(
        d["status"] == "ok" and r["correct"] is not None for r, d in zip(rows, details, strict=True)
    )
    assert info["rows"] == len(rows)
    # stopped: perplexity and logprobs were not measured after it
    assert "quality_ppl" not in meta and "quality_logprobs" not in meta


def test_interleaved_needs_parallel_arms(tmp_path):
    spec, _ = load_spec(
        _spec(
            tmp_path,
            "alt",
            "http://127.0.0.1:1/v1",
            "http://127.0.0.1:2/v1",
            'suites = ["exact"]\nmode = "interleaved"',
            'rate = 20\nschedule = "alternate"',
        )
    )
    with pytest.raises(SpecError, match='needs load.schedule = "parallel"'):
        validate(spec, "alt.toml")
    spec.quality.mode = "sometimes"
    with pytest.raises(SpecError, match="quality.mode must be one of separate, interleaved"):
        validate(spec, "alt.toml")


def test_schedule_spreads_a_seeded_permutation_over_the_span():
    plan = schedule(6, 3.0, seed=1)
    assert sorted(k for k, _ in plan) == list(range(6))
    assert [o for _, o in plan] == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert plan == schedule(6, 3.0, seed=1) and plan != schedule(6, 3.0, seed=2)
    assert [o for _, o in schedule(3, 0.0, seed=0)] == [0.0, 0.0, 0.0]  # closed loop, no duration

    from abtui.client.items import Item
    from abtui.workload.segments import Segment

    its = [Item(index=i, id=str(i), prompt="x", arrival_s=0.5 * i) for i in range(5)]
    assert load_span_s([Segment(its, "open", None), Segment(its, "open", None)]) == 4.0
    assert load_span_s([Segment(its, "closed", 4, duration_s=7.0)]) == 7.0
    assert load_span_s([Segment(its, "closed", 4)]) == 0.0
