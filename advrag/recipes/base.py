"""The recipe contract: what a training method supplies, and what every recipe shares.

A recipe is one RL training method (GRPO, ARR, …). It supplies only what is its own:

- ``agents``: the policies it trains (the first is the *primary* one, whose model
  is benchmarked and promoted);
- ``build``: those agents' trainers and rollout generators, from a start model;
- ``step``: one update — its rollout, its scoring (pure functions of ``core``,
  registered by name) and the agents' updates — returning the step's metrics;
- ``demonstrations``: the warm-up's SFT data, in the layout of its rollouts;
- ``registry_names``, ``figures``, ``describe`` and the models to benchmark;
- the episodes its token budgets must hold (``episode_shape``, ``rollout_prompts``,
  ``token_budgets``; ``check_token_budgets`` refuses a config that could cut one);
- what it needs upstream (``upstream``: UR²'s curation, GAR's discriminator SFT), which
  the pipeline runs and hands over (``use_curation``, ``use_discriminator``), and its
  training questions (``training_questions``);
- its runs on verl (``verl_runs``: ``engines.verl.runs.VerlRun``, each stage's reward,
  questions, agent loop and trainer), or why it has none (``verl_refusal``).

The loop never asks a recipe's name: what differs is in these methods and ``config_model``.

The shared parts live here once: the SFT warm-up (cached in
``checkpoint_dir/warmup`` and refused if made under other settings), the
question batches, checkpoints with the settings hash a resume must match, and
the export of every agent. ``advrag.flows.rl.run_recipe`` is the one loop that
runs any recipe: warm start → update → log → checkpoint within the budget →
export → register → benchmark base/warm-up/trained.
"""

from __future__ import annotations

import json
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from advrag.agents.budgets import (
    Budget,
    Count,
    EpisodeBound,
    EpisodeShape,
    episode_bound,
    longest_information,
    refusal,
    search_agent_shape,
)
from advrag.agents.prompts import search_r1_prompt
from advrag.agents.types import Trajectory
from advrag.common.types import Passage, Retriever, TextGenerator
from advrag.config import ConfigError, RLRunConfig, config_hash
from advrag.datasets.records import QARecord

UPSTREAM_STAGES = ("curation", "discriminator_sft")
"""Stages a recipe may need before its RL (``Recipe.upstream``), in the order they run."""


