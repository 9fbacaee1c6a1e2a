"""Loopback networking of the tests: a free port, and plain HTTP requests to a replica."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

# No proxy: a proxy from the environment must not carry requests meant for 127.0.0.1.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Response:
    """One HTTP answer: status, headers and the body as text."""

    status: int
    headers: Any
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def http(
    method: str,
    url: str,
    *,
    body: Any = None,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10,
) -> Response:
    """One real HTTP request; error statuses are returned, not raised. ``body``: bytes as
    they are, anything else as JSON; ``token``: a bearer token."""
    data = None
    all_headers = dict(headers or {})
    if isinstance(body, bytes):
        data = body
    elif body is not None:
        data = json.dumps(body).encode()
        all_headers.setdefault("Content-Type", "application/json")
    if token is not None:
        all_headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=all_headers)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return Response(resp.status, resp.headers, resp.read().decode())
    except urllib.error.HTTPError as err:
        with err:
            return Response(err.code, err.headers, err.read().decode())
