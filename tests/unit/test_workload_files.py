"""Workload files: abtui's JSONL format, the trace importers (on small fixtures that follow the
public formats, bad lines included), `abtui workload import|inspect`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from abtui.cli import main
from abtui.errors import WorkloadError
from abtui.sim.engine import count_prompt_tokens
from abtui.workload.importers import import_trace
from abtui.workload.inspect import prefix_share, workload_stats
from abtui.workload.jsonl import read_workload, write_jsonl

FIX = Path(__file__).parents[1] / "fixtures" / "traces"

# format, file, where the bad row is, rows kept with --skip-bad
CASES = [
    ("sharegpt", "sharegpt.json", ' entry 2 (id "conv-bad", line 13)', 3),
    ("mooncake", "mooncake.jsonl", 4, 4),
    ("azure", "azure.csv", 5, 4),
    ("burstgpt", "burstgpt.csv", 5, 3),
]


@pytest.mark.parametrize(("fmt", "name", "bad_at", "kept"), CASES)
def test_a_bad_line_stops_with_file_and_line(fmt, name, bad_at, kept):
    with pytest.raises(WorkloadError) as e:
        import_trace(fmt, FIX / name)
    assert f"{FIX / name}:{bad_at}:" in e.value.message
    assert "--skip-bad" in e.value.hint


@pytest.mark.parametrize(("fmt", "name", "bad_at", "kept"), CASES)
def test_skip_bad_skips_and_counts(fmt, name, bad_at, kept, tmp_path):
    recs, stats, _ = import_trace(fmt, FIX / name, skip_bad=True)
    assert stats.skipped == 1 and stats.kept == kept == len(recs)
    assert f":{bad_at}:" in stats.examples[0]
    out = tmp_path / "w.jsonl"
    assert write_jsonl(out, recs) == kept
    wl = read_workload(out)  # what the importer wrote reads back
    assert len(wl.items) == kept
    assert [it.arrival_s for it in wl.items] == sorted(it.arrival_s for it in wl.items)


def test_sharegpt_prompt_is_the_human_turn_and_length_the_answer():
    recs, _, _ = import_trace("sharegpt", FIX / "sharegpt.json", skip_bad=True)
    assert recs[0]["id"] == "conv-a" and recs[0]["prompt"] == "What is the capital of France?"
    # 52 characters of answer ≈ 13 tokens at 4 characters a token
    assert recs[0]["max_tokens"] == 13
    assert recs[1]["prompt"] == "Name three primes." and "arrival_s" not in recs[1]


def test_mooncake_keeps_shared_prefix_blocks_shared(tmp_path):
    recs, _, _ = import_trace("mooncake", FIX / "mooncake.jsonl", skip_bad=True)
    assert [r["arrival_s"] for r in recs] == [0.0, 0.25, 0.6, 1.0]
    out = tmp_path / "m.jsonl"
    write_jsonl(out, recs)
    items = read_workload(out).items
    words = [it.prompt.split() for it in items]
    # prompts are as long as the trace says (the simulator counts words as tokens)
    assert [count_prompt_tokens(it.prompt) for it in items] == [1200, 1100, 300, 1500]
    # [0,1,2] and [0,1,3]: the first 1024 tokens are the same text, then they differ
    assert words[0][:1024] == words[1][:1024] and words[0][1024] != words[1][1024]
    # [0,1,2] again (longer): the whole 1200-token prompt is a prefix of the 1500-token one
    assert words[3][:1200] == words[0]
    assert words[2][0] != words[0][0]  # block 4 shares nothing
    assert 0.4 < prefix_share(items) < 0.7


def test_azure_timestamps_become_offsets_and_burstgpt_failures_are_counted():
    recs, _, _ = import_trace("azure", FIX / "azure.csv", skip_bad=True)
    assert recs[0]["arrival_s"] == 0.0
    assert recs[1]["arrival_s"] == pytest.approx(4.314579, abs=1e-6)
    assert [r["input_tokens"] for r in recs] == [374, 396, 879, 1500]
    recs, _, note = import_trace("burstgpt", FIX / "burstgpt.csv", skip_bad=True)
    assert [r["arrival_s"] for r in recs] == [0.0, 113.0, 165.0]
    assert "1 rows with 0 response tokens" in note


def _write(tmp_path, lines: list[str]) -> Path:
    p = tmp_path / "w.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"prompt": "hi", "colour": 1}', "unknown field 'colour'"),
        ('{"prompt": "hi", "input_tokens": 5}', "exactly one of"),
        (
            '{"prompt": "hi", "max_tokens": 0}',
            "max_tokens = 0 is out of range: a whole number from 1",
        ),
        ('{"prompt": "hi", "arrival_s": -1}', "arrival_s = -1 is out of range"),
        ('{"prompt": "hi", "prefix_ids": [1]}', "prefix_ids needs input_tokens"),
        ('{"messages": []}', "messages must be"),
        ('{"prompt": "hi"', "Expecting"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_jsonl_reader_names_line_and_field(tmp_path, line, says):
    p = _write(tmp_path, ['{"prompt": "ok"}', line])
    with pytest.raises(WorkloadError) as e:
        read_workload(p)
    assert e.value.message.startswith(f"{p}:2:") and says in e.value.message
    wl = read_workload(p, skip_bad=True)
    assert len(wl.items) == 1 and wl.stats.skipped == 1


def test_jsonl_items_sorted_by_arrival_and_synthesised_from_lengths(tmp_path):
    p = _write(
        tmp_path,
        [
            '{"id": "late", "arrival_s": 2, "input_tokens": 40, "max_tokens": 7}',
            '{"id": "chat", "arrival_s": 0.5, "messages": [{"role": "user", "content": "hi"}]}',
            '{"id": "early", "prompt": "hello there", "suite": "s", "tags": ["a"]}',
        ],
    )
    wl = read_workload(p, default_max_tokens=9)
    assert [it.id for it in wl.items] == ["early", "chat", "late"]
    assert [it.index for it in wl.items] == [0, 1, 2] and wl.has_arrivals
    assert count_prompt_tokens(wl.items[2].prompt) == 40 and wl.items[2].max_tokens == 7
    assert wl.items[0].max_tokens == 9 and wl.items[0].tags == ["a"]
    assert read_workload(p).items[2].prompt == wl.items[2].prompt  # seeded by the id


def test_cli_import_and_inspect(tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    assert (
        main(["workload", "import", "mooncake", str(FIX / "mooncake.jsonl"), "-o", str(out)]) == 2
    )
    assert "mooncake.jsonl:4:" in capsys.readouterr().err
    assert not out.exists()
    rc = main(
        [
            "workload",
            "import",
            "mooncake",
            str(FIX / "mooncake.jsonl"),
            "-o",
            str(out),
            "--skip-bad",
        ]
    )
    assert rc == 0 and "1 bad lines skipped" in capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 4
    assert main(["workload", "inspect", str(out), "--context", "1400"]) == 0
    text = capsys.readouterr().out
    assert "4 requests" in text and "burstiness" in text and "prefix sharing" in text
    assert "WARNING: 1 requests need more than the 1400-token context" in text
    assert main(["workload", "inspect", str(tmp_path / "missing.jsonl")]) == 2


def test_inspect_figures():
    from abtui.client.items import Item

    items = [
        Item(index=i, id=str(i), arrival_s=i * 0.5, prompt="w " * 10, max_tokens=i + 1)
        for i in range(21)
    ]
    s = workload_stats(items)
    assert s.mean_rate == pytest.approx(2.0) and s.burstiness == pytest.approx(0.0)
    assert s.output_pct["max"] == 21 and s.input_pct["p50"] == 10
    assert json.dumps(s.window_rates)


def test_synth_writes_the_shape_asked_for_and_inspect_measures_it(tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    args = [
        "--requests",
        "2000",
        "--rate",
        "10",
        "--arrival",
        "gamma",
        "--burstiness",
        "2",
        "--input-dist",
        "normal:400:50",
        "--prefix-groups",
        "4",
        "--prefix-tokens",
        "100",
        "--seed",
        "3",
    ]
    assert main(["workload", "synth", "-o", str(a), *args]) == 0
    assert main(["workload", "synth", "-o", str(b), *args]) == 0
    assert a.read_bytes() == b.read_bytes()  # same seed, same workload
    s = workload_stats(read_workload(a).items)
    assert s.mean_rate == pytest.approx(10, rel=0.1)
    assert s.burstiness == pytest.approx(2.0, rel=0.15)
    assert s.input_pct["p50"] == pytest.approx(400, rel=0.03)
    # 96 of every ~400 prefix-block tokens repeat (100-token prefixes, 16-token blocks)
    assert s.prefix_share == pytest.approx(96 / 400, rel=0.1)
    assert main(["workload", "synth", "-o", str(a), "--prefix-tokens", "5"]) == 2


# --- real dumps: unusable entries left out and counted, malformed ones named ---


def _conv(cid: str, *turns: tuple[str, object]) -> dict:
    return {"id": cid, "conversations": [{"from": f, "value": v} for f, v in turns]}


def _dump(path: Path, entries: list) -> Path:
    path.write_text(json.dumps(entries))  # one line, as json.dump writes real ShareGPT dumps
    assert len(path.read_text().splitlines()) == 1
    return path


def _ok(i: int) -> dict:
    return _conv(f"ok-{i}", ("human", f"question {i}?"), ("gpt", "an answer of some length"))


def test_sharegpt_dump_leaves_out_conversations_with_no_answered_human_turn(tmp_path, capsys):
    entries = [
        _ok(0),
        _conv("only-human", ("human", "anyone there?")),
        _conv("no-turns"),
        _ok(1),
        _conv("system-only", ("system", "be terse")),
        _conv("empty-prompt", ("human", "  "), ("gpt", "?")),
        _conv("answer-first", ("gpt", "hello"), ("human", "hi")),
        _ok(2),
    ]
    p = _dump(tmp_path / "sg.json", entries)
    recs, stats, note = import_trace("sharegpt", p)  # no --skip-bad needed: nothing is malformed
    assert [r["id"] for r in recs] == ["ok-0", "ok-1", "ok-2"]
    assert stats.skipped == 0 and stats.kept == 3
    assert note == "5 conversations with no human turn followed by an assistant turn left out"
    out = tmp_path / "sg.jsonl"
    assert main(["workload", "import", "sharegpt", str(p), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{out}: 3 requests from {p} (sharegpt); 5 conversations with no human turn" in err
    assert len(read_workload(out).items) == 3
    # nothing usable at all: an error that says why
    p = _dump(tmp_path / "none.json", [_conv("only-human", ("human", "hi")), _conv("x")])
    with pytest.raises(WorkloadError, match=r"no usable requests .*\(2 conversations with no"):
        import_trace("sharegpt", p)


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (_conv("bad-value", ("human", 3), ("gpt", "x")), "turn values must be strings"),
        ({"id": "bad-list", "conversations": "not a list"}, "a 'conversations' list"),
        ({"id": 7, "conversations": [["human", "hi"]]}, "each turn must be an object"),
    ],
)
def test_a_malformed_entry_of_a_dump_is_named_by_index_and_id_not_line_1(tmp_path, bad, says):
    p = _dump(tmp_path / "sg.json", [_ok(i) for i in range(31)] + [bad, _ok(99)])
    with pytest.raises(WorkloadError) as e:
        import_trace("sharegpt", p)
    ident = json.dumps(str(bad["id"]))
    assert e.value.message.startswith(f"{p}: entry 31 (id {ident}): ") and says in e.value.message
    assert f"{p}:1" not in e.value.message and f"jq '.[31]' {p}" in e.value.hint
    recs, stats, _ = import_trace("sharegpt", p, skip_bad=True)
    assert len(recs) == 32 and stats.skipped == 1
    assert stats.examples[0].startswith(f"{p}: entry 31 (id {ident}): ")
    # in a pretty-printed array the line an entry starts on is a line: it is given too
    p.write_text("[\n" + ",\n".join(json.dumps(x) for x in [_ok(0), bad]) + "\n]\n")
    with pytest.raises(WorkloadError, match=rf"sg.json: entry 1 \(id {ident}, line 3\): "):
        import_trace("sharegpt", p)


def test_sharegpt_lines_keep_line_numbers_and_leave_out_alike(tmp_path):
    p = tmp_path / "sg.jsonl"
    rows = [_ok(0), _conv("only-human", ("human", "hi")), {"id": "bad", "conversations": 1}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(WorkloadError, match=rf"^{p}:3: expected an object"):
        import_trace("sharegpt", p)
    recs, stats, note = import_trace("sharegpt", p, skip_bad=True)
    assert len(recs) == 1 and stats.skipped == 1 and note.startswith("1 conversations with no")


def test_trace_rows_with_zero_tokens_are_left_out_and_counted_not_refused(tmp_path):
    mc = tmp_path / "mc.jsonl"
    mc.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
        '{"timestamp": 5, "input_length": 10, "output_length": 0}\n'
        '{"timestamp": 9, "input_length": 0, "output_length": 3}\n'
        '{"timestamp": 12, "input_length": 7, "output_length": 2}\n'
    )
    recs, stats, note = import_trace("mooncake", mc)
    assert [r["input_tokens"] for r in recs] == [10, 7] and stats.skipped == 0
    assert note == (
        "1 rows with 0 response tokens (output_length; failed in the trace) left "
        "out; 1 rows with 0 prompt tokens (input_length) left out"
    )
    az = tmp_path / "az.csv"
    az.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,374,44\n2.0,396,0\n3.0,5,-1\n")
    with pytest.raises(
        WorkloadError,
        match=r"az.csv:4: GeneratedTokens = -1.0 is out of range: a whole number from 0",
    ):
        import_trace("azure", az)  # a negative count is malformed, not unusable
    recs, stats, note = import_trace("azure", az, skip_bad=True)
    assert len(recs) == 1 and stats.skipped == 1 and note.startswith("1 rows with 0 response")
