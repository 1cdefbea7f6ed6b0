"""The engine's HTTP API as a user's client speaks it: JSON over ``urllib`` (no client library), every failure one
``EngineError`` line with the URL's secrets masked (``spectune.masking``)."""
from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from typing import Any

from spectune.errors import EngineError
from spectune.masking import mask_text, mask_url, userinfo_password, without_userinfo


class Unreachable(EngineError):
    """Nothing answers at the URL (refused, reset, timed out): the caller decides whether the engine died."""


def _open(url: str, timeout: float, payload: dict[str, Any] | None = None) -> bytes:
    headers = {"Content-Type": "application/json"} if payload is not None else {}
    # the userinfo ends at the last "@" (masking's rule): a token holding "/" is neither the host nor printed; the
    # paths spectune appends (/v1/completions, /metrics, /health) hold no "@"
    req = urllib.request.Request(without_userinfo(url), headers={**headers, **_auth(url)},
                                 data=None if payload is None else json.dumps(payload).encode())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.read()
    except urllib.error.HTTPError as e:
        body = e.read().decode("utf-8", "replace").strip().replace("\n", " ")[:300]
        raise EngineError(f"{req.get_method()} {mask_url(url)} answered HTTP {e.code}: "
                          f"{mask_text(body, (url,))}") from None
    except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError, http.client.HTTPException) as e:
        why = getattr(e, "reason", None) or e
        raise Unreachable(f"cannot reach the engine at {mask_url(url)}: {mask_text(str(why), (url,))}") from None


def get_text(url: str, timeout: float = 30.0) -> str:
    """GET ``url`` as text."""
    return _open(url, timeout).decode("utf-8", "replace")


def get_json(url: str, timeout: float = 30.0) -> Any:
    """GET ``url`` as JSON."""
    text = get_text(url, timeout)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise EngineError(f"GET {mask_url(url)} did not answer JSON: {text[:120]!r}") from None


def post_json(url: str, payload: dict[str, Any], timeout: float = 600.0) -> Any:
    """POST ``payload`` as JSON to ``url``; the JSON answer."""
    text = _open(url, timeout, payload).decode("utf-8", "replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise EngineError(f"POST {mask_url(url)} did not answer JSON: {text[:120]!r}") from None


def _auth(url: str) -> dict[str, str]:
    """A bearer token from the URL's userinfo password (``http://:TOKEN@host:port``), as OpenAI clients send
    ``--api-key``; urllib does not send userinfo itself."""
    pw = userinfo_password(url)
    return {"Authorization": f"Bearer {pw}"} if pw else {}
