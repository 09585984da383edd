"""REX-RAG's probes (REX-RAG §3.2): a failed trajectory reopened with an exploration prompt.

When a policy trajectory answers during the search loop and the answer scores below full
marks, the ``Prober`` clones it with probability ``probe_prob``: the clone loses its answer
(the ``<answer>`` action and whatever followed it in that turn), gets one prompt of the pool
as a ``"probe"`` segment, and goes on with the turns the original had left (search allowed),
or with ``probe_turns`` turns of its own where the prober has them (beyond the paper).
The original keeps its answer. At most one probe per policy trajectory, none from a probe;
the loop never probes the forced last turn, and evaluation never passes a prober.

Probes are appended after the policy trajectories, in the order they were opened;
``Trajectory.probe`` records the original's index, the probe segment and the prompt.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence

from advrag.agents.prompts import probe_observation
from advrag.agents.protocol import parse_step
from advrag.agents.types import ProbeOrigin, Trajectory

BelowFullMarks = Callable[[int, str], bool]
"""``(item index in the rollout batch, answer) → whether the answer scores below full marks``."""


class Prober:
    """Decides which answered trajectories to probe and opens the probes.

    ``pool``: the exploration prompts (``prompts.exploration_pool``); ``below_full_marks``:
    the rollout's judge of an answer; ``rng``: the draw of the trigger and of the prompt;
    ``probe_turns``: the turns a probe gets (None: the turns its origin left).
    """

    def __init__(self, pool: Sequence[str], probe_prob: float, below_full_marks: BelowFullMarks,
                 rng: random.Random, probe_turns: int | None = None):
        if not pool:
            raise ValueError("the exploration pool is empty: a probe needs a prompt to insert")
        if not 0.0 <= probe_prob <= 1.0:
            raise ValueError(f"probe_prob = {probe_prob!r} is not a probability in [0, 1]")
        if probe_turns is not None and probe_turns < 1:
            raise ValueError(f"probe_turns = {probe_turns!r}: give a probe at least one turn, "
                             "or None for the turns its origin left")
        self.pool = list(pool)
        self.probe_prob = probe_prob
        self.probe_turns = probe_turns
        self.below_full_marks = below_full_marks
        self.rng = rng

    def restricted(self, items: Sequence[int]) -> Prober:
        """The same prober for a sub-batch whose item ``i`` is item ``items[i]`` here."""
        items = list(items)
        return Prober(self.pool, self.probe_prob,
                      lambda i, answer: self.below_full_marks(items[i], answer), self.rng,
                      self.probe_turns)

    def turns_for(self, origin_turns_left: int) -> int:
        """The turns a probe gets when its origin had ``origin_turns_left`` left."""
        return origin_turns_left if self.probe_turns is None else self.probe_turns

    def probe_answers(self, trajs: list[Trajectory], answered: Sequence[int]) -> list[int]:
        """Open probes from the policy trajectories in ``answered`` (they answered this turn);
        append them to ``trajs`` and return their indices."""
        opened = []
        for i in answered:
            prompt = self.draw(i, trajs[i])
            if prompt is not None:
                trajs.append(open_probe(trajs[i], origin=i, prompt_index=prompt,
                                        prompt=self.pool[prompt]))
                opened.append(len(trajs) - 1)
        return opened

    def draw(self, item: int, traj: Trajectory) -> int | None:
        """The pool prompt to probe item ``item``'s answered trajectory with, or None: never a
        probe or an unanswered one, never a full-marks answer, else with ``probe_prob``."""
        if traj.probe is not None or traj.answer is None:
            return None
        if not self.below_full_marks(item, traj.answer) or self.rng.random() >= self.probe_prob:
            return None
        return self.rng.randrange(len(self.pool))


def open_probe(traj: Trajectory, *, origin: int, prompt_index: int, prompt: str) -> Trajectory:
    """A clone of ``traj`` without its answer, ending in the exploration prompt (``"probe"``)."""
    probe = copy.deepcopy(traj)
    last = probe.segments[-1]
    if last.source != "policy":
        raise ValueError("a probe is opened right after the policy's answer turn")
    kept = without_answer(last.text)
    if kept:
        last.text = kept
    else:
        probe.segments.pop()
    probe.answer = None
    probe.add(probe_observation(prompt), "probe")
    probe.probe = ProbeOrigin(origin=origin, segment=len(probe.segments) - 1, prompt=prompt_index)
    return probe


def pool_token_ids(pool: Sequence[str], tokenizer) -> list[list[int]]:
    """Each pool prompt's tokens as a probe inserts it (``probe_observation``, tokenised alone):
    what the policy correction's pool distribution is over."""
    return [tokenizer(probe_observation(p), add_special_tokens=False)["input_ids"] for p in pool]


def without_answer(output: str) -> str:
    """One turn's model output up to its ``<answer>`` action (the answer and what followed
    it removed); unchanged when the turn has no closed answer."""
    answers = [tag for tag in parse_step(output, ("search", "answer")).tags
               if tag.name == "answer" and tag.closed]
    if not answers:
        return output
    return output[:min(answers, key=lambda tag: tag.end).start].rstrip()
