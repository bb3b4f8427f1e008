"""``--schedule alternate`` with conversations: blocks are cut at conversation starts only, the
same way from whole items (a generator, the demo) and from the main process's offsets."""

from __future__ import annotations

import random

import pytest

from abtui.client.items import Item
from abtui.runner.schedule import session_schedule
from abtui.spec import spec_from_dict, validate
from abtui.workload.conversations import Conversation, Turn, turn_items, write_conversations
from abtui.workload.segments import block_bounds, level_sources, plan_segments


def _convs(lengths: list[int]) -> list[Conversation]:
    return [
        Conversation(
            id=f"c{c}",
            arrival_s=0.1 * c,
            turns=[
                Turn(messages=[{"role": "user", "content": f"c{c} t{k}"}], max_tokens=3)
                for k in range(n)
            ],
        )
        for c, n in enumerate(lengths)
    ]


def test_plain_items_are_cut_as_before():
    items = [Item(index=i, id=f"i{i}") for i in range(10)]
    assert block_bounds(items, 4) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert block_bounds(items, 1) == [(0, 10)]
    assert block_bounds(items[:2], 4) == [(0, 1), (1, 2)]


def test_cuts_move_on_to_the_next_conversation():
    items = turn_items(_convs([3, 1, 4, 2, 2]))  # 12 turns: starts at 0, 3, 4, 8, 10
    assert block_bounds(items, 4) == [(0, 3), (3, 8), (8, 10), (10, 12)]
    assert block_bounds(items, 2) == [(0, 8), (8, 12)]
    # one conversation longer than a block: fewer blocks, none split
    long = turn_items(_convs([9, 1]))
    assert block_bounds(long, 4) == [(0, 9), (9, 10)]
    for lo, hi in block_bounds(items, 3):
        assert items[lo].turn == 0
        assert hi == len(items) or items[hi].turn == 0


@pytest.mark.parametrize("blocks", [1, 2, 3, 5, 8])
def test_offsets_and_items_plan_the_same_blocks(tmp_path, blocks):
    rng = random.Random(blocks)
    path = tmp_path / "conv.jsonl"
    write_conversations(path, _convs([rng.randint(1, 6) for _ in range(15)]))
    spec = validate(
        spec_from_dict(
            {
                "arms": [{"name": "a", "url": "http://h/v1"}, {"name": "b", "url": "http://h2/v1"}],
                "workload": {"conversations": str(path)},
                "request": {"api": "chat"},
                "load": {"schedule": "alternate", "blocks": blocks},
            }
        )
    )
    light = session_schedule(spec, level_sources(spec), light=True)
    whole = session_schedule(spec, level_sources(spec))
    assert light.fingerprint == whole.fingerprint

    def plan(levels):
        segs = plan_segments(
            levels, runs=1, schedule="alternate", blocks=blocks, n_arms=2, open_loop=False
        )
        return [
            (s.block, s.arms, [it.index for it in s.items], [it.arrival_s for it in s.items])
            for s in segs
        ]

    got = plan(light.levels)
    assert got == plan(whole.levels)
    items = {it.index: it for it in whole.levels[0].items}
    seen = set()
    for _block, _arms, idx, _t in got[::2]:  # each block once (every arm plays it)
        convs = {items[i].conversation for i in idx}
        assert not convs & seen  # a conversation is in one block only, whole
        seen |= convs
        assert items[idx[0]].turn == 0


def test_the_stored_block_count_wins_over_the_count_from_the_requests():
    from abtui.workload.segments import Shape

    meta = {
        "mode": "alternate",
        "spec": {"load": {"blocks": 4}},
        "levels": [{"level": 0, "rate": None, "concurrency": None, "requests": 10}],
    }
    assert Shape.of_meta(meta).blocks == (4,)  # a file before the count: as items are cut
    meta["levels"][0]["blocks"] = 2  # conversations cut at their starts: fewer blocks
    assert Shape.of_meta(meta).blocks == (2,)
