"""UR² summariser: parsing, batching, caching, counting, the OpenAI-compatible client, the server."""

from __future__ import annotations

import json
import socket
import time

import pytest
from fakes import CORPUS, KeywordRetriever, ScriptedGenerator
from fastapi.testclient import TestClient
from pydantic import ValidationError
from stand_in_http import QuietHandler, running_server

from advrag.common.endpoint import EndpointUnavailableError, OpenAIChatGenerator
from advrag.common.types import Summary, format_docs
from advrag.config.flows import SummaryConfig
from advrag.recipes.ur2.recipe import load_summary_model
from advrag.retrieval.server import create_app, summary_config
from advrag.retrieval.server import main as server_main
from advrag.retrieval.summary import (
    SUMMARY_FALLBACK_MESSAGE,
    LLMSummariser,
    make_summariser,
    parse_summary,
    summary_prompt,
)

HAMLET, PARIS = [CORPUS[0]], [CORPUS[1]]
SUMMARY_OUT = "**Final Information**\nHamlet was written by William Shakespeare.\n"


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (SUMMARY_OUT, Summary("Hamlet was written by William Shakespeare.", "summary")),
        ("Final Information: Paris is in France.", Summary("Paris is in France.", "summary")),
        ("**Final Information:**\nParis.", Summary("Paris.", "summary")),
        ("- **Final Information**: **Paris** is in France.",
         Summary("**Paris** is in France.", "summary")),
        ("### Final information\n\n- fact one\n- fact two", Summary("- fact one\n- fact two",
                                                                     "summary")),
        (SUMMARY_FALLBACK_MESSAGE, Summary(SUMMARY_FALLBACK_MESSAGE, "fallback")),
        # the sentence under the label, re-cased and without its commas: still the fallback
        ("**Final Information**\nthis query requires design computation or complex reasoning "
         "which EXCEEDS the capabilities of a search engine",
         Summary(SUMMARY_FALLBACK_MESSAGE, "fallback")),
        # one clear fragment is enough
        ("Sorry, that exceeds the capabilities of a search engine.",
         Summary(SUMMARY_FALLBACK_MESSAGE, "fallback")),
        # fallback written before an empty label: a fallback
        (f"{SUMMARY_FALLBACK_MESSAGE}\n**Final Information**\n",
         Summary(SUMMARY_FALLBACK_MESSAGE, "fallback")),
        # what SmolLM2-135M wrote for "Compute 17 * 23 step by step"
        (f"Final Information:\n{SUMMARY_FALLBACK_MESSAGE}",
         Summary(SUMMARY_FALLBACK_MESSAGE, "fallback")),
    ],
)
def test_parse_summary_reads_summaries_and_fallbacks(output, expected):
    assert parse_summary(output) == expected


@pytest.mark.parametrize(
    "output",
    [
        "",  # what a timed-out endpoint request returns
        "   \n",
        "Hamlet was written by Shakespeare.",  # no label
        "**Final Information**\n",  # label, empty body
        # the label's words inside a sentence are not the label (SmolLM2-135M wrote this
        # for "Who wrote Hamlet?"; "requires a combination of design, …" is not the fragment)
        "This query requires a combination of design, computation, or complex reasoning. "
        "It requires a final information that is not in the documents.",
    ],
)
def test_parse_summary_malformed_is_none(output):
    assert parse_summary(output) is None


def test_summary_prompt_holds_query_documents_and_the_fallback_sentence():
    prompt = summary_prompt("Who wrote Hamlet?", HAMLET)
    assert "Query: Who wrote Hamlet?" in prompt
    assert "Doc 1(Title: Hamlet) Hamlet is a tragedy written by William Shakespeare." in prompt
    assert SUMMARY_FALLBACK_MESSAGE in prompt
    assert prompt.index("Query:") < prompt.index("Documents:")  # truncation cuts documents first


# ---------------------------------------------------------------- summariser


def _scripted() -> ScriptedGenerator:
    return ScriptedGenerator(
        {
            "Query: Who wrote Hamlet?": SUMMARY_OUT,
            "Query: Compute 17 * 23": SUMMARY_FALLBACK_MESSAGE,
            "Query: capital of France": "Paris, I think.",  # no label: malformed
        },
        default="",
    )


def test_one_generate_call_per_batch_and_outcomes_counted():
    gen = _scripted()
    summariser = LLMSummariser(gen, "fake", max_new_tokens=32)
    requests = [
        ("Who wrote Hamlet?", HAMLET),
        ("Compute 17 * 23", PARIS),
        ("capital of France", PARIS),
        ("Who wrote Hamlet?", HAMLET),  # same as the first: generated once
    ]
    results = summariser.summarise(requests)

    assert gen.batch_sizes == [3]
    assert gen.calls[0][0] == gen.chat_prompt(summary_prompt("Who wrote Hamlet?", HAMLET))
    assert gen.stops == [()]
    assert results == [
        Summary("Hamlet was written by William Shakespeare.", "summary"),
        Summary(SUMMARY_FALLBACK_MESSAGE, "fallback"),
        Summary(format_docs(PARIS), "raw"),  # malformed → the raw documents
        Summary("Hamlet was written by William Shakespeare.", "summary"),
    ]
    # 4 requests = 2 summaries + 1 fallback + 1 raw; 3 distinct prompts generated, no cache
    assert summariser.stats.as_dict() == {
        "requests": 4, "cache_hits": 0, "generated": 3,
        "summaries": 2, "fallbacks": 1, "raw_fallbacks": 1,
    }


