"""Conversations through `abtui run` (real generator processes, real session files, loopback):
turns are sent in order on each arm, turn k at turn k − 1's completion plus its think time, the
history grows turn by turn, the session header and one connection per conversation reach the
server, `--history own` sends the arm's own answers, and a failed turn ends the conversation on
its arm only (the later turns recorded as skipped)."""

from __future__ import annotations

import asyncio
import json

import duckdb
import numpy as np
import pytest
from loopback import LoopbackServer

from abtui.cli import main
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader
from abtui.workload.conversations import Conversation, Turn, write_conversations

# 3 conversations of 3 turns, each started 30 ms after the previous; think times 50 / 80 ms
THINK = (0.0, 0.05, 0.08)
N_CONV, N_TURNS = 3, 3


def _conversations(path) -> list[Conversation]:
    convs = []
    for c in range(N_CONV):
        turns = []
        for k in range(N_TURNS):
            msgs = [{"role": "user", "content": f"conv {c} turn {k} " + "tell me more " * (4 + k)}]
            if k == 0:
                msgs.insert(0, {"role": "system", "content": "be brief " * 6})
            turns.append(Turn(messages=msgs, max_tokens=4, think_s=THINK[k], answer=f"rec{c}.{k}"))
        convs.append(Conversation(id=f"c{c}", arrival_s=0.03 * c, turns=turns))
    write_conversations(path, convs)
    return convs


def _run(tmp_path, urls, name, *extra) -> int:
    conv = tmp_path / "conv.jsonl"
    if not conv.exists():
        _conversations(conv)
    args = ["run", "--baseline", urls[0], "--candidate", urls[1], "--conversations", str(conv)]
    args += ["--api", "chat", "--name", name, "--sessions-dir", str(tmp_path), "--headless"]
    return main([*args, "--warmup", "1", *extra])


def _rows(path) -> list[tuple]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(
            "SELECT arm, conversation_id, turn, item, scheduled_ns, dispatched_ns, done_ns, "
            "n_input, status, error_class FROM requests WHERE NOT warmup "
            "ORDER BY arm, conversation_id, turn"
        ).fetchall()


@pytest.mark.serial  # asserts on the order of a few ms gaps
def test_turns_follow_each_arms_own_answers(tmp_path, capsys):
    with (
        SimProcess(SimConfig(ttft_ms=3, itl_ms=2, model="sim-a", seed=1)) as a,
        SimProcess(SimConfig(ttft_ms=12, itl_ms=8, model="sim-b", seed=2)) as b,
    ):
        rc = _run(tmp_path, (a.url, b.url), "conv")
    assert rc in (0, 3, 4)
    assert "conv.jsonl (recorded history)" in " ".join(capsys.readouterr().out.split())
    rows = _rows(tmp_path / "conv.duckdb")
    assert len(rows) == 2 * N_CONV * N_TURNS
    assert {r[8] for r in rows} == {"ok"}
    by = {(r[0], r[1], r[2]): r for r in rows}
    for c in range(N_CONV):
        cid = f"c{c}"
        # turn 0 goes at the conversation's arrival: the same instant on both arms
        assert by[0, cid, 0][4] == by[1, cid, 0][4]
        for arm in (0, 1):
            turns = [by[arm, cid, k] for k in range(N_TURNS)]
            assert [t[3] for t in turns] == sorted(t[3] for t in turns)  # one item a turn
            for k in range(1, N_TURNS):
                prev, cur = turns[k - 1], turns[k]
                # sent after the previous answer completed on this arm, plus the think time
                assert cur[4] == prev[6] + int(THINK[k] * 1e9)
                assert cur[5] >= prev[6] + int(THINK[k] * 1e9)
                assert cur[7] > prev[7]  # the history grows: more prompt tokens each turn
        # the slower arm asks its later turns later
        assert by[1, cid, N_TURNS - 1][4] > by[0, cid, N_TURNS - 1][4]
    with SessionReader(tmp_path / "conv.duckdb") as rd:
        t = rd.request_table()
        items = [it for it in rd.items() if "warmup" not in it.tags]
        verdict = rd.verdicts()[-1]
    # a turn is an item: the arms pair turn by turn
    assert sorted(set(t.turn.tolist())) == list(range(N_TURNS))
    assert [it.id for it in items] == [f"c{c}.{k}" for c in range(N_CONV) for k in range(N_TURNS)]
    rows_e2e = [
        e for e in verdict["result"]["pairs"][0]["comparison"]["effects"] if e["key"] == "e2e.p50"
    ]
    assert rows_e2e and rows_e2e[0]["paired"] == N_CONV * N_TURNS


