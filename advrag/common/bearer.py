"""The retrieval server's shared secret, ``ADVRAG_RETRIEVER_TOKEN``: a server bound beyond
loopback requires it as a bearer token on every request but ``/health``, and advrag's clients
(``HttpRetriever``, verl's agent loop) send it when it is set in their environment, only over
https or to loopback."""

from __future__ import annotations

import ipaddress
import os

TOKEN_ENV = "ADVRAG_RETRIEVER_TOKEN"


def retriever_token() -> str | None:
    """The token of this environment (None: unset or empty)."""
    return os.environ.get(TOKEN_ENV) or None


def auth_headers(url: str) -> dict[str, str]:
    """``Authorization: Bearer <token>`` for requests to ``url`` when a token is set, else
    nothing; refused (``ValueError``) where the token would travel in clear text: only https
    or a loopback address carries it."""
    from urllib.parse import urlsplit

    token = retriever_token()
    if not token:
        return {}
    parts = urlsplit(url)
    if parts.scheme != "https" and not is_loopback(parts.hostname or ""):
        raise ValueError(f"{TOKEN_ENV} would travel in clear text to {url}: serve the retriever "
                         "over https (--ssl-certfile/--ssl-keyfile) and use an https:// URL, or "
                         "reach it on loopback")
    return {"Authorization": f"Bearer {token}"}


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server on this machine (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False
