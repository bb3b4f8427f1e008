"""abtui against a real engine: llama.cpp's C++ llama-server serving tiny GGUF models that the
test builds (FP32, and Q8_0 / Q4_0 made with llama.cpp's own llama-quantize).

Marked ``engine``: it needs llama-server (``abtui engine build``) and the gguf package. Without
them the test skips with the reason, unless ``ABTUI_REQUIRE_ENGINE=1`` (set by ``.ci/run``),
where a missing engine fails (tests/engine_fixtures.py).
"""

from __future__ import annotations

import pytest
from engine_fixtures import require_engine as _require_engine

from abtui.engine.server import parse_timings


@pytest.fixture(scope="module")
def engine_ab(tmp_path_factory):
    _require_engine()
    from abtui.engine.ab import ABConfig, run_engine_ab

    return run_engine_ab(tmp_path_factory.mktemp("engine"), ABConfig(requests=24, output_tokens=32))


@pytest.mark.engine
def test_engine_sessions_match_what_the_server_says(engine_ab):
    # every request accounted for, token counts = the server's own usage for the same prompt,
    # abtui's TTFT / TPOT / E2E no shorter than the server's own prompt / decode times,
    # FP32 deterministic across both sessions (run_engine_ab's docstring lists the checks)
    assert engine_ab.problems == []
    assert len(engine_ab.figures) == 4 and all(f.n_ok == f.n_sent == 24 for f in engine_ab.figures)
    # llama-server streams usage, and it is what abtui counted: each stored count equals the
    # server's own non-streamed usage for the same prompt (problems above), 32 = max_tokens
    assert all(f.tokens_per_request == 32 for f in engine_ab.figures)


@pytest.mark.engine
def test_q8_agrees_with_fp32_more_than_q4(engine_ab):
    q8, q4 = engine_ab.agreement["Q8_0"], engine_ab.agreement["Q4_0"]
    # scripts/engine_ab.py with model seeds 0, 1, 2 (24 items): Q8_0 33-54% identical and 47-67
    # chars of common prefix, Q4_0 0% and 7-8 chars (docs/engine.md): a wide margin
    assert q8["exact"] > q4["exact"]
    assert q8["prefix_chars"] > 2 * q4["prefix_chars"]


@pytest.mark.engine
def test_q4_is_further_from_fp32_than_q8_in_logprobs(engine_ab):
    """Top-1 agreement and the KL lower bound against FP32 on the 24 measured prompts, from the
    real servers' logprobs: Q4_0's CIs wholly on the far side of Q8_0's. Seeds 0, 1, 2 gave
    Q8_0 top-1 97-99% with KL ≤ 0.009 nats (upper CI bounds), Q4_0 top-1 70-74% (≤ 81%) with
    KL ≥ 0.039 (lower CI bounds): docs/engine.md."""
    from abtui.engine.ab import logprob_problems

    lp = engine_ab.logprobs
    assert logprob_problems(lp) == []
    q8, q4 = lp["Q8_0"], lp["Q4_0"]
    assert q8["prompts"] == q4["prompts"] == 24 and q4["positions"] > 24
    assert q4["top1_hi"] < q8["top1_lo"] and q4["kl_lo"] > q8["kl_hi"]
    # the check can fail: with the candidates swapped it names both figures
    swapped = logprob_problems({"Q8_0": q4, "Q4_0": q8})
    assert len(swapped) == 2 and "top-1" in swapped[0] and "KL" in swapped[1]
    assert logprob_problems({"Q8_0": q8}) != []  # one candidate missing
    assert "no logprobs" in logprob_problems({"Q8_0": q8, "Q4_0": {"error": "no logprobs"}})[0]


