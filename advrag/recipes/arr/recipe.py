"""Recipe ``arr``: ARR's Reasoner and Verifier trained jointly (ARR §4.2).

Two agents — LoRA adapters on one shared base by default (``policies:
shared_lora``), or a model each (``separate``) — each with its own AdamW,
schedule and checkpoints. One update (``step``): G dialogues
per question, each agent's adversarial outcome reward (eq. 5), a GRPO update of
the reasoner, then of the verifier with the process-aware advantage on its
critique tokens (eqs. 6–9, ``core.arr_process``). The warm-up trains the shared
start model on grounded ARR dialogues for both roles (``curation.arr_demonstrations``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from advrag.agents.budgets import EpisodeShape
from advrag.agents.prompts import (
    FORCE_ANSWER_HINT,
    NO_FEEDBACK_TEXT,
    arr_reasoner_prompt,
    arr_verifier_prompt,
)
from advrag.agents.types import Trajectory
from advrag.common.types import Retriever, TextGenerator
from advrag.config import TrainConfig
from advrag.datasets.records import QARecord
from advrag.recipes.arr.config import ArrConfig
from advrag.recipes.base import Recipe, update_compiled
from advrag.recipes.curated import Curated
from advrag.recipes.rex_rag.exploring import Exploring, probing_shape


def agent_configs(config: ArrConfig) -> dict[str, TrainConfig]:
    """Each agent's optimiser: ``optim``, + ``verifier_optim`` for the verifier."""
    return {"reasoner": config.optim,
            "verifier": TrainConfig.model_validate(config.optim.model_dump() | config.verifier_optim)}


