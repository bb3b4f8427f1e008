"""The session's schedule made twice (abtui.runner.schedule): streamed into the file
and kept light in the main process, made whole again by each load generator from the spec.

The generators must send exactly the items the session file records, in the same segments;
a workload file changed in between must stop the run, not be measured; and the main process
must hold a batch of prompts at a time, never all of them."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import os
import tracemalloc

import pytest

from abtui.runner import schedule
from abtui.runner.generator import ArmPlan, generator_main
from abtui.runner.messages import Fatal
from abtui.runner.session import run_session
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.spec import spec_from_dict, validate
from abtui.store.reader import SessionReader
from abtui.workload.build import LevelItems
from abtui.workload.segments import Offsets, build_levels, level_sources, shard


def _jsonl(path, n: int, salt: str = "") -> str:
    with open(path, "w") as f:
        for i in range(n):
            rec = {
                "id": f"q{i}",
                "prompt": f"{salt}question {i} " + "word " * (5 + i % 7),
                "max_tokens": 4 + i % 5,
                "arrival_s": round(0.013 * i + 0.004 * (i % 3), 4),
            }
            f.write(json.dumps(rec) + "\n")
    return str(path)


CASES = {
    "closed": ({"requests": 50, "input_tokens": 12}, {"concurrency": 4}, 2, 1),
    "poisson-duration": ({"input_tokens": 9}, {"rate": 40, "duration": "2s"}, 2, 1),
    "gamma-shaped": (
        {
            "requests": 70,
            "input_dist": "lognormal:40:0.6",
            "output_dist": "uniform:2:9",
            "prefix_groups": 3,
            "prefix_tokens": 12,
        },
        {"rate": 30, "arrival": "gamma", "burstiness": 2.0},
        2,
        1,
    ),
    "sweep-alternate-runs": (
        {"requests": 21, "input_tokens": 8},
        {"sweep_rate": [10, 20], "schedule": "alternate", "blocks": 3, "runs": 2},
        2,
        1,
    ),
    "three-arms-three-generators": (
        {"requests": 40, "input_tokens": 8},
        {"sweep_concurrency": [3, 5], "generators": 3, "warmup": 3},
        3,
        3,
    ),
    "file-replay": (
        {"file": "FILE"},
        {"arrival": "replay", "speedup": 2.0, "duration": "0.3s"},
        2,
        1,
    ),
    "file-poisson": ({"file": "FILE", "requests": 30}, {"rate": 25}, 2, 2),
}


def _spec(tmp_path, case: str):
    workload, load, n_arms, n_gen = CASES[case]
    workload = dict(workload)
    if workload.get("file") == "FILE":
        workload["file"] = _jsonl(tmp_path / "w.jsonl", 60)
    arms = [{"name": f"a{k}", "url": f"http://127.0.0.1:{9 + k}/v1"} for k in range(n_arms)]
    spec = validate(
        spec_from_dict(
            {
                "name": "s",
                "arms": arms,
                "workload": workload,
                "load": {**load, "generators": n_gen},
                "store": {"dir": str(tmp_path)},
            },
            "t.toml",
        )
    )
    return spec, n_arms, n_gen


def _rows(items) -> list[tuple]:
    return [dataclasses.astuple(it) for it in items]


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_generator_rebuilds_the_segments_the_session_file_records(case, tmp_path, monkeypatch):
    # the schedule does not depend on the machine: nine generators pass the CPU cap anywhere
    monkeypatch.setattr("abtui.limits.usable_cpus", lambda: 8)
    spec, n_arms, n_gen = _spec(tmp_path, case)
    start = schedule.recipe_spec(spec)
    written: list = []
    flags: list = []

    def sink(batch, warmup):
        written.extend(batch)
        flags.append(warmup)

    light = schedule.session_schedule(spec, level_sources(spec), sink=sink, light=True)
    # what the file records: every level's items, whole, then the warm-up items, in batches
    levels = build_levels(spec)
    whole = [it for lv in levels for it in lv.items]
    warm = schedule.warmup_items(spec, len(whole))
    assert _rows(written) == _rows(whole + warm)
    assert flags == [False] * (len(flags) - 1) + [True]
    assert all(it.prompt for it in written)
    # the main process keeps each item's index and offset only
    assert all(isinstance(lv.items, Offsets) for lv in light.levels)
    want = schedule.segments_of(spec, levels, n_arms)
    kept = schedule.segments_of(spec, light.levels, n_arms)
    assert len(kept) == len(want) and light.n == len(whole)
    for k, w in zip(kept, want, strict=True):
        assert (k.arms, k.run, k.level, k.block, k.rate, k.concurrency) == (
            w.arms,
            w.run,
            w.level,
            w.block,
            w.rate,
            w.concurrency,
        )
        assert [(o.index, o.arrival_s) for o in k.items] == [
            (it.index, it.arrival_s) for it in w.items
        ]
    # each generator, from the spec as the session started: its share, whole, and the warm-up
    spec.workload.requests = len(whole)  # what run_session changes after the recipe's copy
    for g in range(n_gen):
        plan = ArmPlan(
            arm=0,
            target=None,
            items=[],
            warmup_items=[],
            mode="closed",
            concurrency=None,
            recipe=schedule.Recipe(start, n_arms, g, n_gen, light.fingerprint),
        )
        got = schedule.rebuild(plan)
        assert got.recipe is None and _rows(got.warmup_items) == _rows(warm)
        mine = shard(want, g, n_gen)
        assert len(got.segments) == len(mine)
        for a, b in zip(got.segments, mine, strict=True):
            assert dataclasses.replace(a, items=[]) == dataclasses.replace(b, items=[])
            assert _rows(a.items) == _rows(b.items)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_small_workload_is_kept_whole_to_ship_a_big_one_is_not(case, tmp_path, monkeypatch):
    """``whole_up_to``: while the items fit, the light schedule keeps them whole as well (the
    generators get them pickled instead of rebuilding them); one item or one character over
    either bound and it keeps none."""
    monkeypatch.setattr("abtui.limits.usable_cpus", lambda: 8)
    spec, n_arms, _ = _spec(tmp_path, case)
    levels = build_levels(spec)
    items = [it for lv in levels for it in lv.items]
    text = sum(schedule._text_len(it) for it in items)
    for bound, kept in (((len(items), text), True), ((len(items) - 1, text), False)):
        written: list = []
        sch = schedule.session_schedule(
            spec,
            level_sources(spec),
            sink=lambda batch, warmup: written.extend(batch),  # noqa: B023
            light=True,
            whole_up_to=bound,
        )
        assert all(isinstance(lv.items, Offsets) for lv in sch.levels)
        assert len(written) == len(items) + spec.load.warmup  # the file gets them all the same
        if not kept:
            assert sch.whole is None
            continue
        assert [(lv.rate, lv.concurrency) for lv in sch.whole] == [
            (lv.rate, lv.concurrency) for lv in levels
        ]
        assert [_rows(lv.items) for lv in sch.whole] == [_rows(lv.items) for lv in levels]
        want = schedule.segments_of(spec, levels, n_arms)
        assert schedule.segments_of(spec, sch.whole, n_arms) == want
    over = schedule.session_schedule(
        spec, level_sources(spec), light=True, whole_up_to=(len(items), text - 1)
    )
    assert over.whole is None


def test_level_items_know_their_count_and_raise_before_making_any(tmp_path):
    spec, _, _ = _spec(tmp_path, "poisson-duration")
    src = LevelItems(spec, spec.load.rate)
    n = len(src)
    assert 0 < n < int(40 * 2 * 2.5) + 20  # cut by the 2 s window
    assert _rows(src) == _rows(src)  # made again, the same
    assert all(it.arrival_s < 2.0 for it in src)
    from abtui.errors import SpecError

    late, _, _ = _spec(tmp_path, "file-replay")  # a 0.3 s window (at 2× speed)
    with open(late.workload.file, "w") as f:
        f.write(json.dumps({"id": "late", "prompt": "late question", "arrival_s": 5.0}) + "\n")
    with pytest.raises(SpecError, match="holds no request"):
        LevelItems(late, None)


def test_a_workload_file_changed_before_the_generators_read_it_stops_the_run(tmp_path):
    spec, n_arms, _ = _spec(tmp_path, "file-poisson")
    start = schedule.recipe_spec(spec)
    sch = schedule.session_schedule(spec, level_sources(spec), light=True)
    path = spec.workload.file
    _jsonl(path, 60, salt="edited ")
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    plan = ArmPlan(
        arm=0,
        target=None,
        items=[],
        warmup_items=[],
        mode="open",
        concurrency=None,
        recipe=schedule.Recipe(start, n_arms, 0, 1, sch.fingerprint),
    )
    with pytest.raises(schedule.ScheduleMismatch, match="not the one the session file records"):
        schedule.rebuild(plan)
    # in a generator process it is reported as the generator's failure, before anything is sent
    ctx = mp.get_context("spawn")
    results, stop = ctx.Queue(), ctx.Event()
    parent, child = ctx.Pipe()
    p = ctx.Process(target=generator_main, args=(plan, results, child, stop), daemon=True)
    p.start()
    try:
        msg = results.get(timeout=60)
    finally:
        p.join(timeout=10)
    assert isinstance(msg, Fatal) and msg.wid == 0
    assert msg.error.startswith("ScheduleMismatch: the workload")
    assert p.exitcode == 1


def test_the_main_process_holds_a_batch_of_prompts_never_all(tmp_path, monkeypatch):
    """A real run of 1,500 requests with 4,000-token prompts (~29 MB of prompt text): the main
    process's traced peak stays under a quarter of the text (5 MB at 3,000 tokens; it was 70 MB
    when the main process held every item and pickled them into each generator's start
    arguments); the session file records every prompt."""
    monkeypatch.setattr(schedule, "BATCH", 128)
    n, tokens = 1500, 4000
    with (
        SimProcess(SimConfig(port=0, ttft_ms=0, itl_ms=0)) as a,
        SimProcess(SimConfig(port=0, ttft_ms=0, itl_ms=0)) as b,
    ):
        spec = validate(
            spec_from_dict(
                {
                    "name": "prompts",
                    "arms": [{"name": "a", "url": a.url}, {"name": "b", "url": b.url}],
                    "workload": {"requests": n, "input_tokens": tokens, "output_tokens": 2},
                    "load": {"concurrency": 16},
                    "store": {"dir": str(tmp_path), "text": False},
                },
                "t.toml",
            )
        )
        tracemalloc.start()
        try:
            res = run_session(spec)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert res.status == "complete"
    with SessionReader(res.path) as rd:
        from abtui.hardware.host import cpu_model

        assert rd.meta()["host"]["cpu"] == cpu_model()  # the session names the machine's CPU
        text_bytes, stored, sent = rd._con.execute(
            "SELECT sum(strlen(prompt)), count(*), "
            "(SELECT count(*) FROM requests WHERE NOT warmup AND status = 'ok') FROM items"
        ).fetchone()
    assert stored == n + spec.load.warmup and sent == 2 * n
    assert text_bytes > n * tokens * 4
    assert peak < text_bytes / 4, (peak, text_bytes)


def test_the_context_check_counts_across_batches(monkeypatch):
    """The streamed context-window check says what one look at every item said: the count over
    every batch, the first five too long named, "…" when there are more."""
    from types import SimpleNamespace

    from abtui.client.items import Item
    from abtui.workload import context

    monkeypatch.setattr(context, "max_model_len", lambda url, *a, **k: 100 if "a" in url else None)
    targets = [SimpleNamespace(base_url=u, model="m", headers={}, tls=True) for u in ("a", "b")]
    check = context.ContextCheck(targets, ["small", "unsaid"])
    items = [
        Item(index=k, id=f"i{k}", n_input=95 if k % 3 == 0 else 10, max_tokens=8) for k in range(30)
    ]
    for lo in range(0, 30, 4):
        check.add(items[lo : lo + 4])
    events, messages = [], []
    check.report(
        SimpleNamespace(event=lambda kind, msg: events.append((kind, msg))),
        SimpleNamespace(message=messages.append),
    )
    assert events == [
        (
            "context_window",
            "10 of 30 requests need more than small's 100-token "
            "context window (prompt + max_tokens): i0, i3, i6, i9, i12, …",
        )
    ]
    assert len(messages) == 1 and "refuse or truncate" in messages[0]


def test_the_session_ships_a_small_workload_and_has_a_big_one_rebuilt(tmp_path, monkeypatch):
    """The plans: a small workload's segments whole (no recipe), a bigger one's recipe (the
    generators make their own items); both sessions record every item."""
    from abtui.runner.session import SessionRun

    with SimProcess(SimConfig(port=0)) as a, SimProcess(SimConfig(port=0)) as b:
        for name, ship_text in (("small", schedule.SHIP_TEXT), ("big", 100)):
            monkeypatch.setattr("abtui.runner.session.SHIP_TEXT", ship_text)
            spec = validate(
                spec_from_dict(
                    {
                        "name": name,
                        "arms": [{"name": "a", "url": a.url}, {"name": "b", "url": b.url}],
                        "workload": {"requests": 30, "input_tokens": 8},
                        "load": {"concurrency": 4},
                        "store": {"dir": str(tmp_path)},
                    },
                    "t.toml",
                )
            )
            run = SessionRun(spec)
            try:
                run._header()
                assert run._workload()
                run.worker_arm = [0, 1]
                plans = run._plans()
            finally:
                run.writer.close(status="failed")
            if name == "small":
                assert all(p.recipe is None for p in plans)
                assert [len(p.segments[0].items) for p in plans] == [30, 30]
                assert all(p.segments[0].items[0].prompt for p in plans)
            else:
                assert all(p.recipe is not None and p.segments is None for p in plans)