def test_server_timing_lines_are_parsed():
    # llama-server's print_timing lines (tools/server/server-context.cpp), two requests
    log = """\
srv  log_server_r: done request: POST /v1/completions 127.0.0.1 200
slot print_timing: id  0 | task 0 | prompt eval time =       0.40 ms /     9 tokens (    0.04 ms per token, 22500.00 tokens per second)
slot print_timing: id  0 | task 0 |        eval time =       2.78 ms /    15 tokens (    0.19 ms per token,  5401.51 tokens per second)
slot print_timing: id  0 | task 0 |       total time =       3.18 ms /    24 tokens
slot print_timing: id  0 | task 0 |    graphs reused =         14
slot      release: id  0 | task 0 | stop processing: n_tokens = 24, truncated = 0
slot print_timing: id  1 | task 2 | prompt eval time =       0.00 ms /     1 tokens (    0.00 ms per token,      inf tokens per second)
slot print_timing: id  1 | task 2 |        eval time =       2.32 ms /    16 tokens (    0.14 ms per token,  6896.55 tokens per second)
slot print_timing: id  1 | task 2 |       total time =       2.32 ms /    17 tokens
"""
    a, b = parse_timings(log)
    assert (a.prompt_ms, a.prompt_tokens, a.eval_ms, a.eval_runs) == (0.40, 9, 2.78, 15)
    assert a.total_ms == 3.18
    assert (b.prompt_tokens, b.eval_runs) == (1, 16) and b.ms_per_token == pytest.approx(2.32 / 15)


@pytest.mark.engine
def test_a_server_killed_mid_stream_is_an_error_not_a_short_answer(tmp_path):
    """SIGKILL llama-server while a stream runs: the record is ``disconnected`` with the tokens
    it got, never ``ok``; a second request to the dead server is a connection error."""
    _require_engine()
    import asyncio
    import time

    from abtui.client import records
    from abtui.client.fast import FastClient, fast_stream_request
    from abtui.client.items import Item
    from abtui.client.records import RequestRecord
    from abtui.client.stream import Target, build_body
    from abtui.engine.server import LlamaCppServer
    from abtui.engine.tinymodel import build_models

    model = build_models(tmp_path)["Q4_0"]
    with LlamaCppServer(model, name="q4") as srv:
        tgt = Target(base_url=srv.url, model="q4", params={"temperature": 0.0})
        items = [
            Item(index=i, id=f"i{i}", prompt=f"{i} the of and", max_tokens=900) for i in (0, 1)
        ]

        async def go():
            async with FastClient() as c:
                recs = [RequestRecord(arm=0, item=i) for i in (0, 1)]
                first = asyncio.create_task(
                    fast_stream_request(c, tgt, items[0], build_body(tgt, items[0]), recs[0])
                )
                deadline = time.monotonic() + 60
                while len(recs[0].chunk_ns) < 5:  # the stream is running
                    assert not first.done() and time.monotonic() < deadline, (
                        recs[0].status,
                        recs[0].error_message,
                        srv.log_text()[-2000:],
                    )
                    await asyncio.sleep(0.002)
                srv.kill()
                await first
                await fast_stream_request(c, tgt, items[1], build_body(tgt, items[1]), recs[1])
                return recs

        cut, after = asyncio.run(go())
    assert (cut.status, cut.error_class) == (records.ERROR, records.E_DISCONNECTED), (
        cut.error_message
    )
    assert 0 < cut.n_output < 900
    assert after.status == records.ERROR and after.error_class in (
        records.E_CONNECT,
        records.E_DISCONNECTED,
    )


def test_hf_tokenizer_folder_matches_the_gguf_vocabulary(tmp_path):
    """The peers' local tokenizer (scripts/peer_check.py) has the GGUF's tokens at the same ids,
    and every merge joins two tokens into a third (so each word piece is reachable)."""
    import json

    from abtui.engine.tinymodel import vocabulary, write_hf_tokenizer

    folder = write_hf_tokenizer(tmp_path / "hf")
    tok = json.loads((folder / "tokenizer.json").read_text())
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    toks, _, _ = vocabulary()
    vocab = tok["model"]["vocab"]
    assert vocab == {t.decode(): i for i, t in enumerate(toks)} and len(vocab) == 656
    assert tok["model"]["byte_fallback"] is True and "<0xE9>" in vocab
    merges = tok["model"]["merges"]
    assert len(merges) > 300
    for m in merges:
        a, b = m.split(" ")
        assert a in vocab and b in vocab and a + b in vocab
    assert "\u2581th e" in merges  # "▁the" = "▁th" + "e"
    assert (cfg["bos_token"], cfg["eos_token"]) == ("<s>", "</s>")


