"""Conversations as a workload unit: the data model, abtui's conversation file, and the
importers (ShareGPT whole conversations, Mooncake sessions with hash_ids, synthetic)."""

from __future__ import annotations

import json
import statistics

import pytest

from abtui.client.items import Item
from abtui.client.stream import Target
from abtui.errors import UsageError, WorkloadError
from abtui.runner.turns import conversations_of, session_target
from abtui.workload.conversation_import import (
    NO_TURN,
    UNANSWERED,
    ConversationShape,
    ThinkTime,
    mooncake_conversations,
    sharegpt_conversations,
    synthetic_conversations,
)
from abtui.workload.conversations import (
    Conversation,
    Turn,
    own_history_messages,
    read_conversations,
    turn_items,
    write_conversations,
)
from abtui.workload.jsonl import PromptSynth

SHAREGPT = [
    {
        "id": "a",
        "conversations": [
            {"from": "system", "value": "You are terse."},
            {"from": "human", "value": "hi"},
            {"from": "gpt", "value": "hello there, how can I help" * 2},
            {"from": "human", "value": "what is 2+2"},
            {"from": "human", "value": "in words"},
            {"from": "gpt", "value": "four"},
            {"from": "human", "value": "thanks"},
            {"from": "gpt", "value": "you are welcome"},
            {"from": "human", "value": "bye"},  # never answered
        ],
    },
    {"id": "lonely", "conversations": [{"from": "human", "value": "anyone?"}]},
    {
        "id": "b",
        "conversations": [{"from": "user", "value": "q"}, {"from": "assistant", "value": "r"}],
    },
]


def _write(tmp_path, name, rows, as_lines=True):
    p = tmp_path / name
    if as_lines:
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        p.write_text(json.dumps(rows))
    return p


def test_sharegpt_whole_conversations_and_history(tmp_path):
    p = _write(tmp_path, "sg.json", SHAREGPT, as_lines=False)
    convs, stats, left = sharegpt_conversations(p, think=ThinkTime(3.0, 1.0), seed=7)
    assert [c.id for c in convs] == ["a", "b"] and stats.kept == 2
    assert left == {NO_TURN: 1, UNANSWERED: 1}
    a = convs[0]
    assert a.n_turns == 3  # the single-request importer kept only the first pair
    assert [t.answer for t in a.turns][1:] == ["four", "you are welcome"]
    assert a.turns[0].max_tokens == round(len(a.turns[0].answer) / 4)
    assert a.turns[1].messages == [{"role": "user", "content": "what is 2+2\nin words"}]
    # think times: none before the first turn, drawn (seeded) before the others
    assert a.turns[0].think_s == 0 and all(t.think_s > 0 for t in a.turns[1:])
    again, _, _ = sharegpt_conversations(p, think=ThinkTime(3.0, 1.0), seed=7)
    assert [t.think_s for t in again[0].turns] == [t.think_s for t in a.turns]
    # turn 2's prompt: the system prompt, every earlier question and its recorded answer
    m = a.messages(2)
    assert [x["role"] for x in m] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert m[2]["content"] == a.turns[0].answer and m[4]["content"] == "four"
    assert m[-1]["content"] == "thanks"
    assert len(a.messages(0)) == 2 and a.messages(1)[:3] == m[:3]  # history only grows
    # --history own: the arm's answers in their place, the questions the same
    own = a.messages(2, answers=["A0", "A1"])
    assert [x["content"] for x in own if x["role"] == "assistant"] == ["A0", "A1"]
    assert [x for x in own if x["role"] != "assistant"] == [
        x for x in m if x["role"] != "assistant"
    ]
    with pytest.raises(ValueError, match="2 earlier answers"):
        a.messages(2, answers=["A0"])


