"""API keys never leave the request (the session file's own scrubbing is in tests/unit/test_store.py):
an arm's key comes from the environment (`api_key_env`), reaches the endpoint, and is found
nowhere else — not in the run's output, the session file (any table), or any report — even
when the endpoint echoes it back in error messages and generated text, as some proxies do."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re

import duckdb
from loopback import LoopbackServer

from abtui.cli import main
from abtui.sim.process import SimProcess

KEY = "sk-abtui-test-7f3c9e1d2b4a"


class EchoServer(LoopbackServer):
    """An endpoint that requires the key and echoes the Authorization header back: in a 401's
    message for every third request, padded so that the client's 300-character cut of the
    message falls inside the key; in the token text of the others, whole, or (every third)
    only its first half before the connection drops."""

    def __init__(self) -> None:
        self.n = 0
        self.seen_keys: set[str] = set()
        super().__init__()

    async def _handle(self, reader, writer) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            hdrs = dict(
                (k.strip().lower(), v.strip())
                for k, _, v in (x.partition(":") for x in head.split("\r\n")[1:] if x)
            )
            await reader.readexactly(int(hdrs.get("content-length", 0)))
            auth = hdrs.get("authorization", "")
            self.seen_keys.add(auth)
            if "/models" in head.split("\r\n")[0]:
                body = json.dumps({"data": [{"id": "echo"}]})
                writer.write(_response(200, "application/json", body))
            else:
                self.n += 1
                if self.n % 3 == 0:
                    pad = "x" * (300 - len("invalid credentials: 'Bearer ") - 12)
                    err = {"error": {"message": f"invalid credentials: {pad}{auth!r}"}}
                    writer.write(_response(401, "application/json", json.dumps(err)))
                elif self.n % 3 == 2:
                    half = {"choices": [{"index": 0, "text": f"you sent {auth[:20]}"}]}
                    sse = f"data: {json.dumps(half)}\n\n".encode()
                    head = "HTTP/1.1 200 X\r\ncontent-type: text/event-stream\r\n\r\n"
                    writer.write(head.encode() + sse)  # then the connection drops
                else:
                    events = [
                        {
                            "choices": [
                                {
                                    "index": 0,
                                    "text": f"you sent {auth}; {transformed(auth)}",
                                    "finish_reason": None,
                                }
                            ]
                        },
                        {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]},
                    ]
                    sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                    writer.write(_response(200, "text/event-stream", sse))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()


def transformed(auth: str) -> str:
    """The key as some servers echo it: upper-cased, one character at a time, and in two
    halves with words between them."""
    key = auth.split()[-1]
    half = len(key) // 2
    return f"{key.upper()} / {' '.join(key)} / starts {key[:half]} and ends {key[half:]}"


def _response(status: int, ctype: str, body: str) -> bytes:
    data = body.encode()
    return (
        f"HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {len(data)}\r\n"
        "connection: close\r\n\r\n"
    ).encode() + data


def _every_string_in(path) -> str:
    """Every value of every table of a DuckDB file, as text (strings may be compressed on disk,
    so a byte grep of the file alone could miss one)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        parts = []
        for (table,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall():
            parts.append(repr(con.execute(f'SELECT * FROM "{table}"').fetchall()))
        return "\n".join(parts)
    finally:
        con.close()


def test_an_echoed_key_is_nowhere_but_the_request(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ABTUI_TEST_KEY", KEY)
    with EchoServer() as echo, SimProcess(ttft_ms=2, itl_ms=1, seed=1) as sim:
        spec = tmp_path / "s.toml"
        spec.write_text(
            f'name = "keys"\n[[arms]]\nname = "base"\nrole = "baseline"\nurl = "{sim.url}"\n'
            f'[[arms]]\nname = "echo"\nrole = "candidate"\nurl = "http://127.0.0.1:{echo.port}/v1"\n'
            'api_key_env = "ABTUI_TEST_KEY"\n'
            f"[workload]\nrequests = 9\ninput_tokens = 8\noutput_tokens = 4\n"
            f'[load]\nrate = 30\nwarmup = 0\n[store]\ndir = "{tmp_path}"\n'
        )
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["run", str(spec), "--headless"])
        printed = out.getvalue() + err.getvalue() + "".join(capsys.readouterr())
    assert f"Bearer {KEY}" in echo.seen_keys, printed[-2000:]  # the key reached the endpoint
    assert rc in (0, 3, 4), printed[-2000:]
    assert "invalid credentials" in printed  # the echoed error is shown ...
    assert KEY not in printed and KEY[:10] not in printed  # ... without the key or its start
    path = tmp_path / "keys.duckdb"
    stored = _every_string_in(path)
    assert "you sent" in stored and "invalid credentials" in stored  # the echoes were stored
    assert KEY not in stored and KEY.encode() not in path.read_bytes()
    assert KEY[:10] not in stored  # not even where a cut, or a dropped connection, halved it
    # the cut message, its key's start redacted (its scheme word may go with it)
    assert re.search(r"x{20}'(Bearer )?\[redacted\]", stored), stored[-3000:]
    forms = transformed(KEY).split(" / ")  # the key upper-cased, spelled out, halved
    half = len(KEY) // 2
    for shown in (printed, stored):
        assert not any(f in shown for f in forms[:2]), [f for f in forms[:2] if f in shown]
        assert KEY[:half] not in shown and KEY[half:] not in shown
    for fmt in ("text", "md", "html", "json"):
        assert main(["report", str(path), "--format", fmt]) in (0, 3, 4)
        o, e = capsys.readouterr()
        assert KEY not in o + e and KEY[:10] not in o + e, fmt
        assert not any(f in o + e for f in forms[:2]) and KEY[half:] not in o + e, fmt


def test_redact_text_whole_keys_and_a_key_cut_short():
    from abtui.client.redact import REDACTED, redact_text, secrets_of

    secrets = secrets_of({"Authorization": f"Bearer {KEY}"})
    assert secrets == [f"Bearer {KEY}", KEY]
    assert redact_text(f"you sent Bearer {KEY}!", secrets) == f"you sent {REDACTED}!"
    assert redact_text(f"a {KEY} b {KEY}", secrets) == f"a {REDACTED} b {REDACTED}"
    for k in range(4, len(KEY)):  # cut anywhere inside the key: its start goes too
        assert redact_text(f"HTTP 401: key 'Bearer {KEY[:k]}", secrets) == (
            f"HTTP 401: key 'Bearer {REDACTED}"
        ), k
    assert redact_text("ends with sk-", secrets) == "ends with sk-"  # 3 characters say nothing
    for word in ("use a Bearer", "Bear", "sk-a b"):  # ordinary ends are left alone
        assert redact_text(word, secrets) == word
    assert redact_text("", secrets) == ""


SPEC_SECRETS = (
    "hunter2pass",
    "sk-params-5f1e2d3c4b5a",
    "hf_tokenvalue0123456789",
    "sk-nested-a1b2c3d4e5f6",
    "sk-query-0a9b8c7d6e",
)


def test_secrets_in_a_spec_are_used_never_stored_or_shown(tmp_path, capsys):
    """A spec that holds credentials itself (URL user info, a key in a URL's query, keys in
    `params`, nested too): a real run against the simulator, then every report; no secret is in
    any table of the session file (meta.spec, meta.spec_text, events, arms), in its bytes, on
    the console or in a report."""
    pw, key, hf, nested, query = SPEC_SECRETS
    with SimProcess(ttft_ms=2, itl_ms=1, seed=1) as sim:
        host = sim.url.split("//", 1)[1].removesuffix("/v1")
        spec = tmp_path / "s.toml"
        spec.write_text(
            f'name = "spec-keys"\n[[arms]]\nname = "base"\nurl = "http://alice:{pw}@{host}/v1"\n'
            f'params = {{ api_key = "{key}", hf_token = "{hf}", extra = {{ authorization = '
            f'"Bearer {nested}" }}, temperature = 0.0 }}\n'
            f'metrics_url = "http://{host}/metrics?token={query}"\n'
            f'[[arms]]\nname = "cand"\nurl = "http://bob:{pw}@{host}/v1"\n'
            f"[workload]\nrequests = 6\ninput_tokens = 8\noutput_tokens = 4\n"
            f'[load]\nrate = 30\nwarmup = 0\n[store]\ndir = "{tmp_path}"\n'
        )
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["run", str(spec), "--headless"])
        printed = out.getvalue() + err.getvalue() + "".join(capsys.readouterr())
    assert rc in (0, 3, 4), printed[-2000:]
    path = tmp_path / "spec-keys.duckdb"
    stored, raw = _every_string_in(path), path.read_bytes()
    with duckdb.connect(str(path), read_only=True) as con:
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    assert "[redacted]" in meta["spec_text"] and "temperature" in meta["spec"]  # kept the rest
    assert "alice" not in stored and "alice" not in printed  # the user name too
    for s in SPEC_SECRETS:
        assert s not in stored and s.encode() not in raw, s
        assert s not in printed, s
    for fmt in ("text", "md", "html", "json"):
        assert main(["report", str(path), "--format", fmt]) in (0, 3, 4)
        o, e = capsys.readouterr()
        assert not any(s in o + e for s in SPEC_SECRETS) and "alice" not in o + e, fmt


def test_a_spec_error_does_not_echo_the_password(tmp_path, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text(
        f'[[arms]]\nname = "a"\nurl = "http://alice:{SPEC_SECRETS[0]}@127.0.0.1:9"\n'
        f'[[arms]]\nname = "b"\nurl = "http://127.0.0.1:9/v1?api_key={SPEC_SECRETS[4]}"\n'
    )
    assert main(["run", str(spec), "--headless"]) == 2
    err = capsys.readouterr().err
    assert "does not end in /v1" in err and "Traceback" not in err, err
    assert not any(s in err for s in SPEC_SECRETS) and "alice" not in err, err