@pytest.mark.engine
def test_chat_stream_counts_match_the_server(tmp_path):
    """Chat on the real server: a role-only first chunk (not a token), a finish chunk with an
    empty delta (not a token), streamed usage; counts = its own non-streamed usage."""
    _require_engine()
    import asyncio

    import httpx

    from abtui.client.fast import FastClient, fast_stream_request
    from abtui.client.items import Item
    from abtui.client.records import RequestRecord
    from abtui.client.stream import Target, build_body
    from abtui.engine.server import LlamaCppServer
    from abtui.engine.tinymodel import build_models

    params = {"temperature": 0.0, "logprobs": True, "top_logprobs": 0}
    items = [
        Item(index=i, id=f"i{i}", prompt=f"{i} the of and to in", max_tokens=24) for i in range(8)
    ]
    with LlamaCppServer(build_models(tmp_path)["FP32"], name="fp32") as srv:
        tgt = Target(base_url=srv.url, model="fp32", api="chat", params=params)

        async def go():
            async with FastClient() as c:
                recs = []
                for it in items:
                    recs.append(RequestRecord(arm=0, item=it.index))
                    await fast_stream_request(c, tgt, it, build_body(tgt, it), recs[-1])
                return recs

        recs = asyncio.run(go())
        with httpx.Client(trust_env=False, timeout=60) as c:
            ref = [
                c.post(
                    srv.url + "/chat/completions",
                    json={
                        "model": "fp32",
                        "messages": it.chat_messages(),
                        "max_tokens": 24,
                        "temperature": 0.0,
                    },
                ).json()["usage"]["completion_tokens"]
                for it in items
            ]
    assert all(r.status == "ok" and r.finish_reason == "length" for r in recs)
    assert [r.n_output for r in recs] == ref
    assert all(r.token_source == "usage" for r in recs)


@pytest.mark.engine
def test_a_server_that_dies_mid_run_is_errors_on_its_arm_and_the_session_keeps_the_rest(tmp_path):
    """`abtui run` against two llama-servers; the candidate's is SIGKILLed once it has answered
    some requests. Its remaining requests are errors on its arm (never silently missing), the
    samples it gave before are kept, the baseline is untouched, and the verdict is not GO."""
    _require_engine()
    import contextlib
    import io
    import threading
    import time

    from abtui.cli import main
    from abtui.engine.server import LlamaCppServer
    from abtui.engine.tinymodel import build_models
    from abtui.store.reader import SessionReader

    models = build_models(tmp_path / "m")
    with (
        LlamaCppServer(models["Q8_0"], name="base") as a,
        LlamaCppServer(models["Q4_0"], name="cand") as b,
    ):
        spec = tmp_path / "s.toml"
        spec.write_text(
            f'name = "dies"\n[[arms]]\nname = "base"\nurl = "{a.url}"\n'
            f'[[arms]]\nname = "cand"\nurl = "{b.url}"\n'
            "[workload]\nrequests = 120\ninput_tokens = 16\noutput_tokens = 24\n"
            "[load]\nconcurrency = 2\nwarmup = 2\n"
            f'[request]\ntemperature = 0.0\ntimeout = "20s"\n[store]\ndir = "{tmp_path}"\n'
        )

        def killer():
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with contextlib.suppress(Exception):
                    if b.timings() and len(b.timings()) >= 30:
                        b.kill()
                        return
                time.sleep(0.01)

        t = threading.Thread(target=killer, daemon=True)
        t.start()
        with contextlib.redirect_stdout(io.StringIO()):
            rc = main(["run", str(spec), "--headless", "--overwrite"])
        t.join(5)
    assert rc in (3, 4)  # NO-GO or INCONCLUSIVE, never GO
    with SessionReader(tmp_path / "dies.duckdb") as rd:
        assert rd.status == "complete"
        table = rd.request_table()
        verdict = max(rd.verdicts(), key=lambda v: v["created"])["result"]
    base, cand = table.select(table.arm == 0), table.select(table.arm == 1)
    assert len(base) == len(cand) == 120  # every scheduled request has its row
    assert (base.status == "ok").all()
    ok = int((cand.status == "ok").sum())
    assert 20 <= ok < 120  # what it answered before dying is kept
    errs = set(cand.error_class[cand.status != "ok"])
    assert errs <= {"connect", "disconnected"} and errs, errs
    assert verdict["pairs"][0]["result"] != "GO"
    assert any("error" in r for r in verdict["pairs"][0]["reasons"])