def test_sharegpt_rate_spaces_conversations(tmp_path):
    p = _write(tmp_path, "sg.jsonl", SHAREGPT * 20)
    convs, _, _ = sharegpt_conversations(p, rate=4.0)
    starts = [c.arrival_s for c in convs]
    assert starts[0] == 0 and starts == sorted(starts) and 5 < starts[-1] < 20
    with pytest.raises(UsageError, match="--rate"):
        sharegpt_conversations(p, rate=-1.0)


def test_sharegpt_bad_rows_name_file_line_and_field(tmp_path):
    rows = [SHAREGPT[0], {"id": "x", "conversations": [{"from": "human", "value": 3}]}]
    p = _write(tmp_path, "bad.jsonl", rows)
    with pytest.raises(WorkloadError) as e:
        sharegpt_conversations(p)
    assert str(e.value).startswith(f"{p}:2: conversations[0].value must be a string")
    convs, stats, _ = sharegpt_conversations(p, skip_bad=True)
    assert len(convs) == 1 and stats.skipped == 1
    with pytest.raises(WorkloadError, match="no conversations"):
        sharegpt_conversations(_write(tmp_path, "none.jsonl", [SHAREGPT[1]]))


def _mooncake_rows():
    return [
        {
            "timestamp": 1000,
            "input_length": 1100,
            "output_length": 20,
            "hash_ids": [1, 2, 3],
            "session_id": "s1",
        },
        {"timestamp": 1500, "input_length": 600, "output_length": 5, "hash_ids": [1, 9]},
        {
            "timestamp": 4000,
            "input_length": 1700,
            "output_length": 30,
            "hash_ids": [1, 2, 3, 4],
            "session_id": "s1",
            "delay": 2500,
        },
        {
            "timestamp": 9000,
            "input_length": 2000,
            "output_length": 30,
            "hash_ids": [1, 2, 3, 4],
            "session_id": "s1",
        },
    ]


def test_mooncake_sessions_reproduce_the_traces_block_sharing(tmp_path):
    p = _write(tmp_path, "mc.jsonl", _mooncake_rows())
    convs, stats, _ = mooncake_conversations(p)
    assert stats.kept == 4 and [c.id for c in convs] == ["s1", "mooncake1"]
    s1 = convs[0]
    assert not s1.cumulative and s1.n_turns == 3 and s1.arrival_s == 0
    assert [t.think_s for t in s1.turns] == [0.0, 2.5, 5.0]  # delay, else the timestamp gap
    assert convs[1].arrival_s == 0.5
    synth = PromptSynth(0)
    prompts = [s1.messages(k, synth=synth)[0]["content"].split() for k in range(3)]
    other = convs[1].messages(0, synth=synth)[0]["content"].split()
    assert [len(w) for w in prompts] == [1100, 1700, 2000] and len(other) == 600
    # a turn's prompt is its own (the trace's input holds the history): blocks 1-3 shared
    # word for word between turns, block 4 between the last two, block 1 only with the other
    assert prompts[1][:1100] == prompts[0] and prompts[2][:1700] == prompts[1]
    assert other[:512] == prompts[0][:512] and other[512] != prompts[0][512]
    # the same ids give the same text from another synthesiser too
    assert s1.messages(0, synth=PromptSynth(0)) == s1.messages(0, synth=synth)


def test_mooncake_bad_rows(tmp_path):
    rows = _mooncake_rows()
    rows[2]["hash_ids"] = [1, 2.5]
    p = _write(tmp_path, "mc.jsonl", rows)
    with pytest.raises(WorkloadError) as e:
        mooncake_conversations(p)
    assert str(e.value).startswith(f"{p}:3: hash_ids must be a list of whole numbers")
    rows = _mooncake_rows()
    rows[1]["session_id"] = True
    with pytest.raises(WorkloadError, match=r"mc2.jsonl:2: session_id must be"):
        mooncake_conversations(_write(tmp_path, "mc2.jsonl", rows))
    rows = _mooncake_rows()
    rows[2]["delay"] = -5
    with pytest.raises(
        WorkloadError, match=r"mc3.jsonl:3: delay must be milliseconds from 0 to 86,400,000, got -5"
    ):
        mooncake_conversations(_write(tmp_path, "mc3.jsonl", rows))


