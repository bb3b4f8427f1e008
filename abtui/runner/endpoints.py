"""Checking endpoints before a run, and turning arm specs into client targets."""

from __future__ import annotations

import os

import httpx

from abtui.client.target import Target
from abtui.client.tls import cert_error, find_cert_error, verify_for
from abtui.errors import EndpointError
from abtui.spec import ArmSpec, Spec


def _api_key(arm: ArmSpec) -> str | None:
    if not arm.api_key_env:
        return None
    key = os.environ.get(arm.api_key_env)
    if not key:
        raise EndpointError(
            f"arm {arm.name!r}: environment variable {arm.api_key_env} is not set",
            f"export {arm.api_key_env}=... (the key is read from the environment, never stored)",
        )
    return key


def probe(arm: ArmSpec, timeout_s: float = 5.0) -> list[str]:
    """``GET {url}/models``: the endpoint answers and is OpenAI-compatible; returns model ids."""
    headers = {}
    key = _api_key(arm)
    if key:
        headers["authorization"] = f"Bearer {key}"
    url = f"{arm.url}/models"
    curl = f"curl {url}"
    try:
        verify = verify_for(arm.url, arm.insecure, arm.ca_bundle)
        with httpx.Client(trust_env=False, timeout=timeout_s, verify=verify) as c:
            r = c.get(url, headers=headers)
    except httpx.ConnectError as e:
        tls = find_cert_error(e)
        if tls is not None:
            raise cert_error(arm.name, arm.url, tls) from None
        raise EndpointError(
            f"arm {arm.name!r}: cannot connect to {arm.url} ({e})",
            f"is the server up? try `{curl}`",
        ) from None
    except httpx.TimeoutException:
        raise EndpointError(
            f"arm {arm.name!r}: {url} did not answer within {timeout_s:g} s",
            f"is the server overloaded or still loading? try `{curl}`",
        ) from None
    except httpx.HTTPError as e:
        raise EndpointError(
            f"arm {arm.name!r}: {url}: {type(e).__name__}: {e}", f"try `{curl}`"
        ) from None
    if r.status_code in (401, 403):
        raise EndpointError(
            f"arm {arm.name!r}: {url} refused the credentials (HTTP {r.status_code})",
            "set api_key_env for this arm to the variable holding its key",
        )
    if r.status_code == 404:
        raise EndpointError(
            f"arm {arm.name!r}: {url} not found (HTTP 404)",
            "is this an OpenAI-compatible server, and does the URL end in the API's /v1?",
        )
    if r.status_code >= 400:
        raise EndpointError(
            f"arm {arm.name!r}: {url} answered HTTP {r.status_code}", f"try `{curl}`"
        )
    try:
        data = r.json().get("data", [])
        return [m["id"] for m in data if isinstance(m, dict) and "id" in m]
    except (ValueError, AttributeError, TypeError):
        raise EndpointError(
            f"arm {arm.name!r}: {url} did not return an OpenAI model list",
            "is this an OpenAI-compatible server?",
        ) from None


def resolve_targets(spec: Spec) -> list[Target]:
    """One :class:`Target` per arm, in arm order; fails early with a hint if an arm can't work."""
    targets = []
    for arm in spec.arms:
        models = probe(arm)
        model = arm.model
        if model is None:
            if not models:
                raise EndpointError(
                    f"arm {arm.name!r}: {arm.url}/models lists no model",
                    'name the model with model = "..." in the arm (or --model)',
                )
            model = models[0]
            arm.model = model
        headers = {}
        key = _api_key(arm)
        if key:
            headers["authorization"] = f"Bearer {key}"
        req = spec.request
        params: dict = {"temperature": req.temperature}
        if req.seed is not None:
            params["seed"] = req.seed
        if req.ignore_eos:
            params["ignore_eos"] = True
        params.update(arm.params)
        targets.append(
            Target(
                base_url=arm.url,
                model=model,
                api=arm.api or req.api,
                headers=headers,
                params=params,
                timeout_s=req.timeout_s,
                connect_timeout_s=req.connect_timeout_s,
                read_timeout_s=req.read_timeout_s,
                insecure=arm.insecure,
                ca_bundle=arm.ca_bundle,
            )
        )
    return targets
