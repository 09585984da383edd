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
``advrag_direct`` (``DirectAnswerAgentLoop``) is answered without search: UR²'s task mixing;
one naming ``advrag_rex_rag`` (``RexSearchAgentLoop``) may be probed: REX-RAG.
"""

from __future__ import annotations

import random
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from advrag.agents.baselines import extract_answer
from advrag.agents.probes import open_probe, pool_token_ids, without_answer
from advrag.agents.prompts import (
    FALLBACK_HINT,
    FORCE_ANSWER_HINT,
    INVALID_ACTION_HINT,
    exploration_pool,
    information_block,
)
from advrag.agents.protocol import parse_step
from advrag.agents.search_loop import ACTIONS, STOP
from advrag.agents.types import Source, Trajectory
from advrag.common.bearer import auth_headers
from advrag.common.types import Passage, format_docs
from advrag.common.wire import hits_of, retrieve_request, retrieve_url
from advrag.core.rewards import full_marks
from advrag.engines.verl.launch import AGENT_NAME, DIRECT_AGENT_NAME
from advrag.engines.verl.rewards import TRAJECTORY_TERMS, golden_answers
from advrag.engines.verl.runs import REX_AGENT_NAME


class RetrievalClient:
    """``POST /retrieve`` on advrag's retrieval server, from an event loop."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        self.url, self.timeout_s = retrieve_url(url), timeout_s

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

        headers = auth_headers(self.url)
        async with httpx.AsyncClient(timeout=self.timeout_s, headers=headers) as http:
            try:
                response = await http.post(self.url, json=retrieve_request([query], topk))
            except httpx.TransportError as error:
                raise RuntimeError(f"retrieval server at {self.url} is unreachable "
                                   f"({type(error).__name__}): start one with `advrag "
                                   "serve-retriever`, or fix retriever_url") from error
        if response.status_code != 200:
            raise RuntimeError(f"{self.url} answered HTTP {response.status_code}: "
                               f"{response.text[:300]}")
        body = response.json()
        return hits_of(body, 1, self.url)[0], body.get("summaries", [])


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
        await self._play(episode, prompt_ids, sampling_params)
        return _output(prompt_ids, episode)

    async def _play(self, episode: _Episode, prompt_ids: list[int],
                    sampling_params: dict[str, Any]) -> int | None:
        """Turns until an answer, the forced answer or the response budget. Returns where the
        answering turn's tokens start when the policy answered in one of ``max_turns`` turns
        (not the forced one), else None."""
        trajectory = episode.trajectory
        while episode.turns <= self.max_turns and not episode.full:
            forced = episode.turns == self.max_turns
            if forced:
                episode.add(self._tokens(FORCE_ANSWER_HINT), FORCE_ANSWER_HINT, "env")
            output = await self.server_manager.generate(
                request_id=uuid4().hex, prompt_ids=prompt_ids + episode.ids,
                sampling_params={**sampling_params,
                                 "stop": ["</answer>"] if forced else list(STOP),
                                 "include_stop_str_in_output": True})
            kept = list(output.token_ids)[:episode.room]  # what the response holds of the turn
            text = self.tokenizer.decode(kept, skip_special_tokens=True)
            turn_start = len(episode.ids)
            episode.add(kept, text, "policy")
            episode.turns += 1
            trajectory.n_turns += 1
            if forced:  # read leniently, as the local loop reads its forced answer
                trajectory.answer = extract_answer(text)
                trajectory.format_errors += int(trajectory.answer is None)
                return None
            step = parse_step(text, ACTIONS)
            trajectory.format_errors += int(step.error is not None)
            if step.kind == "answer":
                trajectory.answer = step.content
                return turn_start
            if step.kind == "search":
                body, fell_back = await self.retriever.information(step.content, self.topk)
                episode.add(self._tokens(information_block(body)), information_block(body),
                            "env")
                trajectory.n_searches += 1
                trajectory.queries.append(step.content)
                trajectory.fallbacks += int(fell_back)
                if fell_back:  # UR² App. C.4, as the local loop shows it
                    episode.add(self._tokens(FALLBACK_HINT), FALLBACK_HINT, "env")
            else:
                episode.add(self._tokens(INVALID_ACTION_HINT), INVALID_ACTION_HINT, "env")
        return None

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


