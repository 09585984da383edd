"""Whether a server answers its health check: the one probe every place that starts or finds
a server polls (the UI servers, the scheduler's Prefect server, the retrieval server)."""

from __future__ import annotations

import httpx


def answers(health_url: str) -> bool:
    """Whether something answers ``health_url`` with 200 within two seconds."""
    try:
        return httpx.get(health_url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
