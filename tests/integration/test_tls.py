"""TLS: certificates are verified by default; ``--insecure`` / ``insecure = true`` turns that off
(stored in the session, warned about in the summary); ``ca_bundle`` trusts a private CA.

The endpoints are abtui's simulator behind a TLS-terminating proxy on 127.0.0.1 with a
self-signed certificate for 127.0.0.1, made at test time by the ``openssl`` command (present on
the dev machine and in CI's image; the tests fail, not skip, without it). Every connection abtui
opens — the /v1/models probe, the streamed requests (both HTTP clients) and the /metrics
scrape — goes through the proxy.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import threading

import pytest

from abtui.cli import main
from abtui.sim.process import SimProcess
from abtui.store.reader import SessionReader

N = 12  # measured requests per arm
WARMUP = 2


@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> tuple[str, str]:
    """(cert.pem, key.pem): a self-signed certificate for IP 127.0.0.1, valid two days."""
    exe = shutil.which("openssl")
    if exe is None:
        pytest.fail("the TLS tests need the `openssl` command to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    crt, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            exe,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(crt),
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return str(crt), str(key)


class TLSProxy:
    """Accepts TLS on 127.0.0.1 and relays the plain bytes to ``upstream_port``."""

    def __init__(self, upstream_port: int, cert: tuple[str, str]) -> None:
        self.upstream = upstream_port
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(*cert)
        self.handshake_failures = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.set_exception_handler(self._on_loop_error)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.ctx)
        )
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    def _on_loop_error(self, loop, context) -> None:
        if isinstance(context.get("exception"), ssl.SSLError):
            self.handshake_failures += 1  # a client that refused our certificate

    async def _handle(self, reader, writer) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.close()
            return

        async def pump(src, dst) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, ssl.SSLError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_w), pump(up_r, writer))

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def endpoints(cert):
    with (
        SimProcess(ttft_ms=5, itl_ms=1, seed=1) as a,
        SimProcess(ttft_ms=4, itl_ms=1, seed=2) as b,
    ):
        pa, pb = TLSProxy(a.port, cert), TLSProxy(b.port, cert)
        yield pa, pb
        pa.close()
        pb.close()


def _run(args: list[str], tmp_path, name: str) -> int:
    return main(
        [
            "run",
            *args,
            "--requests",
            str(N),
            "--warmup",
            str(WARMUP),
            "--rate",
            "40",
            "--input-tokens",
            "16",
            "--output-tokens",
            "8",
            "--name",
            name,
            "--sessions-dir",
            str(tmp_path),
            "--headless",
        ]
    )


def _check_every_request_ok(path, insecure: bool, ca_bundle: str | None) -> None:
    with SessionReader(path) as rd:
        assert rd.status == "complete"
        n, ok = rd.query("SELECT count(*), count(*) FILTER (WHERE status = 'ok') FROM requests")[0]
        scrapes = rd.query(
            "SELECT count(*) FROM telemetry WHERE metric = 'scrape.ok' AND value = 1"
        )[0][0]
        arms = rd.arms()
    assert n == ok == 2 * (N + WARMUP)  # every request sent over TLS, and counted
    assert scrapes >= 2  # /metrics scraped over TLS with the arm's settings
    for a in arms:
        assert a["url"].startswith("https://")
        assert a["config"]["insecure"] is insecure
        assert a["config"]["ca_bundle"] == ca_bundle


def test_self_signed_endpoint_fails_with_one_clear_line(endpoints, tmp_path, capsys):
    pa, pb = endpoints
    rc = _run(["--baseline", pa.url, "--candidate", pb.url], tmp_path, "refused")
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"TLS failed for {pa.url}: certificate verify failed" in err
    assert "--insecure" in err and "ca_bundle" in err
    assert not (tmp_path / "refused.duckdb").exists()  # nothing was run


def test_insecure_flag_runs_stores_the_flag_and_warns(endpoints, tmp_path, capsys):
    pa, pb = endpoints
    rc = _run(["--baseline", pa.url, "--candidate", pb.url, "--insecure"], tmp_path, "insecure")
    out, err = capsys.readouterr()
    assert rc in (0, 3, 4), err[-2000:]
    _check_every_request_ok(tmp_path / "insecure.duckdb", True, None)
    assert out.count("TLS certificate not verified (--insecure)") == 2  # one line per arm
    main(["report", str(tmp_path / "insecure.duckdb")])  # the saved session says it too
    assert "TLS certificate not verified" in capsys.readouterr().out


@pytest.mark.parametrize("http", ["fast", "httpx"])
def test_ca_bundle_in_the_spec_verifies_against_a_private_ca(
    endpoints, cert, tmp_path, capsys, http
):
    pa, pb = endpoints
    spec = tmp_path / "tls.toml"
    spec.write_text(
        f'[[arms]]\nname = "a"\nurl = "{pa.url}"\nca_bundle = "{cert[0]}"\n\n'
        f'[[arms]]\nname = "b"\nurl = "{pb.url}"\nca_bundle = "{cert[0]}"\n\n'
        f'[request]\nhttp = "{http}"\n'
    )
    rc = _run([str(spec)], tmp_path, f"ca-{http}")
    out, err = capsys.readouterr()
    assert rc in (0, 3, 4), err[-2000:]
    _check_every_request_ok(tmp_path / f"ca-{http}.duckdb", False, cert[0])
    assert "not verified" not in out


def test_bad_tls_settings_are_one_line_errors(cert, tmp_path, capsys):
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("hello\n")
    spec = tmp_path / "s.toml"
    cases = {
        f'ca_bundle = "{not_pem}"': "is not a PEM certificate file",
        f'ca_bundle = "{tmp_path / "missing.pem"}"': "does not exist",
        f'insecure = true\nca_bundle = "{cert[0]}"': "exclude each other",
        "insecure = 1": "insecure must be true or false",
    }
    for extra, want in cases.items():
        spec.write_text(
            '[[arms]]\nname = "a"\nurl = "https://127.0.0.1:9/v1"\n\n'
            f'[[arms]]\nname = "b"\nurl = "https://127.0.0.1:9/v1"\n{extra}\n'
        )
        rc = main(["run", str(spec), "--requests", "1", "--rate", "1"])
        err = capsys.readouterr().err
        assert rc == 2 and want in err, (extra, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_quality_suites_perplexity_and_logprobs_over_tls(endpoints, cert, tmp_path, capsys):
    """The collectors after the load test (quality items, the perplexity and logprob probes,
    the context-window check) use the arm's TLS settings too."""
    pa, pb = endpoints
    rc = _run(
        ["--baseline", pa.url, "--candidate", pb.url, "--ca-bundle", cert[0], "--quality", "exact"],
        tmp_path,
        "quality",
    )
    err = capsys.readouterr().err
    assert rc in (0, 3, 4), err[-2000:]
    with SessionReader(tmp_path / "quality.duckdb") as rd:
        meta = rd.meta()
        n, scored = rd.query("SELECT count(*), count(score) FROM quality")[0]
    assert n > 0 and scored == n  # every quality item answered over TLS
    assert all(m["supported"] for m in meta["quality_ppl"].values())
    assert all(m["supported"] for m in meta["quality_logprobs"].values())


def test_a_plain_http_endpoint_builds_no_tls_context():
    """Loading the trust store costs ~0.05 s of CPU at every run's start: for http endpoints
    the probe, the /metrics scrape and the clients get no context at all."""
    from abtui.client.tls import ssl_context
    from abtui.runner.endpoints import resolve_targets
    from abtui.spec import ArmSpec, Spec
    from abtui.telemetry.sampler import arms_from_spec

    with SimProcess(ttft_ms=5, itl_ms=1, seed=1) as sim:
        spec = Spec(arms=[ArmSpec(name="a", url=sim.url, role="baseline")])
        info = ssl_context.cache_info()
        (target,) = resolve_targets(spec)
        assert target.tls is False and arms_from_spec(spec)[0].verify is False
        after = ssl_context.cache_info()
        assert after.hits + after.misses == info.hits + info.misses