class Recipe(ABC):
    """One training method on the local engine; ``run_recipe`` drives it."""

    name: ClassVar[str]
    agents: ClassVar[tuple[str, ...]]
    config_model: ClassVar[type[RLRunConfig]]
    """The recipe's config (``advrag.recipes.<name>.config``)."""
    default_config: ClassVar[str]
    """The config file its commands read when none is given."""
    aliases: ClassVar[tuple[str, ...]] = ()
    """CLI commands that run this recipe besides `advrag rl` (e.g. `advrag train`)."""
    reward_terms: ClassVar[dict[str, str]] = {}
    verl_refusal: ClassVar[str | None] = "it describes no verl runs"
    """Why ``--engine verl`` cannot train this recipe (``refuse_verl``); ``None`` where
    ``verl_runs`` describes its runs."""
    """The reward terms a run reports per update (name → the step metric holding it): what the
    pipeline's table prints beside the benchmark (none by default)."""

    def __init__(self, config: RLRunConfig):
        self.config = config
        self.trainers = None  # AgentTrainers, set by build()
        self.generators: dict[str, TextGenerator] = {}
        self.resumed_from_run: str | None = None  # set by resume()

    # ---- what each recipe supplies -------------------------------------------------------

    @abstractmethod
    def demonstrations(self, records: Sequence[QARecord], retriever: Retriever,
                       chat_prompt) -> list[Trajectory]:
        """The warm-up's SFT trajectories, laid out as this recipe's rollouts."""

    @abstractmethod
    def build(self, start_model: str) -> None:
        """Load the agents from ``start_model``: set ``self.trainers`` and ``self.generators``."""

    @abstractmethod
    def step(self, retriever: Retriever, records: Sequence[QARecord]) -> dict[str, float]:
        """One update on ``records``: rollout → score → update every agent; the step's metrics."""

    @abstractmethod
    def describe(self, metrics: dict[str, float]) -> str:
        """The progress line of one update."""

    @abstractmethod
    def registry_names(self) -> dict[str, str]:
        """Agent → registered model name."""

    def upstream(self) -> tuple[str, ...]:
        """The stages of ``UPSTREAM_STAGES`` this config needs before RL (none by default)."""
        return ()

    def use_curation(self, curated: Sequence[QARecord], stage1: Sequence[QARecord]) -> None:
        """Take the curation's sample (``curated``) and its stage-1 questions; only a recipe
        whose ``upstream`` names curation is handed them."""
        raise NotImplementedError(f"recipe {self.name!r} takes no curation")

    def curation_agent(self, generator: TextGenerator, retriever: Retriever
                       ) -> Callable[[Sequence[QARecord]], list[Trajectory]]:
        """One attempt of this recipe's agent at each of a batch of questions: what curation
        scores a question's difficulty by (the Search-R1 loop with the config's budgets by
        default)."""
        from advrag.agents.search_loop import run_search_agent

        c = self.config
        return lambda batch: run_search_agent(
            [r.question for r in batch], generator, retriever, max_turns=c.max_turns,
            topk=c.topk, max_new_tokens=c.max_new_tokens)

    def curation_settings(self) -> dict[str, Any]:
        """What ``curation_agent``'s attempts depend on besides the policy (curation's cache
        key): the agent, the loop's budgets and the sampling temperature."""
        c = self.config
        return {"agent": "search-r1", "max_turns": c.max_turns, "topk": c.topk,
                "max_new_tokens": c.max_new_tokens, "temperature": c.temperature}

    def use_discriminator(self, adapter_dir: Path) -> None:
        """Take the SFT discriminator's adapter; only a recipe whose ``upstream`` names
        discriminator_sft is handed one."""
        raise NotImplementedError(f"recipe {self.name!r} takes no discriminator")

    def refuse_verl(self) -> None:
        """Refuse (``ValueError``) ``--engine verl`` for a recipe without verl runs, saying why."""
        if self.verl_refusal is None:
            return
        *most, last = sorted({r.name for r in named_recipes() if r.verl_refusal is None})
        carried = f"{', '.join(most)} and {last}" if most else last
        raise ValueError(f"--engine verl runs recipes {carried} for now; {self.name!r}: "
                         f"{self.verl_refusal} (docs/verl.md): run it locally")

    def verl_runs(self) -> list:
        """The ``engines.verl.runs.VerlRun`` s that train this config on verl, in order, each
        from the one before's merged model (after ``upstream``'s curation, when it has one)."""
        self.refuse_verl()
        raise NotImplementedError(f"recipe {self.name!r} sets no verl_refusal and no verl_runs")

    def episode_shape(self, max_turns: int) -> EpisodeShape:
        """The most one rollout of ``max_turns`` turns holds (``agents.budgets``): the
        Search-R1 loop's by default."""
        return search_agent_shape(max_turns)

    def rollout_prompts(self, question: str) -> tuple[str, ...]:
        """The user messages a rollout of ``question`` starts its agents from (Search-R1's by
        default): what a token budget must hold before the first turn."""
        return (search_r1_prompt(question),)

    def token_budgets(self) -> list[Budget]:
        """Every token budget of this config and the episode it must hold: the RL update's and
        the warm-up's (a demonstration has the rollouts' shape)."""
        c = self.config
        shape = self.episode_shape(c.max_turns)
        budgets = [Budget("optim.max_seq_len", c.optim.max_seq_len, "an RL episode", shape,
                          c.max_new_tokens)]
        if c.warmup is not None:
            budgets.append(Budget("warmup.sft.max_seq_len", c.warmup.sft.max_seq_len,
                                  "a warm-up demonstration", shape, c.max_new_tokens))
        return budgets

    def budget_bounds(self, count: Count, chat_prompt, questions: Sequence[QARecord],
                      passages: Sequence[Passage]) -> list[tuple[Budget, EpisodeBound]]:
        """Each token budget with the bound of the episode it must hold: ``count`` is the
        policy's token counter, ``chat_prompt`` renders a user message as the policy sees it,
        ``questions`` and ``passages`` what the run asks and retrieves from."""
        info = longest_information(count, passages, self.config.topk)
        prompts = [chat_prompt(p) for q in questions for p in self.rollout_prompts(q.question)]
        return [(budget, episode_bound(count, prompts, info, budget.shape, budget.max_new_tokens))
                for budget in self.token_budgets()]

    def check_token_budgets(self, count: Count, chat_prompt, questions: Sequence[QARecord],
                            passages: Sequence[Passage]) -> None:
        """Refuse (``ConfigError``) a budget that cannot hold its episode (``budget_bounds``)."""
        problems = [why for budget, bound in self.budget_bounds(count, chat_prompt, questions,
                                                                passages)
                    if (why := refusal(budget, bound))]
        if problems:
            raise ConfigError(f"{self.name}: " + "; ".join(problems))

    def needs_world(self) -> list[str]:
        """What this config reads that only the generated world has, each with the setting
        that lifts it; empty: it trains on any corpus and QA files (``data.files``)."""
        return []

    def training_questions(self) -> list[QARecord]:
        """The questions RL (and its warm-up) draws from: the world's training split."""
        from advrag.datasets.loaders import load_qa

        return load_qa(self.config.world_dir / "train.jsonl")

    def configure(self, **changes: Any) -> None:
        """Change settings of the config (the pipeline's experiment and checkpoint directory),
        validated as a file's would be."""
        self.config = self.config_model.model_validate(
            self.config.model_dump() | changes)

    def figures(self, history: list[dict[str, float]]) -> dict[str, Any]:
        """Artifact file name → matplotlib figure of the run (none by default)."""
        return {}

    def run_state(self) -> dict[str, Any]:
        """What the recipe carries between updates besides the weights (JSON; in each checkpoint)."""
        return {}

    def restore_run_state(self, state: dict[str, Any]) -> None:
        """Take back what ``run_state`` returned when the run was checkpointed."""
        if state:
            raise ValueError(f"recipe {self.name!r} keeps no state, but the checkpoint holds "
                             f"{sorted(state)}: resume it with the recipe that wrote it")

    def trained_sequences(self) -> int:
        """Sequences the RL updates train in all (steps × questions × group): what
        ``compile_update: auto`` weighs against the one-off compile."""
        c = self.config
        return c.steps * c.questions_per_step * c.group_size

    def engine_options(self) -> dict[str, Any]:
        """What a vLLM rollout engine of this run weighs for ``compile_rollout`` (``auto``: the
        rollouts the run samples, as many as the sequences it trains)."""
        return {"compile_rollout": self.config.compile_rollout,
                "rollouts": self.trained_sequences()}

    def benchmark_models(self, start_model: str, model_dirs: dict[str, Path]) -> dict[str, dict]:
        """Stage → benchmark settings of the untrained, warmed-up and trained models."""
        trained = str(model_dirs[self.agents[0]])
        return {"base": {"model": self.config.model}, "warmup": {"model": start_model},
                "trained": {"model": trained}}

    # ---- shared by every recipe ----------------------------------------------------------

    def settings_hash(self) -> str:
        """Hash of the settings a checkpoint must share with the run resuming it."""
        return config_hash(self.config, exclude=self.config.RUN_CONTROL)

    def warmup_settings(self) -> dict[str, Any]:
        """What the warm-up model depends on (written beside it as ``warmup.json``)."""
        c = self.config
        return {"recipe": self.name, "model": c.model,
                "lora": None if c.lora is None else c.lora.model_dump(mode="json"),
                "max_turns": c.max_turns, "topk": c.topk, **c.warmup.model_dump(mode="json")}

    def warm_up(self, retriever: Retriever, records: Sequence[QARecord]
                ) -> tuple[Path, list[dict[str, float]]]:
        """SFT on ``demonstrations``, merged into the base: where RL starts.

        Returns ``(model_dir, per-step metrics)``. ``checkpoint_dir/warmup`` is reused
        by reruns (no metrics then) and refused if it was made with other settings.
        """
        from advrag.engines.local.dual import export_policy
        from advrag.engines.local.generation import HFGenerator
        from advrag.engines.local.sft import supervised_finetune
        from advrag.engines.local.trainer import seed_everything

        out, settings = self.config.checkpoint_dir / "warmup", self.warmup_settings()
        if reuse_warmup(out, settings):
            return out, []
        seed_everything(self.config.warmup.sft.seed)  # the adapter's initialisation draws random numbers
        policy, tokenizer = trainable_policy(
            self.config.model, self.config, keep_reference=False,
            sequences=self.config.warmup.demonstrations * self.config.warmup.sft.epochs)
        demos = self.demonstrations(records, retriever,
                                    HFGenerator(policy.model, tokenizer).chat_prompt)
        history = supervised_finetune(policy, tokenizer, demos, self.config.warmup.sft)
        export_policy(policy, tokenizer, out, files={"warmup.json": json.dumps(settings, indent=2)})
        return out, history

    def batch(self, records: Sequence[QARecord], step: int) -> list[QARecord]:
        """The questions of update ``step`` (see ``batch_for_step``)."""
        return batch_for_step(records, step, self.config.questions_per_step, self.config.optim.seed)

    def save(self, next_step: int, run_id: str | None = None) -> dict[str, Path]:
        """Checkpoint every agent after ``next_step`` updates, naming the MLflow run that logged
        them (a resumed run carries their curves on); artifact path → directory."""
        saved = self.trainers.save(self.config.checkpoint_dir, data_position=next_step,
                                   extra={"settings_hash": self.settings_hash(),
                                          "recipe_state": self.run_state(), "run_id": run_id})
        if len(saved) == 1:
            return {"checkpoints": next(iter(saved.values()))}
        return {f"checkpoints/{agent}": path for agent, path in saved.items()}

    def resume(self) -> int:
        """Resume every agent from its newest common checkpoint; the next step to run.

        Generators with their own copy of the weights (``push_weights``) get the
        resumed ones, so the first rollout after a resume samples the resumed policy.
        ``resumed_from_run``: the MLflow run that wrote the checkpoint (None: a fresh start, or
        a checkpoint older than this field).
        """
        state = self.trainers.resume(self.config.checkpoint_dir)
        self.resumed_from_run = None if state is None else state["extra"].get("run_id")
        if state is None:
            return 0
        if state["extra"].get("settings_hash") != self.settings_hash():
            raise ValueError(f"{self.config.checkpoint_dir} was written with other {self.name.upper()} "
                             "settings: resume with the same config or use another checkpoint_dir")
        from advrag.engines.local.trainer import push_updated_weights

        self.restore_run_state(state["extra"].get("recipe_state", {}))
        for agent, generator in self.generators.items():
            push_updated_weights(generator, self.trainers[agent])
        return int(state["data_position"])

    def export(self) -> dict[str, Path]:
        """Every agent as a plain transformers checkpoint under ``checkpoint_dir/final``."""
        return self.trainers.export(self.config.checkpoint_dir / "final")

    def artifact_path(self, agent: str) -> str:
        """Where agent ``agent``'s registered model lies in the run's artifacts."""
        return "checkpoint" if len(self.agents) == 1 else f"model/{agent}"



