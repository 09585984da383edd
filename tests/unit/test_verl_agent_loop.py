"""advrag's Search-R1 agent loop inside verl: a stand-in for verl's server manager plays a
scripted policy in tokens, advrag's real retrieval server answers the searches, and the
episode is the local loop's, token for token, with only the policy's tokens in the mask."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from fakes import ScriptedGenerator, cut_after_stop
from stand_in_http import serving_app
from verl_stand_in import Summarising

pytest.importorskip("verl", reason="verl is not installed here: run `make verl`")

from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from advrag.agents.probes import Prober  # noqa: E402
from advrag.agents.prompts import FALLBACK_HINT, exploration_pool, probe_observation  # noqa: E402
from advrag.agents.search_loop import run_search_agent  # noqa: E402
from advrag.core.rewards import answer_reward  # noqa: E402
from advrag.engines.verl.agent_loop import (  # noqa: E402
    DirectAnswerAgentLoop,
    RexSearchAgentLoop,
    SearchR1AgentLoop,
)
from advrag.engines.verl.rewards import (  # noqa: E402
    response_trajectory,
    search_r1_score,
    ur2_score,
)
from advrag.retrieval.bm25 import BM25Index, build_bm25_dir  # noqa: E402
from advrag.retrieval.retriever import BM25Retriever, read_passages  # noqa: E402
from advrag.retrieval.server import create_app  # noqa: E402

DOCS = [{"id": "p1", "contents": "Hamlet\nHamlet is a tragedy written by William Shakespeare."},
        {"id": "p2", "contents": "Paris\nParis is the capital of France."}]
SCRIPT = {  # the first rule the context contains: later turns' keys first
    "</information>": "<answer> William Shakespeare </answer>",
    "Who wrote Hamlet?<|im_end|>": "<think> I need the author </think><search> Hamlet "
                                   "tragedy </search> then more",
    "capital of France?": "I am not sure.",
}


class StandInServers:
    """verl's server manager, played by the scripted policy: decodes the context, continues it
    with the first matching rule, cut after the request's stop strings, as tokens."""

    def __init__(self, tokenizer, rules):
        self.tokenizer, self.policy, self.requests = tokenizer, ScriptedGenerator(rules), []

    async def generate(self, request_id, prompt_ids, sampling_params, **_):
        self.requests.append(dict(sampling_params))
        context = self.tokenizer.decode(prompt_ids)
        text = cut_after_stop(self.policy._pick(context), sampling_params["stop"])
        return TokenOutput(token_ids=self.tokenizer.encode(text, add_special_tokens=False))


