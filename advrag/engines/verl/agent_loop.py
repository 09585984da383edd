"""advrag's Search-R1 agent as a verl agent loop: the policy on verl's rollout servers, the
search on advrag's retrieval server.

verl runs one agent loop per prompt (``actor_rollout_ref.rollout.agent``). This one plays
``agents.search_loop``'s protocol at the token level: each turn the policy generates until
``</search>`` or ``</answer>``; a search is sent to the retrieval server (``POST
/retrieve``, the batching server many rollout workers share) and its documents come back
as an ``<information>`` block (from a server started with ``--summarise``: UR²'s summary,
or its fallback message followed by the fallback hint, as the local loop shows them); a turn without a usable action gets the invalid-action hint;
after ``max_turns`` turns without an answer, the forced-answer hint and one last turn. The
environment's text (documents, hints) is tokenised and appended with response mask 0, so
the update trains on the policy's tokens only; the response's text is what
``rewards.search_r1_score`` and ``rewards.ur2_score`` read back.

Select it with an agent loop config file (``agent.agent_loop_config_path``) such as::

    - name: advrag_search_r1
      _target_: advrag.engines.verl.agent_loop.SearchR1AgentLoop
      retriever_url: http://10.0.1.5:8000
      max_turns: 4
      topk: 3

and ``agent_name: advrag_search_r1`` in the data. Every turn's tokens count against
verl's ``rollout.response_length``; a loop that reaches it stops there. A row naming
``advrag_direct`` (``DirectAnswerAgentLoop``) is answered without search: UR²'s task mixing.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from advrag.agents.prompts import (
    FALLBACK_HINT,
    FORCE_ANSWER_HINT,
    INVALID_ACTION_HINT,
    information_block,
)
from advrag.agents.protocol import parse_step
from advrag.agents.search_loop import ACTIONS, STOP
from advrag.common.bearer import auth_headers
from advrag.common.types import Passage, format_docs
from advrag.engines.verl.launch import AGENT_NAME, DIRECT_AGENT_NAME


class RetrievalClient:
    """``POST /retrieve`` on advrag's retrieval server, from an event loop."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        base = url.rstrip("/")
        self.url = base if base.endswith("/retrieve") else f"{base}/retrieve"
        self.timeout_s = timeout_s

    async def information(self, query: str, topk: int) -> tuple[str, bool]:
        """The ``<information>`` body for ``query`` as the local loop writes it, and whether it
        is UR²'s fallback: the documents, or, from a server started with ``--summarise``, the
        summary or the fallback message (the raw documents when summarising failed)."""
        passages, kinds = await self.search(query, topk)
        kind = kinds[0] if kinds else "raw"
        if kind == "raw":
            return format_docs(passages), False
        return passages[0].contents.removeprefix("Summary\n"), kind == "fallback"

    async def search(self, query: str, topk: int) -> tuple[list[Passage], list[str]]:
        """The top-``topk`` passages for ``query`` and the server's summary kinds (empty when
        it does not summarise); a clear error when the server fails."""
        import httpx

        async with httpx.AsyncClient(timeout=self.timeout_s, headers=auth_headers()) as http:
            try:
                response = await http.post(self.url, json={"queries": [query], "topk": topk,
                                                           "return_scores": True})
            except httpx.TransportError as error:
                raise RuntimeError(f"retrieval server at {self.url} is unreachable "
                                   f"({type(error).__name__}): start one with `advrag "
                                   "serve-retriever`, or fix retriever_url") from error
        if response.status_code != 200:
            raise RuntimeError(f"{self.url} answered HTTP {response.status_code}: "
                               f"{response.text[:300]}")
        body = response.json()
        return ([Passage(hit["document"]["id"], hit["document"]["contents"], hit["score"])
                 for hit in body["result"][0]], body.get("summaries", []))


@register(AGENT_NAME)
class SearchR1AgentLoop(AgentLoopBase):
    """The Search-R1 protocol of ``agents.search_loop`` over verl's servers (module docstring)."""

    def __init__(self, *args: Any, retriever_url: str = "http://127.0.0.1:8000",
                 max_turns: int = 4, topk: int = 3, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if max_turns < 1 or topk < 1:
            raise ValueError(f"max_turns and topk must be >= 1, got {max_turns} and {topk}")
        self.retriever = RetrievalClient(retriever_url)
        self.max_turns, self.topk = max_turns, topk
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """One episode for ``kwargs["raw_prompt"]`` (chat messages)."""
        prompt_ids = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
        episode = _Episode(self.response_length)
        turns = 0
        while turns <= self.max_turns and not episode.full:
            stop = list(STOP)
            if turns == self.max_turns:
                episode.add(self._tokens(FORCE_ANSWER_HINT), policy=False)
                stop = ["</answer>"]
            output = await self.server_manager.generate(
                request_id=uuid4().hex, prompt_ids=prompt_ids + episode.ids,
                sampling_params={**sampling_params, "stop": stop,
                                 "include_stop_str_in_output": True})
            text = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
            episode.add(list(output.token_ids), policy=True)
            turns += 1
            if turns > self.max_turns:
                break
            step = parse_step(text, ACTIONS)
            if step.kind == "answer":
                break
            if step.kind == "search":
                body, fell_back = await self.retriever.information(step.content, self.topk)
                episode.add(self._tokens(information_block(body)), policy=False)
                if fell_back:  # UR² App. C.4, as the local loop shows it
                    episode.add(self._tokens(FALLBACK_HINT), policy=False)
                episode.searches += 1
            else:
                episode.add(self._tokens(INVALID_ACTION_HINT), policy=False)
        return AgentLoopOutput(prompt_ids=prompt_ids, response_ids=episode.ids,
                               response_mask=episode.mask, num_turns=2 * turns,
                               metrics={}, extra_fields={"searches": episode.searches})

    def _tokens(self, text: str) -> list[int]:
        """The environment's ``text`` as tokens appended to the context."""
        return self.tokenizer.encode(text, add_special_tokens=False)


@register(DIRECT_AGENT_NAME)
class DirectAnswerAgentLoop(AgentLoopBase):
    """UR²'s task mixing (§3.1.2) in verl: an item whose row names this loop (its prompt the
    direct-reasoning one) is answered in one generation, with no search served, as
    ``agents.baselines.answer_direct`` answers it locally; every response token is the
    policy's. ``rewards.ur2_score`` reads ``extra_info.retrieval_expected: false`` for it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """One answer for ``kwargs["raw_prompt"]`` (chat messages)."""
        prompt_ids = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
        output = await self.server_manager.generate(
            request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params=sampling_params)
        response = list(output.token_ids)[:self.response_length]
        return AgentLoopOutput(prompt_ids=prompt_ids, response_ids=response,
                               response_mask=[1] * len(response), num_turns=2, metrics={},
                               extra_fields={"searches": 0})


class _Episode:
    """The response so far: token ids and their mask, cut at ``limit`` tokens."""

    def __init__(self, limit: int) -> None:
        self.limit, self.ids, self.mask, self.searches = limit, [], [], 0

    @property
    def full(self) -> bool:
        return len(self.ids) >= self.limit

    def add(self, tokens: list[int], *, policy: bool) -> None:
        room = self.limit - len(self.ids)
        self.ids += tokens[:room]
        self.mask += [int(policy)] * len(tokens[:room])
