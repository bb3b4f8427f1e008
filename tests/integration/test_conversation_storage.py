"""How a conversation run is stored and read back (real `abtui run` against two batching-engine
simulators over loopback, real DuckDB files): each turn's `items.messages` holds only what its
prompt adds to the previous turn's, the reader rebuilds every whole prompt exactly as it was
sent, a turn whose previous turn is missing is refused as damage, a file written before the
turn columns reads as it did, and the md / HTML reports show the prefix cache's hit rate and
the median TTFT turn by turn (the candidate caches, the baseline does not)."""

from __future__ import annotations

import json

import duckdb
import pytest

from abtui.cli import main
from abtui.errors import StoreError
from abtui.sim.engine import SimConfig
from abtui.sim.preset_cli import PresetOptions
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader
from abtui.workload.conversations import (
    Conversation,
    Turn,
    read_conversations,
    turn_items,
    write_conversations,
)

PRESET = "h100:llama-3-8b:bf16"
N_CONV, N_TURNS = 3, 4


def _conversations(path) -> None:
    convs = []
    for c in range(N_CONV):
        turns = []
        for k in range(N_TURNS):
            msgs = [{"role": "user", "content": f"c{c} t{k} " + "tell me more about it " * 12}]
            if k == 0:
                msgs.insert(0, {"role": "system", "content": "answer briefly " * 40})
            turns.append(Turn(messages=msgs, max_tokens=6, think_s=0.02 * (k > 0)))
        convs.append(Conversation(id=f"c{c}", arrival_s=0.05 * c, turns=turns, seed=3))
    write_conversations(path, convs)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("convstore")
    conv = tmp / "conv.jsonl"
    _conversations(conv)

    def sim(caching: bool) -> SimProcess:
        preset = PresetOptions(PRESET, time_scale=4.0, prefix_caching=caching)
        return SimProcess(SimConfig(preset=preset, seed=1))

    with sim(False) as a, sim(True) as b:
        args = ["run", "--baseline", a.url, "--candidate", b.url, "--api", "chat"]
        args += ["--conversations", str(conv), "--name", "cs", "--sessions-dir", str(tmp)]
        assert main([*args, "--headless", "--warmup", "1"]) in (0, 3, 4)
    return tmp / "cs.duckdb", conv


def _stored(path) -> list[tuple]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(
            "SELECT item, conversation_id, turn, turn_messages, messages FROM items "
            "WHERE conversation_id IS NOT NULL ORDER BY item"
        ).fetchall()


def test_turns_store_what_they_add_and_read_back_whole(session):
    path, conv = session
    convs, _ = read_conversations(conv)
    sent = turn_items(convs)  # what the generator sends under the recorded history
    rows = _stored(path)
    assert len(rows) == N_CONV * N_TURNS
    for _item, cid, turn, own, messages in rows:
        msgs = json.loads(messages)
        c = convs[int(cid[1:])]
        if turn == 0:
            assert msgs == c.turns[0].messages and own == 2  # the system prompt and the user's
        else:  # the answer to the previous turn, then the turn's own message
            assert msgs == [
                {"role": "assistant", "content": c.recorded_answer(turn - 1)},
                *c.turns[turn].messages,
            ]
    with SessionReader(path) as rd:
        items = [it for it in rd.items() if it.conversation is not None]
    assert [(it.conversation, it.turn, it.messages) for it in items] == [
        (it.conversation, it.turn, it.messages) for it in sent
    ]
    assert [(it.think_s, it.turn_messages) for it in items] == [
        (it.think_s, it.turn_messages) for it in sent
    ]
    # the text stored grows with the turns, not with their square
    whole = sum(len(json.dumps(it.messages)) for it in sent)
    stored = sum(len(r[4]) for r in rows)
    assert stored < 0.5 * whole


def test_a_turn_without_its_previous_turn_is_damage(session, tmp_path):
    path, _ = session
    copy = tmp_path / "cut.duckdb"
    copy.write_bytes(path.read_bytes())
    with duckdb.connect(str(copy)) as con:
        con.execute("DELETE FROM items WHERE conversation_id = 'c1' AND turn = 1")
    with SessionReader(copy) as rd, pytest.raises(StoreError, match="turn 1 is not stored"):
        rd.items()