@pytest.fixture(scope="module")
def retriever(tmp_path_factory):
    directory = tmp_path_factory.mktemp("bm25")
    (directory / "chunks.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    build_bm25_dir(directory / "chunks.jsonl", directory / "index", progress=False)
    return BM25Retriever(BM25Index.load(directory / "index"),
                         read_passages(directory / "index" / "passages.jsonl"))


@pytest.fixture(scope="module")
def server_url(retriever):
    with serving_app(create_app(retriever)) as url:
        yield url


@pytest.fixture(scope="module")
def tokenizer(tiny_policy_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_policy_dir)


def episode(tokenizer, url, question, max_turns=2, response_length=2048, rules=SCRIPT):
    servers = StandInServers(tokenizer, rules)

    async def run():  # verl builds each loop inside its worker's event loop
        loop = SearchR1AgentLoop(
            trainer_config=DictConfigWrap(OmegaConf.create({"actor_rollout_ref": {"rollout": {
                "prompt_length": 1024, "response_length": response_length}}})),
            server_manager=servers, tokenizer=tokenizer, processor=None, dataset_cls=None,
            data_config=DictConfigWrap(OmegaConf.create({})), retriever_url=url,
            max_turns=max_turns, topk=1)
        return await loop.run({"temperature": 1.0},
                              raw_prompt=[{"role": "user", "content": question}])

    return asyncio.run(run()), servers


def local_episode(tokenizer, retriever, question, max_turns=2, summariser=None, rules=SCRIPT):
    """The local loop on the same policy and retriever: its response's segments."""
    class Chat(ScriptedGenerator):
        def chat_prompt(self, user, system=None):
            return tokenizer.apply_chat_template([{"role": "user", "content": user}],
                                                 tokenize=False, add_generation_prompt=True)

    (trajectory,) = run_search_agent([question], Chat(rules), retriever, max_turns=max_turns,
                                     topk=1, prompt=lambda q: q, summariser=summariser)
    runs: list[tuple[str, str]] = []  # adjacent segments of one source joined, as in a mask
    for segment in trajectory.segments[1:]:
        if runs and runs[-1][1] == segment.source:
            runs[-1] = (runs[-1][0] + segment.text, segment.source)
        else:
            runs.append((segment.text, segment.source))
    return runs


def spans(tokenizer, output):
    """The response as (text, "policy"/"env") runs of equal mask."""
    runs, ids, mask = [], output.response_ids, output.response_mask
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or mask[i] != mask[start]:
            runs.append((tokenizer.decode(ids[start:i]), "policy" if mask[start] else "env"))
            start = i
    return runs


@pytest.mark.parametrize("question", ["Who wrote Hamlet?", "What is the capital of France?"])
def test_an_episode_is_the_local_loops_with_only_the_policy_in_the_mask(
        tokenizer, retriever, server_url, question):
    output, servers = episode(tokenizer, server_url, question)
    assert len(output.response_ids) == len(output.response_mask)
    assert spans(tokenizer, output) == local_episode(tokenizer, retriever, question)
    assert all(r["stop"] for r in servers.requests)
    text = tokenizer.decode(output.response_ids)
    if question.startswith("Who"):  # one search, answered from the retrieved passage
        assert "Hamlet is a tragedy written by William Shakespeare." in text
        assert output.extra_fields["searches"] == 1
        assert search_r1_score("nq", text, ["William Shakespeare"])["score"] == 1.0
    else:  # no action twice: the invalid-action hint, then the forced answer, none given
        assert response_trajectory(text).format_errors == 3
        assert servers.requests[-1]["stop"] == ["</answer>"]


@pytest.mark.parametrize("query", ["Hamlet tragedy", "Hamlet author"])
def test_ur2_summaries_and_fallbacks_come_through_as_the_local_loop_shows_them(
        tokenizer, retriever, query):
    rules = {**SCRIPT, "Who wrote Hamlet?<|im_end|>": f"<search> {query} </search>"}
    with serving_app(create_app(retriever, summariser=Summarising())) as url:
        output, _ = episode(tokenizer, url, "Who wrote Hamlet?", rules=rules)
    spans_ = spans(tokenizer, output)
    assert spans_ == local_episode(tokenizer, retriever, "Who wrote Hamlet?",
                                   summariser=Summarising(), rules=rules)
    text = tokenizer.decode(output.response_ids)
    fell_back = query == "Hamlet author"
    assert (FALLBACK_HINT in text) == fell_back
    assert ur2_score("nq", text, ["William Shakespeare"])["fallback_faults"] == float(fell_back)


def test_the_response_budget_cuts_the_episode(tokenizer, server_url):
    output, _ = episode(tokenizer, server_url, "Who wrote Hamlet?", response_length=12)
    assert len(output.response_ids) == len(output.response_mask) == 12


def test_an_unreachable_retrieval_server_is_named(tokenizer):
    with pytest.raises(RuntimeError, match="unreachable.*advrag serve-retriever"):
        episode(tokenizer, "http://127.0.0.1:9", "Who wrote Hamlet?")


def test_a_direct_item_is_one_answer_all_the_policys_with_no_search(tokenizer, server_url):
    """UR²'s task mixing: the direct loop generates once, serves no search even when the
    policy writes one, and scores as ur2_score scores a direct item (no query expected)."""
    rules = {"capital of France?": "<think> I know it </think><answer> Paris </answer>"}
    servers = StandInServers(tokenizer, rules)

    async def run():
        loop = DirectAnswerAgentLoop(
            trainer_config=DictConfigWrap(OmegaConf.create({"actor_rollout_ref": {"rollout": {
                "prompt_length": 1024, "response_length": 2048}}})),
            server_manager=servers, tokenizer=tokenizer, processor=None, dataset_cls=None,
            data_config=DictConfigWrap(OmegaConf.create({})))
        return await loop.run({"temperature": 1.0, "stop": []}, raw_prompt=[
            {"role": "user", "content": "What is the capital of France?"}])

    output = asyncio.run(run())
    assert len(servers.requests) == 1 and output.extra_fields["searches"] == 0
    assert set(output.response_mask) == {1}
    text = tokenizer.decode(output.response_ids)
    assert text.endswith("<answer> Paris </answer>")
    direct = ur2_score("advrag", text, ["Paris"], {"retrieval_expected": False})
    searching = ur2_score("advrag", text, ["Paris"], {"retrieval_expected": True})
    assert direct["correct"] == 1.0 and direct["score"] > searching["score"]


PROBE_RULES = {  # a wrong first answer; after the probe's prompt, a search, then the answer
    "</information>": "<answer> William Shakespeare </answer>",
    "Wait, I answered before": "<search> Hamlet tragedy </search>",
    "Who wrote Hamlet?<|im_end|>": "<think> a guess </think>\n<answer> Marlowe </answer>",
}


def rex_episode(tokenizer, url, *, probe_prob=1.0, split="train", rules=PROBE_RULES,
                truth=("William Shakespeare",), max_turns=2, response_length=2048):
    """REX-RAG's agent loop on one training row (pool of one prompt): its outputs."""
    servers = StandInServers(tokenizer, rules)

    async def run():
        loop = RexSearchAgentLoop(
            trainer_config=DictConfigWrap(OmegaConf.create({"actor_rollout_ref": {"rollout": {
                "prompt_length": 1024, "response_length": response_length}}})),
            server_manager=servers, tokenizer=tokenizer, processor=None, dataset_cls=None,
            data_config=DictConfigWrap(OmegaConf.create({})), retriever_url=url,
            max_turns=max_turns, topk=1, probe_prob=probe_prob, pool_size=1,
            reward_kwargs={"metric": "em", "format_penalty": 0.2})
        return await loop.run({"temperature": 1.0}, uid="u1", session_id=0,
                              raw_prompt=[{"role": "user", "content": "Who wrote Hamlet?"}],
                              reward_model={"ground_truth": {"target": list(truth)}},
                              extra_info={"split": split})

    return asyncio.run(run())


def local_probe(tokenizer, retriever):
    """The local loop with a prober that probes every wrong answer (pool of one prompt)."""
    class Chat(ScriptedGenerator):
        def chat_prompt(self, user, system=None):
            return tokenizer.apply_chat_template([{"role": "user", "content": user}],
                                                 tokenize=False, add_generation_prompt=True)

    prober = Prober(exploration_pool(1), 1.0, lambda i, answer: True, random.Random(0))
    return run_search_agent(["Who wrote Hamlet?"], Chat(PROBE_RULES), retriever, max_turns=2,
                            topk=1, prompt=lambda q: q, prober=prober)


def trainable_runs(trajectory):
    """A local trajectory's response as runs of trainable (policy, probe) and other text."""
    runs: list[tuple[str, str]] = []
    for segment in trajectory.segments[1:]:
        source = "policy" if segment.source in ("policy", "probe") else "env"
        if runs and runs[-1][1] == source:
            runs[-1] = (runs[-1][0] + segment.text, source)
        else:
            runs.append((segment.text, source))
    return runs


def test_a_wrong_answer_opens_the_probe_the_local_loop_opens(tokenizer, retriever, server_url):
    """The episode and its probe are the local loop's two trajectories, token runs and
    scores: the episode answers Marlowe (EM 0), the probe, cut before that answer, gets the
    pool's prompt in the mask, searches and answers right (EM 1)."""
    policy, probe = rex_episode(tokenizer, server_url)
    local_policy, local_probe_ = local_probe(tokenizer, retriever)
    assert spans(tokenizer, policy) == trainable_runs(local_policy)
    assert spans(tokenizer, probe) == trainable_runs(local_probe_)
    for output, local in ((policy, local_policy), (probe, local_probe_)):
        expected = answer_reward(local.answer, ["William Shakespeare"],
                                 format_errors=local.format_errors, metric="em",
                                 format_penalty=0.2)
        assert output.extra_fields["advrag_score"] == output.reward_score == expected
    assert (policy.reward_score, probe.reward_score) == (0.0, 1.0)
    assert (policy.extra_fields["advrag_correct"], probe.extra_fields["advrag_correct"]) == \
        (False, True)
    where = probe.extra_fields["rex_probe"]
    inserted = slice(where["start"], where["start"] + where["tokens"])
    assert tokenizer.decode(probe.response_ids[inserted]) == probe_observation(
        exploration_pool(1)[0])
    assert set(probe.response_mask[inserted]) == {1}
    assert policy.extra_fields["rex_probe"] is None
    assert probe.response_ids[:where["start"]] == policy.response_ids[:where["start"]]


@pytest.mark.parametrize("case", ["correct", "dev split", "never probed", "forced answer"])
def test_no_probe_opens(tokenizer, server_url, case):
    """A right answer, a row outside training, probe_prob 0, or an answer only in the forced
    turn (the policy never acts before it): one output, scored."""
    kwargs = {"correct": {"truth": ("Marlowe",)}, "dev split": {"split": "dev"},
              "never probed": {"probe_prob": 0.0},
              "forced answer": {"rules": {"Who wrote Hamlet?<|im_end|>": "I am not sure."},
                                "max_turns": 1}}[case]
    (output,) = rex_episode(tokenizer, server_url, **kwargs)
    assert output.extra_fields["rex_probe"] is None
    assert output.reward_score == (1.0 if case == "correct" else
                                   -0.2 if case == "forced answer" else 0.0)


def test_the_response_budget_cuts_the_inserted_prompt(tokenizer, server_url):
    """A probe whose prompt reaches the budget records the tokens it got, fewer than the
    prompt's (the trainer leaves such a probe out of the filter's ranking)."""
    policy = rex_episode(tokenizer, server_url, probe_prob=0.0)[0]
    budget = len(policy.response_ids) + 2
    _, probe = rex_episode(tokenizer, server_url, response_length=budget)
    assert len(probe.response_ids) == budget
    assert 0 < probe.extra_fields["rex_probe"]["tokens"] < len(tokenizer.encode(
        probe_observation(exploration_pool(1)[0]), add_special_tokens=False))


def test_verl_builds_each_loop_of_the_launchers_file_as_its_workers_do(
        tokenizer, server_url, tmp_path, small_world_dir):
    """The agent loop file `--engine verl` writes for configs/rex-rag.yaml, read and
    instantiated as verl's agent loop worker does (OmegaConf, hydra, its keyword arguments):
    each loop builds, and REX-RAG's plays an episode and opens its probe."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import ToolListWrap

    from advrag.engines.verl.launch import agent_loop_file
    from advrag.recipes import recipe_for

    rex = recipe_for(Path(__file__).resolve().parents[2] / "configs" / "rex-rag.yaml", {
        "world_dir": str(small_world_dir), "max_turns": 2,
        "exploration": {"kind": "rex", "probe_prob": 1.0, "pool_size": 1}})
    [run] = rex.verl_runs()
    path = agent_loop_file(tmp_path / "agent_loops.yaml", rex.config, server_url, run.search_loop)
    servers = StandInServers(tokenizer, PROBE_RULES)

    async def run():
        loops = {entry.name: hydra.utils.instantiate(
            config=entry, trainer_config=DictConfigWrap(OmegaConf.create(
                {"actor_rollout_ref": {"rollout": {"prompt_length": 1024,
                                                   "response_length": 2048}}})),
            server_manager=servers, tokenizer=tokenizer, processor=None, hf_model_type="llama",
            dataset_cls=None, data_config=DictConfigWrap(OmegaConf.create({})),
            tools=ToolListWrap([])) for entry in OmegaConf.load(path)}
        assert sorted(loops) == ["advrag_direct", "advrag_rex_rag", "advrag_search_r1"]
        return await loops["advrag_rex_rag"].run(
            {"temperature": 1.0}, uid="u1", session_id=0,
            raw_prompt=[{"role": "user", "content": "Who wrote Hamlet?"}],
            reward_model={"ground_truth": {"target": ["William Shakespeare"]}},
            extra_info={"split": "train"})

    policy, probe = asyncio.run(run())
    assert (policy.reward_score, probe.reward_score) == (0.0, 1.0)


@pytest.mark.parametrize("cut", [0, 3, 6])
def test_the_loops_score_is_the_responses_even_when_the_budget_cuts_a_turn(
        tokenizer, server_url, cut):
    """REX-RAG's loop scores the episode it recorded; verl's reward function scores the
    response's text: they agree, also when the budget cuts the answer turn (``cut`` tokens
    short of it: an unclosed answer, a format error)."""
    whole = rex_episode(tokenizer, server_url, probe_prob=0.0)[0]
    (output,) = rex_episode(tokenizer, server_url, probe_prob=0.0,
                            response_length=len(whole.response_ids) - cut)
    text = tokenizer.decode(output.response_ids)
    assert output.reward_score == search_r1_score("advrag", text, ["William Shakespeare"])["score"]
    assert output.reward_score == (0.0 if cut == 0 else -0.2)
