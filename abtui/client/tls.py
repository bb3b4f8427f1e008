"""TLS settings of an arm: verification on by default, a private CA, or explicitly off.

Every connection abtui opens to an endpoint (the streaming clients, the ``/v1/models`` probe,
the ``/metrics`` scraper, the context-window check, the perplexity and logprob collectors)
takes its :class:`ssl.SSLContext` from :func:`ssl_context` (through :func:`verify_for`: none
for a plain http URL):

- default: the system's trust store and certifi's Mozilla roots (what httpx trusts by
  default), certificate and host name checked;
- ``ca_bundle = "ca.pem"`` (``--ca-bundle``): the default roots plus that PEM file, for a
  self-hosted endpoint signed by a private CA (verification stays on);
- ``insecure = true`` (``--insecure``): no certificate or host-name check at all; the session
  stores the flag and the summary warns about it.

A certificate failure is a one-line :class:`~abtui.errors.EndpointError` naming the endpoint,
with the two ways out as its hint (:func:`cert_error`).
"""

from __future__ import annotations

import ssl
from functools import lru_cache

from abtui.errors import EndpointError, SpecError

TLS_HINT = (
    'for a private CA give the arm ca_bundle = "ca.pem" (or --ca-bundle FILE); '
    "to turn verification off, insecure = true (or --insecure)"
)


@lru_cache(maxsize=16)
def ssl_context(insecure: bool = False, ca_bundle: str | None = None) -> ssl.SSLContext:
    """The client context for these settings (one per process and settings: loading the
    system's trust store takes milliseconds)."""
    ctx = ssl.create_default_context()
    try:  # also the Mozilla roots httpx would use (a minimal image may have no system store)
        import certifi

        ctx.load_verify_locations(cafile=certifi.where())
    except (ImportError, OSError, ssl.SSLError):
        pass
    if ca_bundle:
        ctx.load_verify_locations(cafile=ca_bundle)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def verify_for(url: str, insecure: bool = False, ca_bundle: str | None = None):
    """An httpx client's ``verify`` for ``url``: the context of these settings for https, and
    False for plain http, where no TLS is spoken (building a context loads the trust store,
    ~0.05 s of CPU; httpx's default ``verify=True`` builds its own just as slowly)."""
    if url.lower().startswith("https:"):
        return ssl_context(insecure, ca_bundle)
    return False


def check_ca_bundle(path: str, where: str) -> None:
    """A readable PEM file with at least one certificate, else a SpecError naming ``where``."""
    try:
        ssl.create_default_context().load_verify_locations(cafile=path)
    except FileNotFoundError:
        raise SpecError(f"{where}: ca_bundle {path!r} does not exist") from None
    except (OSError, ssl.SSLError, ValueError) as e:
        raise SpecError(
            f"{where}: ca_bundle {path!r} is not a PEM certificate file ({e})",
            "give the CA's certificate in PEM form (-----BEGIN CERTIFICATE-----)",
        ) from None


def find_cert_error(exc: BaseException | None) -> ssl.SSLError | None:
    """The TLS error behind ``exc`` (httpx and asyncio wrap it), or None."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ssl.SSLError):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def describe(err: ssl.SSLError) -> str:
    """``certificate verify failed: self-signed certificate`` rather than the library's tuple."""
    if isinstance(err, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {err.verify_message}"
    return err.reason or str(err)


def cert_error(arm: str, url: str, err: ssl.SSLError) -> EndpointError:
    """The one-line error for a TLS failure talking to ``url``."""
    return EndpointError(f"arm {arm!r}: TLS failed for {url}: {describe(err)}", TLS_HINT)


def check_arm_tls(arm, where: str) -> None:
    """An arm's ``insecure`` / ``ca_bundle`` make sense together (SpecError naming ``where``)."""
    if arm.insecure and arm.ca_bundle:
        raise SpecError(
            f"{where}: insecure = true and ca_bundle exclude each other",
            "ca_bundle keeps verification on with your CA; insecure turns it off: choose one",
        )
    if arm.ca_bundle:
        check_ca_bundle(arm.ca_bundle, where)
