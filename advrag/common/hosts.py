"""Host-name checks for the local servers advrag starts (retrieval, Prefect, the docs).

A server on 127.0.0.1 is reachable from any web page whose name resolves to 127.0.0.1 (DNS
rebinding): to the browser the page and the server share one origin, so CORS and CSRF checks
let it through. What such a page cannot change is the ``Host`` header, which carries its own
name: a server that answers only the names it was bound for refuses it (403).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("0.0.0.0", "::", "")


def allowed_hosts(host: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The Host names a server bound to ``host`` answers: the loopback names, ``host`` itself
    (unless a wildcard) and ``extra``; a wildcard bind with no ``extra`` is refused, as any
    name could reach it."""
    if host in WILDCARDS and not extra:
        raise ValueError(f"--host {host or '(all)'} answers on every address: name the host "
                         "names its clients use with --allowed-host (DNS rebinding: any name "
                         "that resolves here would reach it otherwise)")
    bound = () if host in WILDCARDS else (host,)
    return tuple(dict.fromkeys((*LOOPBACK_NAMES, *bound, *extra)))


def host_name(header: bytes) -> str:
    """The name in a Host header, without its port (``[::1]:8000`` → ``::1``), lower-cased."""
    host = header.decode("latin-1").strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def refusal(host: str, allowed: set[str]) -> str:
    """What a refused Host is told: the names this server answers."""
    return f"Host {host!r} is not one this server answers ({', '.join(sorted(allowed))})"


async def refuse(send, status: int, detail: str) -> None:
    """Answer ``status`` with ``{"detail": ...}`` (from a middleware, before the app runs)."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": json.dumps({"detail": detail}).encode()})


class HostChecked:
    """ASGI middleware: an HTTP request or websocket whose Host is not one of ``allowed`` gets
    403 (a websocket is closed before it is accepted) and never reaches the app."""

    def __init__(self, app, allowed: Sequence[str]) -> None:
        self.app, self.allowed = app, {h.lower() for h in allowed}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = host_name(dict(scope["headers"]).get(b"host", b""))
        if host in self.allowed:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await receive()  # websocket.connect; a close before accept is uvicorn's 403
            await send({"type": "websocket.close", "code": 1008})
        else:
            await refuse(send, 403, f"{refusal(host, self.allowed)}: start it with "
                                    "--allowed-host for the name its clients use")


def host_checked_wsgi(app, allowed: Sequence[str]):
    """``HostChecked`` for a WSGI app (the docs server): any other Host gets 403."""
    answered = {h.lower() for h in allowed}

    def checked(environ, start_response):
        host = host_name(environ.get("HTTP_HOST", "").encode("latin-1"))
        if host in answered:
            return app(environ, start_response)
        start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
        return [f"{refusal(host, answered)}\n".encode()]

    return checked
