"""Token budgets against the episodes they must hold (DESIGN §2: nothing is cut silently).

An episode's tokens are bounded before anything runs: the longest prompt, every generation
at its full ``max_new_tokens``, every search's ``<information>`` block at its longest (the
``topk`` longest passages of the corpus) and the hints the environment adds. A budget below
that bound could cut an episode, so a config carrying one is refused with the arithmetic and
the setting to raise (``refusal``). Generation budgets cut at run time (a turn that reached
``max_new_tokens`` without a stop) are counted per episode (``Trajectory.cut_turns``).

``count`` is any ``text → tokens`` function (the policy's tokenizer, without special
tokens: segments are tokenised on their own, as ``engines.local.tokenize`` encodes them).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from advrag.agents.prompts import FORCE_ANSWER_HINT, INVALID_ACTION_HINT, information_block
from advrag.common.types import Passage, format_docs

Count = Callable[[str], int]
CANDIDATES_PER_HIT = 32


@dataclass(frozen=True)
class EpisodeShape:
    """How many generations and searches one episode has at most, and what else it holds.

    Attributes:
        generations: model generations of ``max_new_tokens`` each (every agent's, all turns).
        searches: ``<information>`` blocks, each at most the ``topk`` longest passages.
        extra_env: environment texts an episode may add once (hints, an exploration prompt).
    """

    generations: int
    searches: int
    extra_env: tuple[str, ...] = ()


def search_agent_shape(max_turns: int, extra_env: Sequence[str] = ()) -> EpisodeShape:
    """The Search-R1 loop's episode: ``max_turns`` turns, each a search, then a forced answer
    (``agents.search_loop``): ``max_turns + 1`` generations, ``max_turns`` searches."""
    return EpisodeShape(max_turns + 1, max_turns, (FORCE_ANSWER_HINT, *extra_env))


@dataclass(frozen=True)
class EpisodeBound:
    """The most tokens one episode can take, term by term (all in tokens)."""

    prompt: int
    generations: int
    max_new_tokens: int
    searches: int
    information: int
    extra: int

    @property
    def tokens(self) -> int:
        """The bound itself."""
        return (self.prompt + self.generations * self.max_new_tokens
                + self.searches * self.information + self.extra)

    def arithmetic(self) -> str:
        """How the bound adds up, for an error message or a docs table."""
        return (f"prompt {self.prompt} + {self.generations} generations × {self.max_new_tokens} "
                f"+ {self.searches} searches × {self.information} + hints {self.extra} "
                f"= {self.tokens} tokens")


def longest_information(count: Count, passages: Iterable[Passage], topk: int) -> int:
    """Tokens of the longest ``<information>`` block a search can return: the ``topk``
    longest passages, or the invalid-action hint a turn without an action gets instead.

    Only the ``CANDIDATES_PER_HIT × topk`` longest passages in characters are tokenised (a
    corpus may hold millions): tokens follow characters closely enough that the longest in
    tokens is among them."""
    by_chars = heapq.nlargest(CANDIDATES_PER_HIT * topk, passages, key=lambda p: len(p.contents))
    longest = sorted(by_chars, key=lambda p: count(p.contents), reverse=True)[:topk]
    if not longest:
        raise ValueError("no passages to bound a search by: the corpus is empty")
    return max(count(information_block(format_docs(longest))), count(INVALID_ACTION_HINT))


def episode_bound(count: Count, prompts: Iterable[str], information: int, shape: EpisodeShape,
                  max_new_tokens: int) -> EpisodeBound:
    """The bound of an episode of ``shape`` whose prompt is the longest of ``prompts``
    (rendered as the policy sees them) and whose searches each return ``information`` tokens."""
    prompt = max((count(p) for p in prompts), default=0)
    if not prompt:
        raise ValueError("no prompts to bound an episode by: the questions are empty")
    return EpisodeBound(prompt, shape.generations, max_new_tokens, shape.searches, information,
                        sum(count(text) for text in shape.extra_env))


@dataclass(frozen=True)
class Budget:
    """One token budget of a config and the episodes it must hold.

    Attributes:
        setting: where the budget is set (``optim.max_seq_len``), as the fix names it.
        tokens: its value.
        what: what it holds, for the message ("an RL episode").
        shape: the episode it must hold.
        max_new_tokens: that episode's generation budget.
    """

    setting: str
    tokens: int
    what: str
    shape: EpisodeShape
    max_new_tokens: int


def refusal(budget: Budget, bound: EpisodeBound) -> str | None:
    """Why ``budget`` cannot hold an episode of ``bound`` (the figure and the fix), or None."""
    if budget.tokens >= bound.tokens:
        return None
    return (f"{budget.setting} = {budget.tokens} cannot hold {budget.what} of "
            f"{budget.shape.searches} searches: {bound.arithmetic()}; raise {budget.setting} "
            f"to at least {bound.tokens} (or lower max_turns, max_new_tokens or topk)")