def test_empty_batch_makes_no_call():
    gen = _scripted()
    assert LLMSummariser(gen, "fake").summarise([]) == []
    assert gen.calls == []


def test_cache_serves_summaries_and_fallbacks_but_retries_raw(tmp_path):
    requests = [("Who wrote Hamlet?", HAMLET), ("Compute 17 * 23", PARIS),
                ("capital of France", PARIS)]
    first = LLMSummariser(_scripted(), "fake", cache_dir=tmp_path)
    expected = first.summarise(requests)

    # a fresh summariser (another process) on the same directory
    gen = _scripted()
    second = LLMSummariser(gen, "fake", cache_dir=tmp_path)
    assert second.summarise(requests) == expected
    assert gen.batch_sizes == [1]  # only the raw one is asked again
    assert gen.calls[0][0].count("Query: capital of France") == 1
    assert (second.stats.cache_hits, second.stats.generated) == (2, 1)
    assert (tmp_path / "summaries.sqlite").is_file()


def test_cache_key_covers_query_passage_ids_and_summariser(tmp_path):
    base = LLMSummariser(_scripted(), "model-a", cache_dir=tmp_path)
    key = base.key("Who wrote Hamlet?", HAMLET)
    assert key == base.key("Who wrote Hamlet?", HAMLET)
    assert key != base.key("Who wrote Hamlet ?", HAMLET)
    assert key != base.key("Who wrote Hamlet?", PARIS)
    assert key != LLMSummariser(_scripted(), "model-b").key("Who wrote Hamlet?", HAMLET)
    assert key != LLMSummariser(_scripted(), "model-a", max_new_tokens=8).key(
        "Who wrote Hamlet?", HAMLET)

    base.summarise([("Who wrote Hamlet?", HAMLET)])
    other = LLMSummariser(gen := _scripted(), "model-b", cache_dir=tmp_path)
    other.summarise([("Who wrote Hamlet?", HAMLET)])
    assert gen.batch_sizes == [1]  # another summariser's entry is not reused


def test_no_cache_dir_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    LLMSummariser(_scripted(), "fake").summarise([("Who wrote Hamlet?", HAMLET)])
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- make_summariser, config


def test_make_summariser_off_is_none():
    assert make_summariser(SummaryConfig()) is None


def test_make_summariser_uses_the_local_generator_under_its_name(tmp_path):
    gen = _scripted()
    config = SummaryConfig(summarise=True, max_new_tokens=40, cache_dir=tmp_path)
    summariser = make_summariser(config, gen, local_name="smollm2")
    assert (summariser.generator, summariser.name, summariser.max_new_tokens) == (
        gen, "smollm2", 40)
    with pytest.raises(ValueError, match="local_name"):
        make_summariser(config, gen)


def test_make_summariser_loads_a_local_model_spec(tiny_policy_dir, tmp_path):
    """A real (tiny, random) model: its output is not a summary, so the raw documents come back."""
    config = SummaryConfig(summarise=True, model=str(tiny_policy_dir), max_new_tokens=8,
                           cache_dir=tmp_path)
    summariser = make_summariser(config, load_model=load_summary_model)
    (result,) = summariser.summarise([("Who wrote Hamlet?", HAMLET)])
    assert result == Summary(format_docs(HAMLET), "raw")
    assert summariser.stats.raw_fallbacks == 1


def test_make_summariser_is_handed_the_local_model_loader(tmp_path):
    """The spec goes to the caller's loader (smollm2 when none is named); no loader, no model."""
    gen, asked = _scripted(), []
    config = SummaryConfig(summarise=True, cache_dir=tmp_path)
    summariser = make_summariser(config, load_model=lambda spec: asked.append(spec) or gen)
    assert (asked, summariser.generator, summariser.name) == (["smollm2"], gen, "smollm2")
    with pytest.raises(ValueError, match="'tiny' needs load_model"):
        make_summariser(SummaryConfig(summarise=True, model="tiny"))


def test_server_module_command_line_needs_an_endpoint_to_summarise(capsys):
    with pytest.raises(SystemExit) as info:
        server_main(["--index-dir", "unused", "--summarise"])
    assert info.value.code == 2
    assert "advrag serve-retriever" in capsys.readouterr().err


def test_summary_config_from_command_line_values():
    config = summary_config(True, endpoint=None, model="tiny", max_new_tokens="64",
                            timeout_s="2.5", cache_dir=None)
    assert (config.summarise, config.endpoint, config.model) == (True, None, "tiny")
    assert (config.max_new_tokens, config.timeout_s) == (64, 2.5)
    assert config.cache_dir == SummaryConfig().cache_dir
    with pytest.raises(ValidationError, match="endpoint"):
        summary_config(True, endpoint="ftp://host:1")