def test_synthetic_conversations_share_the_system_prompt_only():
    shape = ConversationShape(system_tokens=100, think=ThinkTime(2.0, 1.0), rate=2.0)
    convs = synthetic_conversations(300, seed=3, shape=shape)
    assert synthetic_conversations(300, seed=3, shape=shape)[5].messages(0) == convs[5].messages(0)
    assert all(1 <= c.n_turns <= 20 for c in convs)
    assert 3 <= statistics.median(c.n_turns for c in convs) <= 5
    systems = {c.turns[0].messages[0]["content"] for c in convs}
    assert len(systems) == 1 and len(next(iter(systems)).split()) == 100
    firsts = [c.turns[0].messages[1]["content"] for c in convs]
    assert len({f.split()[0] for f in firsts}) == 300  # no other prefix shared by accident
    thinks = [t.think_s for c in convs for t in c.turns[1:]]
    assert all(c.turns[0].think_s == 0 for c in convs)
    assert 1.7 < statistics.mean(thinks) < 2.3
    starts = [c.arrival_s for c in convs]
    assert starts == sorted(starts) and 120 < starts[-1] < 180  # ~300 / 2 per second
    long = max(convs, key=lambda c: c.n_turns)
    k = long.n_turns - 1
    assert len(long.messages(k)) == 2 * k + 2  # system, k question/answer pairs, the question
    assert len(long.messages(k)[2]["content"].split()) == long.turns[0].max_tokens
    with pytest.raises(UsageError, match="think time"):
        synthetic_conversations(2, shape=ConversationShape(think=ThinkTime(1.0, 0.0)))


def test_conversation_file_round_trip(tmp_path):
    convs = synthetic_conversations(20, seed=1)
    mc, _, _ = mooncake_conversations(_write(tmp_path, "mc.jsonl", _mooncake_rows()))
    path = tmp_path / "conv.jsonl"
    assert write_conversations(path, convs + mc) == 22
    back, stats = read_conversations(path)
    assert stats.kept == 22
    by_id = {c.id: c for c in back}
    synth = PromptSynth(0)
    for c in convs + mc:
        b = by_id[c.id]
        assert (b.arrival_s, b.cumulative, b.n_turns) == (c.arrival_s, c.cumulative, c.n_turns)
        for k in range(c.n_turns):
            assert b.messages(k, synth=synth) == c.messages(k, synth=synth)
            assert (b.turns[k].max_tokens, b.turns[k].think_s) == (
                c.turns[k].max_tokens,
                c.turns[k].think_s,
            )


