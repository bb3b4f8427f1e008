"""The trace importers and the workload reader against hostile numbers (hypothesis): every
numeric field (timestamps, token counts, prefix ids, arrivals) of every format either imports
inside the limit table (abtui.limits) as standard JSON that reads back, or is refused with a
``WorkloadError`` naming the file, the line and the field. Never a traceback, never ``NaN`` or
``Infinity`` in the output, never a count that overflows a 32-bit column."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from abtui import limits
from abtui.errors import WorkloadError
from abtui.workload.importers import TraceImport
from abtui.workload.jsonl import read_workload, write_jsonl

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# numbers a hostile or broken trace holds, and ordinary ones
numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=0, max_value=20_000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        [
            0,
            1,
            2**31,
            2**63,
            10**12,
            10**400,
            1e308,
            -1,
            1.5,
            12.0,
            float("nan"),
            float("inf"),
            -float("inf"),
        ]
    ),
)
csv_numbers = numbers.map(str) | st.sampled_from(["inf", "NaN", "1e999", "-0.0", "12.0", "", "x"])


def _no_constant(name):
    raise AssertionError(f"non-standard JSON in the output: {name}")


def _check_output(recs: list[dict], tmp_path) -> None:
    """What was imported is inside the table and reads back as standard JSON."""
    for r in recs:
        limits.check("item.arrival_s", r.get("arrival_s", 0.0))
        for key in ("input_tokens", "max_tokens"):
            if key in r:
                limits.check(f"item.{key}", r[key])
        for h in r.get("prefix_ids", []):
            limits.check("item.prefix_id", h)
    out = tmp_path / "out.jsonl"
    write_jsonl(out, recs)
    for line in out.read_text().splitlines():
        json.loads(line, parse_constant=_no_constant)
    assert len(read_workload(out).items) == len(recs)


def _import(fmt: str, path, fields: tuple[str, ...], tmp_path) -> None:
    for skip_bad in (False, True):
        try:
            imp = TraceImport(fmt, path, skip_bad=skip_bad)
            recs = list(imp.records())
        except WorkloadError as e:
            msg = e.message
            assert msg.startswith(f"{path}:"), msg
            if ":1: header" not in msg and "no usable requests" not in msg:
                named = [f for f in fields if f in msg]
                assert (
                    named
                    or "not JSON" in msg
                    or "columns" in msg
                    or "not UTF-8" in msg
                    or "not CSV" in msg
                    or "missing field" in msg
                ), msg
            continue
        _check_output(recs, tmp_path)


@SETTINGS
@given(
    rows=st.lists(
        st.tuples(numbers, numbers, numbers, st.lists(numbers, max_size=2)), min_size=1, max_size=4
    )
)
@example(rows=[(0, float("inf"), 5, [])])
@example(rows=[(float("nan"), 3, 5, [])])
@example(rows=[(1e308, 3, 5, []), (0, 3, 5, [])])
@example(rows=[(0, 10**12, 5, [])])
@example(rows=[(0, 3, 2**31, [2**70])])
@example(rows=[(0, 0, 0, []), (0, 1, 1, []), (31_622_400_001, 1, 1, [])])  # spans over a year
def test_mooncake_numbers(tmp_path, rows):
    p = tmp_path / "mc.jsonl"
    with p.open("w") as fh:
        for ts, n_in, n_out, ids in rows:
            fh.write(
                json.dumps(
                    {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids}
                )
                + "\n"
            )
    _import("mooncake", p, ("timestamp", "input_length", "output_length", "hash_ids"), tmp_path)


@pytest.mark.parametrize("fmt", ["azure", "burstgpt"])
@SETTINGS
@given(rows=st.lists(st.tuples(csv_numbers, csv_numbers, csv_numbers), min_size=1, max_size=4))
@example(rows=[("0", "inf", "5")])
@example(rows=[("nan", "3", "5")])
@example(rows=[("1e308", "3", "5"), ("0", "3", "5")])
@example(rows=[("0", "1000000000000", "5")])
@example(rows=[("2023-11-16 18:15:46.6805900", "3", "2147483648")])
def test_csv_trace_numbers(tmp_path, fmt, rows):
    header = (
        "TIMESTAMP,ContextTokens,GeneratedTokens"
        if fmt == "azure"
        else "Timestamp,Model,Request tokens,Response tokens"
    )
    p = tmp_path / f"{fmt}.csv"
    lines = [header] + [
        ",".join([ts, *(["m"] if fmt == "burstgpt" else []), a, b]) for ts, a, b in rows
    ]
    p.write_text("\n".join(lines) + "\n")
    fields = (
        ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
        if fmt == "azure"
        else ("Timestamp", "Request tokens", "Response tokens")
    )
    _import(fmt, p, fields, tmp_path)


@SETTINGS
@given(junk=st.binary(min_size=1, max_size=400))
@example(junk=bytes(range(256)))
@example(junk=b"\r\x00")  # a header line csv cannot read: a traceback once
@example(junk=b"\x00" * 64 + b"\n1,m,2,3\n")
def test_a_binary_csv_is_refused_naming_the_file(tmp_path, junk):
    for fmt, header in (
        ("burstgpt", b"Timestamp,Model,Request tokens,Response tokens\n"),
        ("azure", b"TIMESTAMP,ContextTokens,GeneratedTokens\n"),
    ):
        for body in (junk, header + junk):
            p = tmp_path / f"{fmt}.csv"
            p.write_bytes(body)
            _import(fmt, p, (), tmp_path)


@SETTINGS
@given(n=numbers, ident=numbers)
def test_sharegpt_answer_lengths_and_ids(tmp_path, n, ident):
    answer = "x" * (min(abs(int(n)), 200) if isinstance(n, int) else 3)
    p = tmp_path / "sg.json"
    p.write_text(
        "["
        + json.dumps(
            {
                "id": ident,
                "conversations": [
                    {"from": "human", "value": "hi"},
                    {"from": "gpt", "value": answer},
                ],
            }
        )
        + "]"
    )
    _import("sharegpt", p, (), tmp_path)


def test_a_sharegpt_answer_longer_than_any_output_is_refused(tmp_path):
    p = tmp_path / "sg.jsonl"
    answer = "x" * (4 * limits.MAX_TOKENS + 8)
    p.write_text(
        json.dumps(
            {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": answer}]}
        )
        + "\n"
    )
    with pytest.raises(WorkloadError, match=r"sg.jsonl:1: the answer's length / 4 = 10000002 is"):
        TraceImport("sharegpt", p).scan()


def test_a_trace_spanning_more_than_a_year_is_refused_naming_its_last_row(tmp_path):
    p = tmp_path / "mc.jsonl"
    year_ms = 400 * 86_400 * 1000
    p.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": 3, "output_length": 2}) + "\n"
            for t in (5, 0, year_ms, 7)
        )
    )
    with pytest.raises(
        WorkloadError,
        match=r"mc.jsonl:3: timestamp's offset from the first request = "
        r"34560000\.0 is out of range",
    ):
        TraceImport("mooncake", p).scan()


wl_numbers = numbers | st.just(None)


@SETTINGS
@given(
    arrival=wl_numbers,
    n_in=wl_numbers,
    n_out=wl_numbers,
    block=wl_numbers,
    ids=st.lists(numbers, max_size=2),
)
@example(arrival=float("inf"), n_in=4, n_out=None, block=None, ids=[])
@example(arrival=0, n_in=10**11, n_out=None, block=None, ids=[])
@example(arrival=0, n_in=4, n_out=2**31, block=None, ids=[])
def test_workload_line_numbers(tmp_path, arrival, n_in, n_out, block, ids):
    rec = {
        "id": "x",
        "input_tokens": n_in,
        "arrival_s": arrival,
        "max_tokens": n_out,
        "block_tokens": block,
        "prefix_ids": ids,
    }
    rec = {k: v for k, v in rec.items() if v is not None}
    if "input_tokens" not in rec:
        rec["prompt"] = "hello"
        rec.pop("prefix_ids")
    p = tmp_path / "w.jsonl"
    p.write_text(json.dumps(rec) + "\n")
    try:
        wl = read_workload(p)
    except WorkloadError as e:
        assert e.message.startswith(f"{p}:1: "), e.message
        fields = (
            "input_tokens",
            "arrival_s",
            "max_tokens",
            "block_tokens",
            "prefix_ids",
            "exactly one of",
            "not JSON",
        )
        assert any(f in e.message for f in fields), e.message
        return
    it = wl.items[0]
    assert math.isfinite(it.arrival_s) and 0 <= it.arrival_s <= limits.MAX_SPAN_S
    assert 1 <= it.max_tokens <= limits.MAX_TOKENS
    assert it.n_input is None or 1 <= it.n_input <= limits.MAX_TOKENS