# ---------------------------------------------------------------- OpenAI-compatible client


class _Handler(QuietHandler):
    """A minimal OpenAI-compatible server: one model; echoes a summary; "SLOW" sleeps 2 s."""

    def do_GET(self):
        self._send({"object": "list", "data": [{"id": "tiny-summariser", "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        prompt = body["messages"][-1]["content"]
        if "SLOW" in prompt:
            time.sleep(2)
        if "Compute" in prompt:
            content = f"**Final Information**\n{SUMMARY_FALLBACK_MESSAGE}"
        else:
            content = SUMMARY_OUT
        choice = {"index": 0, "message": {"role": "assistant", "content": content},
                  "finish_reason": "stop", "stop_reason": (body.get("stop") or [None])[0]}
        self._send({"object": "chat.completion", "choices": [choice]})

    def _send(self, payload):
        self.send_text(200, json.dumps(payload), "application/json")


@pytest.fixture(scope="module")
def endpoint():
    with running_server(_Handler) as server:
        server.requests = []
        yield server


def _url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_openai_generator_lists_the_model_and_completes(endpoint):
    gen = OpenAIChatGenerator(_url(endpoint) + "/v1/")
    assert gen.model == "tiny-summariser"
    assert gen.chat_prompt("hi", system="be brief") == "be brief\n\nhi"
    endpoint.requests.clear()
    assert gen.generate(["Who wrote Hamlet?"], max_new_tokens=17) == [SUMMARY_OUT]
    (sent,) = endpoint.requests
    assert sent == {"model": "tiny-summariser", "max_tokens": 17, "temperature": 0,
                    "messages": [{"role": "user", "content": "Who wrote Hamlet?"}]}
    # a stop string the server reports as matched is put back, as the protocol wants
    assert gen.generate(["x"], max_new_tokens=5, stop=["</search>"]) == [SUMMARY_OUT + "</search>"]
    gen.close()


def test_timeout_gives_raw_documents_and_is_counted(endpoint):
    gen = OpenAIChatGenerator(_url(endpoint), "tiny-summariser", timeout_s=0.5)
    summariser = LLMSummariser(gen, "endpoint")
    results = summariser.summarise([("SLOW query", PARIS), ("Who wrote Hamlet?", HAMLET),
                                    ("Compute 17 * 23", PARIS)])
    assert results == [
        Summary(format_docs(PARIS), "raw"),
        Summary("Hamlet was written by William Shakespeare.", "summary"),
        Summary(SUMMARY_FALLBACK_MESSAGE, "fallback"),
    ]
    assert gen.timeouts == 1
    assert (summariser.stats.raw_fallbacks, summariser.stats.fallbacks) == (1, 1)
    gen.close()


def test_make_summariser_with_an_endpoint(endpoint, tmp_path):
    config = SummaryConfig(summarise=True, endpoint=_url(endpoint), cache_dir=tmp_path)
    summariser = make_summariser(config)
    assert summariser.name == f"{_url(endpoint)}#tiny-summariser"
    assert isinstance(summariser.generator, OpenAIChatGenerator)


def test_unreachable_endpoint_names_the_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(EndpointUnavailableError, match=f"127.0.0.1:{port}/v1/models"):
            OpenAIChatGenerator(f"http://127.0.0.1:{port}", timeout_s=2)


# ---------------------------------------------------------------- retrieval server


LOOPBACK = "http://127.0.0.1"  # a Host the server answers (TestClient's own is "testserver")


def test_server_serves_summaries_in_search_r1_shape():
    summariser = LLMSummariser(_scripted(), "fake")
    client = TestClient(create_app(KeywordRetriever(CORPUS), default_topk=1,
                                   summariser=summariser), base_url=LOOPBACK)
    queries = ["Who wrote Hamlet?", "Compute 17 * 23", "capital of France"]
    body = client.post("/retrieve", json={"queries": queries, "return_scores": True}).json()

    assert body["summaries"] == ["summary", "fallback", "raw"]
    summary, fallback, raw = body["result"]
    assert summary == [{"document": {"id": "summary", "contents":
                       "Summary\nHamlet was written by William Shakespeare."}, "score": 0.0}]
    assert fallback[0]["document"]["contents"] == f"Summary\n{SUMMARY_FALLBACK_MESSAGE}"
    # raw: the top-1 passage itself (p2: "capital", "of", "france" overlap: score 3)
    assert raw == [{"document": {"id": "p2", "contents": CORPUS[1].contents}, "score": 3.0}]
    assert client.get("/health").json()["summaries"]["requests"] == 3


def test_server_without_summariser_is_unchanged():
    client = TestClient(create_app(KeywordRetriever(CORPUS), default_topk=1), base_url=LOOPBACK)
    assert client.get("/health").json() == {"status": "ok", "queued_queries": 0}
    body = client.post("/retrieve", json={"queries": ["Hamlet"]}).json()
    assert body == {"result": [[{"id": "p1", "contents": CORPUS[0].contents}]]}
