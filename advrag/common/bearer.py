"""The retrieval server's shared secret, ``ADVRAG_RETRIEVER_TOKEN``: a server bound beyond
loopback requires it as a bearer token on every request but ``/health``, and advrag's clients
(``HttpRetriever``, verl's agent loop) send it when it is set in their environment."""

from __future__ import annotations

import ipaddress
import os

TOKEN_ENV = "ADVRAG_RETRIEVER_TOKEN"


def retriever_token() -> str | None:
    """The token of this environment (None: unset or empty)."""
    return os.environ.get(TOKEN_ENV) or None


def auth_headers() -> dict[str, str]:
    """``Authorization: Bearer <token>`` when a token is set, else nothing."""
    token = retriever_token()
    return {"Authorization": f"Bearer {token}"} if token else {}


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server on this machine (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False
