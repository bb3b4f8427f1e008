"""Conversations under ``--schedule alternate`` (real generator processes, two simulators over
loopback, a real session file): the blocks are cut at conversation starts, so each
conversation is played whole in one block on each arm, turn after turn; the arms take turns
and never overlap in time; with two generators per arm each still plays whole conversations."""

from __future__ import annotations

import duckdb

from abtui.cli import main
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader
from abtui.workload.conversations import Conversation, Turn, write_conversations
from abtui.workload.segments import Shape

TURNS = (3, 1, 4, 2, 2, 3)  # turns of each conversation: 15 turns


def _write(path) -> None:
    convs = [
        Conversation(
            id=f"c{c}",
            arrival_s=0.02 * c,
            turns=[
                Turn(
                    messages=[{"role": "user", "content": f"c{c} t{k} " + "go on " * (3 + k)}],
                    max_tokens=4,
                    think_s=0.01 * (k > 0),
                )
                for k in range(n)
            ],
        )
        for c, n in enumerate(TURNS)
    ]
    write_conversations(path, convs)


def test_alternate_blocks_hold_whole_conversations(tmp_path):
    conv = tmp_path / "conv.jsonl"
    _write(conv)
    with (
        SimProcess(SimConfig(ttft_ms=3, itl_ms=2, model="sim-a", seed=1)) as a,
        SimProcess(SimConfig(ttft_ms=5, itl_ms=3, model="sim-b", seed=2)) as b,
    ):
        args = ["run", "--baseline", a.url, "--candidate", b.url, "--api", "chat"]
        args += ["--conversations", str(conv), "--schedule", "alternate", "--blocks", "3"]
        args += ["--generators", "2", "--name", "alt", "--sessions-dir", str(tmp_path)]
        assert main([*args, "--headless", "--warmup", "1"]) in (0, 3, 4)
    path = tmp_path / "alt.duckdb"
    with duckdb.connect(str(path), read_only=True) as con:
        rows = con.execute(
            "SELECT arm, block, conversation_id, turn, scheduled_ns, dispatched_ns, done_ns, "
            "status FROM requests WHERE NOT warmup ORDER BY arm, conversation_id, turn"
        ).fetchall()
    with SessionReader(path) as rd:
        meta = rd.meta()
    segments = meta["segments"]
    # the blocks as cut are in the file (abtui open counts "block k of n" against them)
    assert meta["levels"][0]["blocks"] == 3 and Shape.of_meta(meta).blocks == (3,)
    assert len(rows) == 2 * sum(TURNS) and {r[7] for r in rows} == {"ok"}
    # 3 blocks of 5 turns, each cut moved on to a conversation's start: turn 5 is inside c2
    # (turns 4-7), so the first cut is at c3 (turn 8), the second at c4 (turn 10)
    want = {"c0": 0, "c1": 0, "c2": 0, "c3": 1, "c4": 2, "c5": 2}
    for arm in (0, 1):
        mine = [r for r in rows if r[0] == arm]
        assert {(r[2], r[1]) for r in mine} == set(want.items())
        for c, n in enumerate(TURNS):
            turns = [r for r in mine if r[2] == f"c{c}"]
            assert [r[3] for r in turns] == list(range(n))
            for prev, cur in zip(turns, turns[1:], strict=False):
                assert cur[5] >= prev[6]  # each turn after the previous answer
    # A B | B A | A B, one arm at a time, never overlapping
    assert [(s["block"], s["arms"]) for s in segments] == [
        (0, ["baseline"]),
        (0, ["candidate"]),
        (1, ["candidate"]),
        (1, ["baseline"]),
        (2, ["baseline"]),
        (2, ["candidate"]),
    ]
    by_name = {"baseline": 0, "candidate": 1}
    spans = []
    for s in segments:
        arm = by_name[s["arms"][0]]
        sent = [r for r in rows if r[0] == arm and r[1] == s["block"]]
        spans.append((min(r[5] for r in sent), max(r[6] for r in sent)))
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start > end