def test_a_file_before_the_turn_columns_reads_whole_prompts(session, tmp_path):
    """An older abtui stored each turn's whole prompt and had no turn columns."""
    path, _ = session
    with SessionReader(path) as rd:
        whole = {it.index: it.messages for it in rd.items()}
    old = tmp_path / "old.duckdb"
    old.write_bytes(path.read_bytes())
    with duckdb.connect(str(old)) as con:
        for i, msgs in whole.items():
            con.execute("UPDATE items SET messages = ? WHERE item = ?", [json.dumps(msgs), i])
        for col in ("conversation_id", "turn", "think_s", "turn_messages"):
            con.execute(f"ALTER TABLE items DROP COLUMN {col}")
    with SessionReader(old) as rd:
        items = rd.items()
    assert {it.index: it.messages for it in items} == whole
    assert all(it.conversation is None for it in items)


def test_reports_show_the_hit_rate_by_turn(session, tmp_path):
    path, _ = session
    for fmt in ("md", "html"):
        out = tmp_path / f"r.{fmt}"
        assert main(["report", str(path), "--format", fmt, "-o", str(out)]) in (0, 3, 4)
        text = out.read_text()
        assert "By turn: prefix-cache hit rate and TTFT" in text, fmt
    md = (tmp_path / "r.md").read_text().splitlines()
    start = md.index("### By turn: prefix-cache hit rate and TTFT")
    table = [ln for ln in md[start:] if ln.startswith("| ")][: N_TURNS + 1]
    heads = [c.strip() for c in table[0].strip("|").split("|")]
    assert heads == [
        "turn",
        "baseline hit",
        "baseline TTFT P50",
        "candidate hit",
        "candidate TTFT P50",
        "candidate vs baseline",
    ]
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in table[1:]]
    assert [r[0] for r in rows] == [str(k) for k in range(N_TURNS)]
    for r in rows:
        assert r[1].startswith("0.0% (")  # no prefix caching on the baseline
    # the candidate serves later turns' history (and the shared system prompt) from its cache
    assert all(float(r[3].split("%")[0]) > 30 for r in rows[1:]), rows
    # each turn's P50 TTFT is the median of that turn's ok measured requests on that arm
    with SessionReader(path) as rd:
        got = rd.query(
            "SELECT arm, turn, median((first_token_ns - dispatched_ns - COALESCE(connect_ns, 0))"
            " / 1e6) FROM requests WHERE status = 'ok' AND NOT warmup GROUP BY arm, turn"
        )
    want = {(a, t): ms for a, t, ms in got}
    for r in rows:
        k = int(r[0])
        base, cand = want[(0, k)], want[(1, k)]
        assert r[2] == f"{base:.1f} ms" and r[4] == f"{cand:.1f} ms", (r, base, cand)
        assert r[5] == f"{cand / base - 1:+.1%}", r


def test_the_summary_table_gives_the_hit_rate(session):
    """The headless summary's "prefix cache" row is the hit rate the diagnosis reports from the
    same responses (usage's cached tokens over the ok measured requests' prompt tokens)."""
    import io

    from abtui.report.console import print_session_summary
    from abtui.telemetry.diagnosis import diagnose

    path, _ = session
    out = io.StringIO()
    sums = print_session_summary(path, out, width=160)
    want = [d.prefix_cache.hit_rate for d in diagnose(path)]
    assert sums[0].prefix_hit_rate == want[0] == 0.0
    assert sums[1].prefix_hit_rate == pytest.approx(want[1]) and want[1] > 0.3
    row = next(ln for ln in out.getvalue().splitlines() if "prefix cache" in ln).split()
    assert row[-4:] == ["hit", "%", "0.0", f"{100 * want[1]:.1f}"], row


def test_the_replayed_panes_show_the_hit_rate(session, tmp_path):
    """`abtui open`: the engine line's running hit rate, rebuilt from the stored requests, is
    the one the report says (the same responses, the same tokens)."""
    from abtui.runner.live_replay import Replay
    from abtui.telemetry.diagnosis import diagnose
    from abtui.tui.widgets.overlay import arms_table
    from abtui.tui.widgets.pane import engine_line

    path, _ = session
    base, cand = (p.live.view() for p in Replay(path).end_state())
    want = diagnose(path)[1].prefix_cache.hit_rate
    assert cand.cache_hit == pytest.approx(want) and want > 0.3
    assert not base.cache_hit  # the baseline never hit: its line says nothing of a cache
    assert f"cache {want:.0%}" in engine_line({}, 40, cand.cache_hit).plain
    table = arms_table(["baseline", "candidate"], [base, cand], 100).plain.splitlines()
    assert table[0].split()[-1] == "cache"
    assert table[1].split()[-1] == "0%" and table[2].split()[-1] == f"{want:.0%}"
