"""Test doubles for one UR² update without a model: a per-question scripted policy, a
scripted summariser model, and ``dry_step`` (the recipe's own step, with grpo's rollout and
scoring but no weight update)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fakes import ScriptedGenerator

from advrag.agents.types import Trajectory
from advrag.recipes.rollout import rollout, rollout_metrics, score
from advrag.recipes.ur2 import UR2Config, UR2Recipe
from advrag.retrieval.summary import SUMMARY_FALLBACK_MESSAGE, make_summariser


class QuestionScript:
    """A policy that, per question, searches ``query`` once where its prompt offers search and
    then answers ``answer``; where the prompt offers no search it answers at once.

    ``script``: question → (query, answer). Records every user message it was shown.
    """

    def __init__(self, script: Mapping[str, tuple[str, str]]):
        self.script = dict(script)
        self.users: list[str] = []

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        self.users.append(user)
        return f"<|user|>{user}\n<|assistant|>"

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        return [self._continue(p) for p in prompts]

    def _continue(self, prompt: str) -> str:
        user, _, transcript = prompt.partition("<|assistant|>")
        query, answer = next(v for q, v in self.script.items() if q in user)
        if "<search>" not in user or "</information>" in transcript:
            return f"<think> done </think><answer> {answer} </answer>"
        return f"<think> I need one fact. </think><search> {query} </search>"


def summariser_model(reasoning_queries: Sequence[str]) -> ScriptedGenerator:
    """A summariser model that answers UR²'s fallback message for ``reasoning_queries`` and a
    labelled summary for any other query."""
    rules = {f"Query: {q}\n": SUMMARY_FALLBACK_MESSAGE for q in reasoning_queries}
    return ScriptedGenerator(rules, default="**Final Information**\nThe fact asked for.")


@dataclass
class _Trainer:
    step: int = 0


@dataclass
class DryStep:
    """What one update computed: its metrics, trajectories and rewards (aligned)."""

    metrics: dict[str, float]
    trajectories: list[Trajectory] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)


def ur2_recipe(config: UR2Config, policy: QuestionScript, *, tmp_path: Path,
               reasoning_queries: Sequence[str] = (), step: int = 0) -> UR2Recipe:
    """The recipe as ``build`` leaves it, with ``policy`` for the model and, when the config
    summarises, a summariser made from its ``summary`` section on a scripted model."""
    recipe = UR2Recipe(config)
    recipe.generators = {"reasoner": policy}
    recipe.trainers = {"reasoner": _Trainer(step)}
    summary = config.summary.model_copy(update={"cache_dir": tmp_path / "summaries"})
    recipe.summariser = make_summariser(
        summary, load_model=lambda spec: summariser_model(reasoning_queries))
    return recipe


def dry_step(recipe: UR2Recipe, retriever, records) -> DryStep:
    """``recipe.step`` on ``records`` with grpo's rollout and scoring and no weight update."""
    out = DryStep(metrics={})

    def update(retriever, records, reward, *, agent=None, settings=None):
        trajectories, repeated = rollout(records, recipe.generators["reasoner"], retriever,
                                         group_size=recipe.config.group_size, agent=agent)
        scores = score(trajectories, repeated, reward)
        out.trajectories, out.rewards = trajectories, scores.tolist()
        return rollout_metrics(trajectories, scores, [r.id for r in repeated])

    recipe.update = update
    out.metrics = recipe.step(retriever, records)
    return out