class ArrRecipe(Curated, Exploring, Recipe):
    """Reasoner ⇄ verifier, adversarial outcome reward and process-aware advantage."""

    name = "arr"
    agents = ("reasoner", "verifier")
    config: ArrConfig
    config_model = ArrConfig
    default_config = "configs/arr.yaml"
    aliases = ("adversarial-rl",)
    verl_refusal = ("each step trains a reasoner and a verifier on one dialogue, and verl's "
                    "trainer holds one policy")

    def __init__(self, config: ArrConfig):
        super().__init__(config)
        self.traces: list[list] = []  # per update: the dialogues' entropy traces (Figure 6)

    def demonstrations(self, records: Sequence[QARecord], retriever: Retriever,
                       chat_prompt) -> list[Trajectory]:
        """Both roles' trajectories of grounded dialogues from the world's hop chains."""
        from advrag.curation.arr_demonstrations import (
            build_arr_demonstrations,
            demonstration_trajectories,
        )

        c = self.config
        dialogues = build_arr_demonstrations(records, retriever, chat_prompt, topk=c.topk,
                                             max_turns=c.max_turns,
                                             limit=c.warmup.demonstrations, plan=c.warmup_plan)
        return demonstration_trajectories(dialogues)

    def warmup_settings(self) -> dict:
        """The shared settings, and ``plan`` where the dialogues state it (absent otherwise, so
        a warm-up made before the setting existed is still reused)."""
        return super().warmup_settings() | ({"plan": True} if self.config.warmup_plan else {})

    def episode_shape(self, max_turns: int) -> EpisodeShape:
        """Either agent's context of one dialogue (``agents.arr``), bounded by both agents'
        messages: the reasoner's ``max_turns``, the verifier's one per search and its final
        verification, ``max_turns − 1`` searches and the forced-answer and no-feedback texts;
        with REX-RAG's probes, one generation and an exploration prompt more."""
        return probing_shape(EpisodeShape(2 * max_turns + 1, max_turns - 1,
                                          (FORCE_ANSWER_HINT, NO_FEEDBACK_TEXT)),
                             self.config.exploration)

    def rollout_prompts(self, question: str) -> tuple[str, ...]:
        """The reasoner's and the verifier's first messages."""
        return arr_reasoner_prompt(question), arr_verifier_prompt(question)

    def upstream(self) -> tuple[str, ...]:
        """Curation, when the config curates."""
        return self.curation_upstream()

    def curation_agent(self, generator: TextGenerator, retriever: Retriever):
        """ARR's attempt at a question: one dialogue with the start policy in both roles (as the
        benchmark runs one policy), scored by the Final Predictor's answer."""
        from advrag.agents.arr import run_arr_dialogue

        c = self.config

        def attempt(batch: Sequence[QARecord]) -> list[Trajectory]:
            dialogues = run_arr_dialogue([r.question for r in batch], generator, generator,
                                         retriever, max_turns=c.max_turns, topk=c.topk,
                                         max_new_tokens=c.max_new_tokens)
            return [d.final for d in dialogues]
        return attempt

    def curation_settings(self) -> dict:
        """The loop's budgets, with ARR's dialogue as the agent."""
        return super().curation_settings() | {"agent": "arr-dialogue"}

    def build(self, start_model: str) -> None:
        """Both agents (adapters on one base, or two models), their trainers and generators."""
        from advrag.engines.local import dual as d
        from advrag.engines.local.trainer import seed_everything
        from advrag.models.loading import load_policy, resolve_model_dir

        c = self.config
        configs = agent_configs(c)
        seed_everything(configs["reasoner"].seed)  # adapter initialisation draws random numbers
        loaded = {"reasoner": load_policy(start_model, dtype="float32")}
        if c.policies != "shared_lora":
            loaded["verifier"] = load_policy(c.verifier_model or start_model, dtype="float32")
        compiled = update_compiled(c, [p.model for p in loaded.values()], self.trained_sequences())
        if c.policies == "shared_lora":
            policies = d.shared_lora_policies(loaded["reasoner"].model, c.lora,
                                              cpu_bf16=c.cpu_bf16, compile_update=compiled,
                                              amx_attention=c.amx_attention)
            loaded["verifier"] = loaded["reasoner"]
        else:
            policies = d.separate_policies(
                {name: p.model for name, p in loaded.items()}, c.lora, cpu_bf16=c.cpu_bf16,
                compile_update=compiled, amx_attention=c.amx_attention,
                keep_reference=any(x.kl_coef > 0 for x in configs.values()))
        tokenizers = {name: p.tokenizer for name, p in loaded.items()}
        self.trainers = d.AgentTrainers.build(policies, tokenizers, configs)
        dirs = {"reasoner": start_model, "verifier": start_model if c.policies == "shared_lora"
                else c.verifier_model or start_model}
        self.generators = d.agent_generators(
            policies, tokenizers, temperature=c.temperature, backend=c.rollout_backend,
            model_dirs={name: resolve_model_dir(spec) for name, spec in dirs.items()},
            seed=configs["reasoner"].seed,
            **self.engine_options())

    def step(self, retriever: Retriever, records: Sequence[QARecord]) -> dict[str, float]:
        """One joint update: rollout → score → reasoner update → verifier update."""
        from advrag.recipes.arr.step import arr_step

        c = self.config
        state = None if c.exploration is None else self.exploring_state(c.exploration)
        result = arr_step(self.trainers, self.generators, retriever, records, c, state)
        self.traces.append(result.traces)
        return result.metrics | self.curation_metrics()

    def describe(self, metrics: dict[str, float]) -> str:
        """Both agents' mean reward and the update's seconds."""
        return (f"reward reasoner {metrics['reasoner/reward_mean']:.3f}, verifier "
                f"{metrics['verifier/reward_mean']:.3f}, {metrics['time/step_s']:.0f} s")

    def registry_names(self) -> dict[str, str]:
        """Agent → registered model name."""
        return {"reasoner": self.config.registered_reasoner,
                "verifier": self.config.registered_verifier}

    def figures(self, history: list[dict[str, float]]) -> dict:
        """Both agents' reward and F1 curves, and the paper's Figure 6 (entropy per turn)."""
        from advrag.evaluation.reports import entropy_figure, reward_curves

        return {"reward_curves.png": reward_curves(history),
                "entropy_trajectories.png": entropy_figure(self.traces)}

    def benchmark_models(self, start_model: str, model_dirs: dict[str, Path]) -> dict[str, dict]:
        """The untrained, warmed-up and trained pairs (the benchmark's ARR gets the verifier)."""
        return {"base": {"model": self.config.model, "verifier_model": self.config.verifier_model},
                "warmup": {"model": start_model, "verifier_model": None},
                "trained": {"model": str(model_dirs["reasoner"]),
                            "verifier_model": str(model_dirs["verifier"])}}