@pytest.mark.parametrize(
    ("turns", "words"),
    [
        (
            [{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}],
            "turns[0].max_tokens = -1 is out of range",
        ),
        (
            [
                {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4},
                {"messages": [{"role": "user", "content": "y"}], "max_tokens": 4, "think_s": "5"},
            ],
            "turns[1].think_s = '5' is out of range",
        ),
        ([{"messages": [], "max_tokens": 4}], "turns[0].messages must be a non-empty list"),
        ([{"messages": [{"content": "x"}], "max_tokens": 4}], "turns[0].messages[0] must be"),
        (
            [{"messages": [{"role": "user", "content": "x"}], "max_tokens": 4, "thinks": 1}],
            "turns[0]: unknown field 'thinks'",
        ),
        ([{"prefix_ids": [1], "max_tokens": 4}], "turns[0].prefix_ids needs"),
        (
            [{"messages": [{"role": "user", "content": "x"}], "max_tokens": 4, "think_s": 1}],
            "turns[0].think_s must be 0",
        ),
        ([], "turns must be a non-empty list"),
    ],
)
def test_conversation_file_bad_lines(tmp_path, turns, words):
    good = {
        "id": "ok",
        "turns": [{"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}],
    }
    p = _write(tmp_path, "c.jsonl", [good, {"id": "bad", "turns": turns}])
    with pytest.raises(WorkloadError) as e:
        read_conversations(p)
    assert str(e.value).startswith(f"{p}:2: {words}"), str(e.value)
    convs, stats = read_conversations(p, skip_bad=True)
    assert [c.id for c in convs] == ["ok"] and stats.skipped == 1


def test_turn_messages_are_copied_not_shared():
    c = Conversation("c", 0.0, [Turn([{"role": "user", "content": "a"}], 4)])
    c.messages(0).append({"role": "user", "content": "b"})
    assert c.messages(0) == [{"role": "user", "content": "a"}]
    with pytest.raises(IndexError):
        c.messages(1)


def test_cli_writes_conversations_and_refuses_bad_input(tmp_path, capsys):
    from abtui.cli import main

    sg = _write(tmp_path, "sg.json", SHAREGPT, as_lines=False)
    out = tmp_path / "out.jsonl"
    assert main(["workload", "conversations", "sharegpt", str(sg), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "2 conversations, 4 turns" in err and f"1 {NO_TURN} left out" in err
    back, _ = read_conversations(out)
    assert [c.n_turns for c in back] == [3, 1]
    assert back[0].messages(2) == sharegpt_conversations(sg)[0][0].messages(2)

    syn = tmp_path / "syn.jsonl"
    argv = ["workload", "conversations", "synthetic", "-o", str(syn), "--conversations", "30"]
    assert main([*argv, "--think", "2:0.5", "--turns", "3"]) == 0
    assert len(read_conversations(syn)[0]) == 30
    assert main([*argv, "--think", "2:0"]) == 2  # argparse: a CV of 0 is refused
    assert "think time" in capsys.readouterr().err

    mc = _write(tmp_path, "mc.jsonl", _mooncake_rows())
    assert main(["workload", "conversations", "mooncake", str(mc), "-o", str(out)]) == 0
    rows = _mooncake_rows()
    rows[3]["output_length"] = "many"
    bad = _write(tmp_path, "bad.jsonl", rows)
    out2 = tmp_path / "never.jsonl"
    assert main(["workload", "conversations", "mooncake", str(bad), "-o", str(out2)]) == 2
    assert f"{bad}:4: output_length must be a number" in capsys.readouterr().err
    assert not out2.exists()
    assert main(["workload", "conversations", "sharegpt", "-o", str(out2)]) == 2
    assert "needs the trace file" in capsys.readouterr().err


# ---------------------------------------------------------------- turns as items, for a run


def _two_turns() -> list[Conversation]:
    sys_user = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    return [
        Conversation(
            id="a",
            arrival_s=0.5,
            turns=[
                Turn(messages=sys_user, max_tokens=5, answer="hello"),
                Turn(messages=[{"role": "user", "content": "more"}], max_tokens=7, think_s=2.0),
            ],
        ),
        Conversation(
            id="b\r\nX-Evil: 1",
            arrival_s=1.0,
            turns=[Turn(messages=[{"role": "user", "content": "q"}], max_tokens=3)],
        ),
    ]


def test_turn_items_carry_the_recorded_history_and_the_conversation():
    items = turn_items(_two_turns())
    assert [(it.index, it.id, it.conversation, it.turn) for it in items] == [
        (0, "a.0", "a", 0),
        (1, "a.1", "a", 1),
        (2, "b\r\nX-Evil: 1.0", "b\r\nX-Evil: 1", 0),
    ]
    assert [it.arrival_s for it in items] == [0.5, 0.5, 1.0]  # the conversation's arrival
    assert items[1].think_s == 2.0 and items[1].max_tokens == 7
    assert [m["content"] for m in items[1].messages] == ["be brief", "hi", "hello", "more"]
    assert [it.turn_messages for it in items] == [2, 1, 1]
    assert [len(g) for g in conversations_of(items)] == [2, 1]


def test_own_history_puts_the_arms_answers_in_place_of_the_recorded_ones():
    items = turn_items(_two_turns())
    msgs = own_history_messages([(items[0], "my own answer")], items[1])
    assert msgs == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "my own answer"},
        {"role": "user", "content": "more"},
    ]
    assert own_history_messages([], items[0]) == items[0].messages
    whole = Item(index=0, id="m", messages=[{"role": "user", "content": "x"}], turn=1)
    assert own_history_messages([(items[0], "ignored")], whole) == whole.messages  # Mooncake


def test_session_target_names_the_conversation_in_one_header_line():
    t = Target(base_url="http://h/v1", model="m", api="chat", headers={"Authorization": "k"})
    s = session_target(t, "b\r\nX-Evil: 1", "X-Session-ID")
    assert s.headers["X-Session-ID"] == "b%0D%0AX-Evil:%201"
    assert s.affinity == "b\r\nX-Evil: 1" and s.headers["Authorization"] == "k"
    assert t.headers == {"Authorization": "k"}  # the arm's own target is unchanged
    assert session_target(t, "c", None).headers == t.headers


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"request": {"api": "completions"}}, "is sent as chat messages"),
        ({"request": {"session_header": "X Bad:"}}, "is not an HTTP header name"),
        ({"workload": {"history": "mine"}}, "workload.history must be one of"),
        ({"workload": {"file": "conv.jsonl"}}, "takes no workload.file"),
    ],
)
def test_a_conversation_spec_is_checked(tmp_path, change, needle):
    from abtui.errors import SpecError
    from abtui.spec import spec_from_dict, validate

    path = tmp_path / "conv.jsonl"
    write_conversations(path, _two_turns())
    data = {
        "arms": [{"name": "a", "url": "http://h/v1"}, {"name": "b", "url": "http://h2/v1"}],
        "workload": {"conversations": str(path)},
        "request": {"api": "chat"},
    }
    assert validate(spec_from_dict(json.loads(json.dumps(data)))).load.arrival == "replay"
    for section, fields in change.items():
        data.setdefault(section, {}).update(
            {k: str(path) if v == "conv.jsonl" else v for k, v in fields.items()}
        )
    with pytest.raises(SpecError) as e:
        validate(spec_from_dict(data))
    assert needle in str(e.value)