class RecordingServer(LoopbackServer):
    """A chat endpoint that records each request's headers, body and client port, answers
    ``answer from <name> <n>``, keeps connections alive, and fails (500) the turns whose
    (session header value, user messages) is in ``fail``."""

    def __init__(
        self,
        name: str,
        fail: set[tuple[str, int]] | None = None,
        delay_s: float = 0.04,
        header: str = "x-session-id",
    ) -> None:
        self.name = name
        self.header = header  # the session header, lower case
        self.delay_s = delay_s  # before each answer: the conversations' turns overlap
        self.fail = fail or set()
        self.seen: list[dict] = []
        super().__init__()

    async def _handle(self, reader, writer) -> None:
        port = writer.get_extra_info("peername")[1]
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                lines = head.split("\r\n")
                hdrs = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (x.partition(":") for x in lines[1:] if x)
                }
                raw = await reader.readexactly(int(hdrs.get("content-length", 0)))
                if "/models" in lines[0]:
                    writer.write(_response(200, "application/json", '{"data":[{"id":"rec"}]}'))
                elif "/chat/completions" not in lines[0]:
                    writer.write(_response(404, "application/json", '{"error":"no"}'))
                else:
                    body = json.loads(raw)
                    n_user = sum(m["role"] == "user" for m in body["messages"])
                    self.seen.append({"port": port, "headers": hdrs, "body": body})
                    await asyncio.sleep(self.delay_s)
                    if (hdrs.get(self.header), n_user) in self.fail:
                        writer.write(_response(500, "application/json", '{"error":"down"}'))
                    else:
                        text = f"answer from {self.name} {len(self.seen)}"
                        events = [
                            {"choices": [{"index": 0, "delta": {"content": text}}]},
                            {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
                        ]
                        sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
                        writer.write(_response(200, "text/event-stream", sse + "data: [DONE]\n\n"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    def turns(self) -> dict[str, list[dict]]:
        """The measured chat requests by conversation, in the order they came."""
        out: dict[str, list[dict]] = {}
        for s in self.seen:
            sid = s["headers"].get(self.header)
            if sid is not None:
                out.setdefault(sid, []).append(s)
        return out


def _response(status: int, ctype: str, body: str) -> bytes:
    data = body.encode()
    return (
        f"HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {len(data)}\r\n\r\n"
    ).encode() + data


def _spec(tmp_path, a, b) -> str:
    """Both arms with no /metrics to scrape (the recording server has none)."""
    p = tmp_path / "arms.toml"
    p.write_text(
        "[[arms]]\n"
        f'name = "a"\nurl = "{a.url}"\nmetrics_url = "off"\n'
        "[[arms]]\n"
        f'name = "b"\nurl = "{b.url}"\nmetrics_url = "off"\n'
    )
    return str(p)


def _run_recorded(tmp_path, a, b, name, *extra) -> int:
    conv = tmp_path / "conv.jsonl"
    if not conv.exists():
        _conversations(conv)
    return main(
        [
            "run",
            _spec(tmp_path, a, b),
            "--conversations",
            str(conv),
            "--api",
            "chat",
            "--name",
            name,
            "--sessions-dir",
            str(tmp_path),
            "--headless",
            "--warmup",
            "1",
            *extra,
        ]
    )


def test_session_header_one_connection_and_own_history(tmp_path):
    with RecordingServer("a") as a, RecordingServer("b") as b:
        rc = _run_recorded(tmp_path, a, b, "own", "--history", "own")
    assert rc in (0, 3, 4)
    for server in (a, b):
        turns = server.turns()
        assert sorted(turns) == [f"c{c}" for c in range(N_CONV)]  # every turn names its own
        # the conversations overlap, on connections of their own
        assert len({r["port"] for reqs in turns.values() for r in reqs}) >= 2
        for cid, reqs in turns.items():
            assert len(reqs) == N_TURNS
            # one connection for the conversation's turns
            assert len({r["port"] for r in reqs}) == 1, (cid, [r["port"] for r in reqs])
            for k, r in enumerate(reqs):
                msgs = r["body"]["messages"]
                assert sum(m["role"] == "user" for m in msgs) == k + 1  # in order
                said = [m["content"] for m in msgs if m["role"] == "assistant"]
                # the arm's own earlier answers, as it gave them (not the file's)
                assert len(said) == k
                assert all(s.startswith(f"answer from {server.name} ") for s in said)
                if k:
                    prev = reqs[k - 1]["body"]["messages"]
                    assert msgs[: len(prev)] == prev  # the history grows by the last exchange
    with duckdb.connect(str(tmp_path / "own.duckdb"), read_only=True) as con:
        texts = dict(
            ((arm, cid, turn), text)
            for arm, cid, turn, text in con.execute(
                "SELECT arm, conversation_id, turn, text FROM requests WHERE NOT warmup"
            ).fetchall()
        )
    for arm, server in enumerate((a, b)):
        for cid, reqs in server.turns().items():
            said = [m["content"] for m in reqs[-1]["body"]["messages"] if m["role"] == "assistant"]
            assert said == [texts[arm, cid, k] for k in range(N_TURNS - 1)]


def test_own_history_without_stored_text(tmp_path):
    """--no-store-text keeps the answers out of the file, not out of the next turn."""
    with RecordingServer("a", delay_s=0) as a, RecordingServer("b", delay_s=0) as b:
        rc = _run_recorded(tmp_path, a, b, "notext", "--history", "own", "--no-store-text")
    assert rc in (0, 3, 4)
    for server in (a, b):
        for reqs in server.turns().values():
            said = [m["content"] for m in reqs[-1]["body"]["messages"] if m["role"] == "assistant"]
            assert len(said) == N_TURNS - 1
            assert all(x.startswith(f"answer from {server.name} ") for x in said)
    with duckdb.connect(str(tmp_path / "notext.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM requests WHERE text IS NOT NULL").fetchone() == (
            0,
        )


def test_recorded_history_custom_header_and_a_failed_turn(tmp_path):
    # on arm b, conversation c1's turn 1 fails: its turn 2 is skipped there, sent on arm a
    with (
        RecordingServer("a", header="x-conv") as a,
        RecordingServer("b", fail={("c1", 2)}, header="x-conv") as b,
    ):
        rc = _run_recorded(tmp_path, a, b, "rec", "--session-header", "X-Conv")
    assert rc in (0, 3, 4)
    for server in (a, b):
        for cid, reqs in server.turns().items():
            c = int(cid[1:])
            for k, r in enumerate(reqs):
                said = [m["content"] for m in r["body"]["messages"] if m["role"] == "assistant"]
                assert said == [f"rec{c}.{j}" for j in range(k)]  # the file's answers
    assert not any("x-session-id" in r["headers"] for r in a.seen + b.seen)
    assert len(a.turns()["c1"]) == N_TURNS
    assert len(b.turns()["c1"]) == 2  # turn 2 never reached b
    rows = {(r[0], r[1], r[2]): r for r in _rows(tmp_path / "rec.duckdb")}
    assert rows[1, "c1", 1][8:] == ("error", "http")
    assert rows[1, "c1", 2][8:] == ("cancelled", "skipped")
    assert rows[0, "c1", 2][8] == "ok"
    assert all(r[8] == "ok" for k, r in rows.items() if k[1] != "c1" or k[0] == 0)


def _check_turn_times(rows: dict) -> None:
    for arm in (0, 1):
        for c in range(N_CONV):
            for k in range(1, N_TURNS):
                prev, cur = rows[arm, f"c{c}", k - 1], rows[arm, f"c{c}", k]
                assert cur[4] == prev[6] + int(THINK[k] * 1e9)


def test_closed_loop_keeps_n_conversations_under_way(tmp_path):
    with RecordingServer("a", delay_s=0.01) as a, RecordingServer("b", delay_s=0.01) as b:
        rc = _run_recorded(tmp_path, a, b, "closed", "--concurrency", "1")
    assert rc in (0, 3, 4)
    rows = {(r[0], r[1], r[2]): r for r in _rows(tmp_path / "closed.duckdb")}
    assert len(rows) == 2 * N_CONV * N_TURNS and {r[8] for r in rows.values()} == {"ok"}
    _check_turn_times(rows)
    for arm in (0, 1):
        for c in range(1, N_CONV):  # one at a time: the next starts when the last turn ended
            assert rows[arm, f"c{c}", 0][4] >= rows[arm, f"c{c - 1}", N_TURNS - 1][6]


def test_two_generators_per_arm_each_play_whole_conversations(tmp_path):
    with RecordingServer("a") as a, RecordingServer("b") as b:
        rc = _run_recorded(tmp_path, a, b, "gen2", "--generators", "2")
    assert rc in (0, 3, 4)
    rows = {(r[0], r[1], r[2]): r for r in _rows(tmp_path / "gen2.duckdb")}
    assert len(rows) == 2 * N_CONV * N_TURNS and {r[8] for r in rows.values()} == {"ok"}
    _check_turn_times(rows)
    for server in (a, b):
        for reqs in server.turns().values():
            assert len(reqs) == N_TURNS and len({r["port"] for r in reqs}) == 1


def test_a_sharegpt_dump_replays_whole_conversations(tmp_path):
    """From a ShareGPT dump through the importer to the endpoint: every human turn an answer
    follows is sent, in order, carrying the dump's earlier answers."""
    dump = [
        {
            "id": f"s{c}",
            "conversations": [
                x
                for k in range(3)
                for x in (
                    {"from": "human", "value": f"question {c}.{k}"},
                    {"from": "gpt", "value": f"answer {c}.{k}"},
                )
            ],
        }
        for c in range(2)
    ]
    src, conv = tmp_path / "sg.json", tmp_path / "sg_conv.jsonl"
    src.write_text(json.dumps(dump))
    argv = ["workload", "conversations", "sharegpt", str(src), "-o", str(conv)]
    assert main([*argv, "--think", "0.02:0.5", "--rate", "20"]) == 0
    with RecordingServer("a") as a, RecordingServer("b") as b:
        rc = main(
            ["run", _spec(tmp_path, a, b), "--conversations", str(conv), "--api", "chat"]
            + ["--name", "sg", "--sessions-dir", str(tmp_path), "--headless", "--warmup", "0"]
        )
    assert rc in (0, 3, 4)
    for server in (a, b):
        turns = server.turns()
        assert sorted(turns) == ["s0", "s1"]
        for cid, reqs in turns.items():
            c = cid[1:]
            assert [[m["content"] for m in r["body"]["messages"]] for r in reqs] == [
                [x for j in range(k) for x in (f"question {c}.{j}", f"answer {c}.{j}")]
                + [f"question {c}.{k}"]
                for k in range(3)
            ]


def test_no_session_header(tmp_path):
    with RecordingServer("a") as a, RecordingServer("b") as b:
        rc = _run_recorded(tmp_path, a, b, "nohdr", "--session-header", "", "--requests", "3")
    assert rc in (0, 2, 3, 4)
    for server in (a, b):
        chats = [s for s in server.seen if "x-session-id" in s["headers"]]
        assert chats == [] and len(server.seen) == 3 + 1  # the first conversation, warm-up


def test_a_plain_workload_has_no_conversation_and_old_files_read(tmp_path):
    """A plain workload's requests carry no conversation (NULL columns, NA turn); a file
    without the columns reads the same."""
    with SimProcess(SimConfig(ttft_ms=2, itl_ms=1, seed=1)) as s:
        rc = main(
            ["run", "--baseline", s.url, "--candidate", s.url, "--requests", "4"]
            + ["--concurrency", "2", "--name", "plain", "--sessions-dir", str(tmp_path)]
            + ["--headless", "--warmup", "0"]
        )
    assert rc in (0, 3, 4)
    with duckdb.connect(str(tmp_path / "plain.duckdb"), read_only=True) as con:
        got = con.execute("SELECT DISTINCT conversation_id, turn FROM requests").fetchall()
    assert got == [(None, None)]
    with SessionReader(tmp_path / "plain.duckdb") as rd:
        assert (rd.request_table().turn == np.iinfo(np.int64).min).all()
        n = len(rd.request_table())
    # a file of an abtui before conversations (no such columns) reads the same
    with duckdb.connect(str(tmp_path / "plain.duckdb")) as con:
        con.execute("ALTER TABLE requests DROP COLUMN conversation_id")
        con.execute("ALTER TABLE requests DROP COLUMN turn")
    with SessionReader(tmp_path / "plain.duckdb") as rd:
        t = rd.request_table()
        assert len(t) == n and (t.turn == np.iinfo(np.int64).min).all()
