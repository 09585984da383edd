"""An API key goes only over https or to loopback, unless the user opts in."""

from __future__ import annotations

import pytest

from advrag.common.endpoint import PLAIN_HTTP_OPT_IN, OpenAIChatGenerator, may_carry_key


@pytest.mark.parametrize(("url", "allowed"), [
    ("https://api.example.com", True), ("http://127.0.0.1:8000", True),
    ("http://localhost:8000/v1", True), ("http://[::1]:8000", True), ("http://127.8.0.1", True),
    ("http://10.0.1.5:8000", False), ("http://judge.internal:8000", False),
    ("http://127.0.0.1.evil.example", False),
])
def test_which_urls_may_carry_a_key(url, allowed, monkeypatch):
    monkeypatch.delenv(PLAIN_HTTP_OPT_IN, raising=False)
    assert may_carry_key(url) is allowed
    monkeypatch.setenv(PLAIN_HTTP_OPT_IN, "1")
    assert may_carry_key(url) is True


def test_a_key_is_not_sent_in_clear_text_beyond_loopback(monkeypatch):
    monkeypatch.delenv(PLAIN_HTTP_OPT_IN, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-abcdefgh")
    with pytest.raises(ValueError, match=r"clear text to http://10\.0\.1\.5:8000.*https://"):
        OpenAIChatGenerator("http://10.0.1.5:8000", model="judge")
    local = OpenAIChatGenerator("http://127.0.0.1:9/v1", model="judge")  # no request yet
    assert local._client.headers["Authorization"] == "Bearer sk-test-abcdefgh"
    monkeypatch.delenv("OPENAI_API_KEY")
    keyless = OpenAIChatGenerator("http://10.0.1.5:8000", model="judge")  # nothing to leak
    assert "Authorization" not in keyless._client.headers