def test_a_run_plays_the_first_requests_turns_at_each_conversations_arrival(tmp_path):
    from abtui.spec import spec_from_dict, validate
    from abtui.workload.build import build_items

    path = tmp_path / "conv.jsonl"
    write_conversations(path, _two_turns())
    data = {
        "arms": [{"name": "a", "url": "http://h/v1"}, {"name": "b", "url": "http://h2/v1"}],
        "workload": {"conversations": str(path)},
        "request": {"api": "chat"},
        "load": {"speedup": 2.0},
    }
    items = build_items(validate(spec_from_dict(data)), None)
    assert [(it.id, it.arrival_s) for it in items] == [
        ("a.0", 0.25),
        ("a.1", 0.25),
        (
            "b\r\nX-Evil: 1.0",
            0.5,
        ),
    ]
    data["workload"]["requests"] = 1  # the last conversation is cut short
    data["load"] = {"rate": 4.0, "arrival": "constant"}
    assert [(it.id, it.arrival_s) for it in build_items(validate(spec_from_dict(data)), 4.0)] == [
        ("a.0", 0.0)
    ]


def test_generators_share_whole_conversations():
    from abtui.workload.segments import Segment, shard

    items = turn_items(_two_turns() + _two_turns()[:1])  # a, b, a again: 2 + 1 + 2 turns
    seg = Segment(items, "open", None)
    shares = [[it.index for it in shard([seg], g, 2)[0].items] for g in (0, 1)]
    assert shares == [[0, 1, 3, 4], [2]]
