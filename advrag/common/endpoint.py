"""Text generation through an OpenAI-compatible ``/v1/chat/completions`` server (e.g. vLLM).

One HTTP client for every single-turn use of a served model: UR²'s
summariser (``advrag.retrieval.summary``) and GAR's LLM slice judge
(``advrag.curation.gar_llm_judge``). ``generate`` is the ``TextGenerator``
method (timed-out prompts give ``""``, other failures raise); ``complete``
answers each prompt with its text or the ``EndpointError`` it met, for callers
that count failures per request instead of stopping.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from advrag.common.bearer import is_loopback


class EndpointError(RuntimeError):
    """A request to the OpenAI-compatible server failed; ``reason`` names how."""

    reason = "endpoint_error"


class EndpointUnavailableError(EndpointError, ConnectionError):
    """The OpenAI-compatible server could not be reached."""

    reason = "unreachable"


class EndpointTimeoutError(EndpointUnavailableError):
    """The OpenAI-compatible server did not answer within the timeout."""

    reason = "timeout"


class EndpointHTTPError(EndpointError):
    """The server answered with an HTTP status other than 200."""

    reason = "http_error"


class EndpointResponseError(EndpointError):
    """The server answered 200 with a body that is not a chat completion."""

    reason = "bad_response"


PLAIN_HTTP_OPT_IN = "ADVRAG_ALLOW_HTTP_API_KEY"
"""Set to 1 to send ``OPENAI_API_KEY`` over plain http to a host beyond loopback."""


def may_carry_key(url: str) -> bool:
    """Whether an API key may go to ``url``: https, a loopback host, or the explicit opt-in."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme == "https" or os.environ.get(PLAIN_HTTP_OPT_IN) == "1":
        return True
    return is_loopback(parts.hostname or "")


class OpenAIChatGenerator:
    """``TextGenerator`` over an OpenAI-compatible ``/v1/chat/completions`` server (e.g. vLLM).

    Meant for single-turn uses: each prompt is sent as one user message and
    the server applies the chat template, so text appended after
    ``chat_prompt`` is not continued as assistant text. Greedy (temperature 0).
    The prompts of one call are sent concurrently (``concurrency`` at a time),
    each limited to ``timeout_s``; ``timeouts`` counts the requests that ran
    past it. Stop strings go in the API's ``stop``; the matched one is put back
    at the end when the server reports it (vLLM's ``stop_reason``).
    ``OPENAI_API_KEY``, when set, is sent as the bearer token, only over https or to a
    loopback address (``may_carry_key``; a plain-http server elsewhere is refused unless
    ``ADVRAG_ALLOW_HTTP_API_KEY=1``). Without
    ``model`` the first model the server lists is used, which also checks that
    the server is up.
    """

    def __init__(self, url: str, model: str | None = None, *, timeout_s: float = 60.0,
                 concurrency: int = 8) -> None:
        import httpx

        self.base = url.rstrip("/").removesuffix("/v1")
        key = os.environ.get("OPENAI_API_KEY")
        if key and not may_carry_key(self.base):
            raise ValueError(f"OPENAI_API_KEY would travel in clear text to {self.base}: use an "
                             "https:// URL or a loopback address, or set "
                             f"{PLAIN_HTTP_OPT_IN}=1 if the network to it is trusted")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers)
        self.concurrency = concurrency
        self.timeouts = 0
        self.model = model or self._first_model()

    def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """One HTTP call; timeouts, unreachable servers and non-200 answers raise, naming the URL."""
        import httpx

        url = f"{self.base}{path}"
        try:
            response = self._client.request(method, url, **kwargs)
        except httpx.TimeoutException as exc:
            raise EndpointTimeoutError(
                f"Endpoint {url} did not answer within {self._client.timeout.read} s."
            ) from exc
        except httpx.TransportError as exc:
            raise EndpointUnavailableError(
                f"Endpoint {url} is unreachable ({type(exc).__name__}: {exc}). Start an "
                "OpenAI-compatible server there (e.g. `vllm serve <model>`) or fix the "
                "configured endpoint."
            ) from exc
        if response.status_code != 200:
            raise EndpointHTTPError(f"{url} answered HTTP {response.status_code}: "
                                    f"{response.text[:500]}")
        try:
            return response.json()
        except ValueError as exc:
            raise EndpointResponseError(f"{url} answered 200 with a body that is not JSON: "
                                        f"{response.text[:200]!r}") from exc

    def _first_model(self) -> str:
        """The first model the server lists (``GET /v1/models``); also checks it is up."""
        models = self._request("GET", "/v1/models").get("data") or []
        if not models:
            raise EndpointResponseError(f"{self.base}/v1/models lists no model; name one "
                                        "explicitly.")
        return str(models[0]["id"])

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        """The user message itself (a system message goes first, a blank line apart)."""
        return f"{system}\n\n{user}" if system else user

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        """One chat completion per prompt; timed-out ones are ``""``, other failures raise."""
        outputs = self.complete(prompts, max_new_tokens=max_new_tokens, stop=stop)
        failed = next((o for o in outputs if isinstance(o, EndpointError)
                       and not isinstance(o, EndpointTimeoutError)), None)
        if failed is not None:
            raise failed
        return ["" if isinstance(o, EndpointTimeoutError) else o for o in outputs]

    def complete(self, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str | EndpointError]:
        """Each prompt's completion, or the ``EndpointError`` its request met; never raises one."""
        if not prompts:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            outputs = list(pool.map(lambda p: self._outcome(p, max_new_tokens, stop), prompts))
        self.timeouts += sum(isinstance(o, EndpointTimeoutError) for o in outputs)
        return outputs

    def _outcome(self, prompt: str, max_new_tokens: int, stop: Sequence[str]) -> str | EndpointError:
        """The completion of one prompt, or the error its request met."""
        try:
            return self._complete(prompt, max_new_tokens, stop)
        except EndpointError as exc:
            return exc

    def _complete(self, prompt: str, max_new_tokens: int, stop: Sequence[str]) -> str:
        """The completion of one prompt (the matched stop string put back)."""
        payload: dict[str, Any] = {
            "model": self.model, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_new_tokens, "temperature": 0,
        }
        if stop:
            payload["stop"] = list(stop)
        body = self._request("POST", "/v1/chat/completions", json=payload)
        try:
            choice = body["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise EndpointResponseError(f"{self.base}/v1/chat/completions answered without "
                                        f"choices[0].message: {str(body)[:200]}") from exc
        matched = choice.get("stop_reason")
        return text + matched if isinstance(matched, str) and matched in stop else text

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()