def named_recipes() -> list[type[Recipe]]:
    """Every recipe class defined so far that names itself (``RECIPES``' entries, imported with
    ``advrag.recipes``; a shared base such as ``SearchAgentRecipe`` names none). Read through
    the class tree, as the table imports this module."""
    found, todo = [], [Recipe]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if "name" in vars(cls):
            found.append(cls)
    return found

def trainable_policy(model_spec: str, config: RLRunConfig, *, keep_reference: bool,
                     sequences: int):
    """The model of ``model_spec`` as a ``TrainablePolicy`` (LoRA or full), and its tokenizer;
    ``sequences``: how many it will train on (for ``compile_update: auto``)."""
    from advrag.engines.local.policy import TrainablePolicy
    from advrag.models.loading import load_policy

    loaded = load_policy(model_spec, dtype="float32")
    policy = TrainablePolicy(loaded.model, lora=config.lora, keep_reference=keep_reference,
                             cpu_bf16=config.cpu_bf16, amx_attention=config.amx_attention,
                             compile_update=update_compiled(config, [loaded.model], sequences))
    return policy, loaded.tokenizer


def update_compiled(config: RLRunConfig, models: Sequence, sequences: int) -> bool:
    """``config.compile_update`` resolved for every one of ``models`` and a run of
    ``sequences`` trained sequences (``compile_for_run``); what ``auto`` chose is printed."""
    from advrag.engines.local.policy import AUTO_COMPILE_MIN_SEQUENCES, compile_for_run

    compiled = all(compile_for_run(config.compile_update, m, sequences) for m in models)
    if config.compile_update == "auto":
        print(f"compile_update auto: the update runs {'compiled' if compiled else 'eager'} "
              f"({sequences} sequences to train; auto compiles from "
              f"{AUTO_COMPILE_MIN_SEQUENCES} on a CPU with a C++ compiler)")
    return compiled


def reuse_warmup(out: Path, settings: dict[str, Any]) -> bool:
    """True if ``out`` holds a warm-up made with ``settings``; raises if made with others."""
    marker = out / "warmup.json"
    if not marker.is_file():
        return False
    if json.loads(marker.read_text()) != json.loads(json.dumps(settings)):
        raise ValueError(f"{out} holds a warm-up made with other settings ({marker}); "
                         "delete it or use another checkpoint_dir.")
    return True


def batch_for_step(records: Sequence[QARecord], step: int, size: int,
                   seed: int) -> list[QARecord]:
    """The questions of one step: epochs walk a seeded permutation (resumable by step)."""
    per_epoch = max(len(records) // size, 1)
    epoch, index = divmod(step, per_epoch)
    order = list(range(len(records)))
    random.Random(seed + epoch).shuffle(order)
    return [records[i] for i in order[index * size : (index + 1) * size]]
