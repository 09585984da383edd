"""One Search-R1-style agent trained with GRPO (or REINFORCE++, Dr.GRPO): the recipe class the
``grpo`` and ``ur2`` recipes extend (each gives it a name, a config and its verl runs).

Each update samples ``group_size`` trajectories per question (retrieved
tokens masked), rewards each with the F1 or EM of its final ``<answer>`` minus a
format penalty (``core.rewards.answer_reward``), turns the rewards into token
advantages with the estimator ``optim.advantage`` names
(``core.advantages.ADVANTAGE_ESTIMATORS``) and takes a PPO-clip step. The
warm-up trains on grounded Search-R1 demonstrations (``curation.demonstrations``).

With ``exploration: {kind: rex}`` the update is REX-RAG's (``recipes.rex_rag.step``):
probes reopen answers below full marks, a filter keeps the likeliest, and the ratio is
corrected for their off-policy tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from advrag.agents.budgets import EpisodeShape
from advrag.agents.types import Trajectory
from advrag.common.types import Retriever
from advrag.core.rewards import answer_reward
from advrag.core.rewards import full_marks as earns_full_marks
from advrag.datasets.records import QARecord
from advrag.recipes.base import Recipe, trainable_policy
from advrag.recipes.rex_rag.exploring import Exploring, probing_shape
from advrag.recipes.rollout import RolloutSettings, search_demonstrations
from advrag.recipes.search_agent.config import SearchAgentConfig


class SearchAgentRecipe(Exploring, Recipe):
    """Single-agent GRPO on the search loop; a recipe names it and describes its verl runs."""

    agents: ClassVar[tuple[str, ...]] = ("reasoner",)
    config: SearchAgentConfig
    verl_refusal = None

    def demonstrations(self, records: Sequence[QARecord], retriever: Retriever,
                       chat_prompt) -> list[Trajectory]:
        """Grounded think → search → … → answer trajectories from the world's hop chains."""
        return search_demonstrations(self.config, records, retriever, chat_prompt)

    def episode_shape(self, max_turns: int) -> EpisodeShape:
        """The Search-R1 episode, made longer by REX-RAG's probes (``probing_shape``)."""
        return probing_shape(super().episode_shape(max_turns), self.config.exploration)

    def build(self, start_model: str) -> None:
        """The policy (LoRA or full), its trainer and the rollout generator.

        The generator (``rollout_backend``) samples the policy's current weights in
        the dtype they are trained in (bf16 on native-bf16 CPUs when ``cpu_bf16``;
        then from a bf16 copy pushed after every update).
        """
        from advrag.engines.generators import make_generator
        from advrag.engines.local.dual import AgentTrainers
        from advrag.engines.local.trainer import LocalTrainer, seed_everything
        from advrag.models.loading import resolve_model_dir

        c = self.config
        seed_everything(c.optim.seed)  # adapter initialisation draws random numbers
        policy, tokenizer = trainable_policy(start_model, c, keep_reference=c.optim.kl_coef > 0,
                                             sequences=self.trained_sequences())
        self.trainers = AgentTrainers({"reasoner": LocalTrainer(policy, tokenizer, c.optim)})
        self.generators = {"reasoner": make_generator(
            c.rollout_backend, policy.model, tokenizer, resolve_model_dir(start_model),
            temperature=c.temperature, batch_size=64, autocast=policy.autocast,
            seed=c.optim.seed,
            **self.engine_options())}

    def step(self, retriever: Retriever, records: Sequence[QARecord]) -> dict[str, float]:
        """One GRPO update: rollout → score → advantages → loss → step."""
        c = self.config

        def reward(trajectory, record: QARecord) -> float:
            return answer_reward(trajectory.answer, record.golden_answers,
                                 format_errors=trajectory.format_errors,
                                 metric=c.reward_metric, format_penalty=c.format_penalty)

        return self.update(retriever, records, reward, settings=RolloutSettings.of(c))

    def update(self, retriever: Retriever, records: Sequence[QARecord],
               reward: Callable[[Trajectory, QARecord], float], *,
               settings: RolloutSettings = RolloutSettings(), agent: Callable | None = None
               ) -> dict[str, float]:
        """The reasoner's update: ``grpo_step``, or REX-RAG's ``rex_step`` with ``exploration``.

        ``agent(records, prober=None)`` replaces the Search-R1 loop.
        """
        from advrag.recipes.rex_rag.step import rex_step
        from advrag.recipes.search_agent.step import grpo_step

        c = self.config
        trainer, generator = self.trainers["reasoner"], self.generators["reasoner"]
        if c.exploration is None:
            return grpo_step(trainer, generator, retriever, records, group_size=c.group_size,
                             reward_fn=reward, settings=settings, agent=agent)
        probing = None if agent is None else (lambda recs, prober: agent(recs, prober=prober))
        return rex_step(trainer, generator, retriever, records, group_size=c.group_size,
                        reward_fn=reward, full_marks=self.full_marks, exploration=c.exploration,
                        state=self.exploring_state(c.exploration), seed=c.optim.seed,
                        settings=settings, agent=probing)

    def full_marks(self, answer: str | None, record: QARecord) -> bool:
        """The answer scores 1 under ``reward_metric``: correct, never probed by REX-RAG."""
        return earns_full_marks(answer, record.golden_answers, self.config.reward_metric)

    def describe(self, metrics: dict[str, float]) -> str:
        """Reward, loss, seconds of one update; with REX-RAG the probes opened and kept."""
        seconds = metrics["rollout_s"] + metrics["score_s"] + metrics["update_s"]
        probes = ("" if "rex/probes_opened" not in metrics else
                  f", probes {metrics['rex/probes_opened']:.0f} opened / "
                  f"{metrics['rex/probes_kept']:.0f} kept")
        return (f"reward {metrics['reward_mean']:.3f}, loss {metrics['loss']:.4f}{probes}, "
                f"{seconds:.0f} s")

    def registry_names(self) -> dict[str, str]:
        """The trained agent's registered model."""
        return {"reasoner": self.config.registered_model}

    def figures(self, history: list[dict[str, float]]) -> dict:
        """The mean reward (± std) per update; with REX-RAG also F1 and searches per question
        type over training."""
        from advrag.evaluation.reports import reward_curve, training_by_type

        figures = {"reward_curve.png": reward_curve(history)}
        if self.config.exploration is not None:
            figures["training_by_type.png"] = training_by_type(history)
        return figures