@register(REX_AGENT_NAME)
class RexSearchAgentLoop(SearchR1AgentLoop):
    """REX-RAG's probes (§3.2) in the Search-R1 loop, opened as ``agents.probes`` opens them
    locally: a training episode whose answer, given in one of ``max_turns`` turns, scores below
    full marks under the reward's metric is cloned, with probability ``probe_prob``, without
    its answer; a prompt drawn from the exploration pool is inserted (in the mask: learned
    from, as locally) and the policy goes on for the turns the original had left. The loop
    returns the episode and its probe as two outputs of one session: verl's V1 trainer keeps
    each as a row of the prompt's group (key ``{uid}_{session}_{i}``). Rows of other splits
    (``extra_info.split``) are never probed.

    Each output is scored here, by the run's reward function (``reward``, ``reward_kwargs``)
    on the episode as recorded (``rewards.TRAJECTORY_TERMS``). verl copies the last output's
    ``reward_score`` onto the others, so each also carries its own in
    ``extra_fields["advrag_score"]``, whether it earned full marks (``advrag_correct``) and,
    on a probe, its prompt and where its tokens lie (``rex_probe``: ``prompt``, ``start``,
    ``tokens``), which ``rex_trainer`` reads back. The probe's kept tokens are the sampled
    ones up to the removed answer (``tokens_before``)."""

    def __init__(self, *args: Any, probe_prob: float = 0.2, pool_size: int = 30,
                 reward: str = "search_r1_score", reward_kwargs: dict | None = None,
                 seed: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if reward not in TRAJECTORY_TERMS:
            raise ValueError(f"reward {reward!r}: choose one of {sorted(TRAJECTORY_TERMS)}")
        if not 0.0 <= probe_prob <= 1.0:
            raise ValueError(f"probe_prob = {probe_prob!r} is not a probability in [0, 1]")
        self.probe_prob, self.seed = probe_prob, seed
        self.pool = exploration_pool(pool_size)
        self.pool_ids = pool_token_ids(self.pool, self.tokenizer)
        self.terms, self.reward_kwargs = TRAJECTORY_TERMS[reward], dict(reward_kwargs or {})

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        """The episode for ``kwargs["raw_prompt"]``, then its probe when one opens."""
        prompt_ids = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
        truth = kwargs["reward_model"]["ground_truth"]
        extra_info = dict(kwargs.get("extra_info") or {})
        episode = _Episode(self.response_length)
        answer_turn = await self._play(episode, prompt_ids, sampling_params)
        episodes: list[tuple[_Episode, dict | None]] = [(episode, None)]
        if (answer_turn is not None and extra_info.get("split") == "train"
                and not self._full_marks(episode, truth)):
            rng = random.Random(f"rex:{self.seed}:{kwargs.get('uid')}:{kwargs.get('session_id')}")
            if rng.random() < self.probe_prob:
                probe, where = self._open_probe(episode, answer_turn, rng.randrange(len(self.pool)))
                await self._play(probe, prompt_ids, sampling_params)
                episodes.append((probe, where))
        return [self._scored(prompt_ids, e, where, truth, extra_info) for e, where in episodes]

    def _full_marks(self, episode: _Episode, truth: Any) -> bool:
        """The answer scores 1 under the reward's metric (correct: never probed)."""
        return full_marks(episode.trajectory.answer, golden_answers(truth),
                          self.reward_kwargs.get("metric", "em"))

    def _open_probe(self, episode: _Episode, answer_turn: int,
                    prompt: int) -> tuple[_Episode, dict[str, int]]:
        """``episode`` cut before its answer, pool prompt ``prompt`` inserted."""
        probe = _Episode(self.response_length)
        answer_text = episode.trajectory.segments[-1].text
        probe.trajectory = open_probe(episode.trajectory, origin=0, prompt_index=prompt,
                                      prompt=self.pool[prompt])
        kept = tokens_before(episode.ids[answer_turn:], without_answer(answer_text),
                             self.tokenizer)
        probe.ids = episode.ids[:answer_turn] + kept
        probe.mask = episode.mask[:answer_turn] + [1] * len(kept)
        probe.turns = episode.turns
        start = len(probe.ids)
        inserted = self.pool_ids[prompt][:probe.room]
        probe.ids, probe.mask = probe.ids + inserted, probe.mask + [1] * len(inserted)
        return probe, {"prompt": prompt, "start": start, "tokens": len(inserted)}

    def _scored(self, prompt_ids: list[int], episode: _Episode, where: dict | None, truth: Any,
                extra_info: dict) -> AgentLoopOutput:
        """verl's record of ``episode`` with its reward and what the trainer reads back."""
        terms = self.terms(episode.trajectory, truth, extra_info, **self.reward_kwargs)
        return _output(prompt_ids, episode, reward_score=terms["score"],
                       reward_extra_info=terms, advrag_score=terms["score"],
                       advrag_correct=self._full_marks(episode, truth), rex_probe=where)


class _Episode:
    """The response so far: token ids and their mask, cut at ``limit`` tokens, and the same
    episode as the local loop records it (``trajectory``: text segments, turns, searches,
    the answer and format errors), from which it is scored."""

    def __init__(self, limit: int) -> None:
        self.limit, self.ids, self.mask, self.turns = limit, [], [], 0
        self.trajectory = Trajectory()

    @property
    def room(self) -> int:
        """Tokens the response budget has left."""
        return max(self.limit - len(self.ids), 0)

    @property
    def full(self) -> bool:
        return self.room == 0

    def add(self, tokens: list[int], text: str, source: Source) -> None:
        """Append ``tokens`` (``text``, from ``source``), cut at the budget; the policy's and a
        probe's inserted prompt's in the mask (``core.masks``: what the update learns from)."""
        kept = tokens[:self.room]
        self.ids += kept
        self.mask += [int(source in ("policy", "probe"))] * len(kept)
        self.trajectory.add(text, source)


def _output(prompt_ids: list[int], episode: _Episode, reward_score: float | None = None,
            **extra_fields: Any) -> AgentLoopOutput:
    """verl's record of ``episode``; ``extra_fields`` join its searches."""
    return AgentLoopOutput(prompt_ids=prompt_ids, response_ids=episode.ids,
                           response_mask=episode.mask, num_turns=2 * episode.turns, metrics={},
                           reward_score=reward_score,
                           extra_fields={"searches": episode.trajectory.n_searches,
                                         **extra_fields})


def tokens_before(ids: list[int], text: str, tokenizer: Any) -> list[int]:
    """The longest start of ``ids`` whose decoded text ``text`` starts with: a turn's tokens cut
    where the text was cut (a token across the cut goes with what was removed)."""
    end = len(ids)
    while end and not text.startswith(tokenizer.decode(ids[:end], skip_special_tokens=True)):
        end -= 1
    return ids[:end]
