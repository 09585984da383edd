"""Recipe ``gar``: a Search-R1 reasoner and a slice discriminator trained jointly (GAR §3).

Both are LoRA adapters on one base (the warm-up model when there is one). The
discriminator starts from its SFT adapter (``discriminator_adapter``, made by
the ``discriminator_sft`` flow), or — ``discriminator_sft: false`` — from a
fresh adapter, which LoRA initialises to change nothing: the base model
judges. One update is ``step.gar_step``: rollouts are sliced, mixed with as
many reference slices from grounded demonstrations of the same questions,
judged, and both agents updated by GRPO. Table 4's rows are configs:
``discriminator: none`` (row 2, R_m only), ``fixed`` with
``discriminator_sft: false`` (row 3, the untuned base model judges), ``fixed``
(row 4, the SFT judge never learns), ``trainable`` with ``lam3: 0`` (row 5,
R_a only), ``lam4: 0`` (row 6, R_d only), or both (row 7, the default).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from advrag.agents.budgets import EpisodeShape
from advrag.agents.types import Trajectory
from advrag.common.types import Retriever
from advrag.config import ConfigError, TrainConfig
from advrag.datasets.records import QARecord
from advrag.recipes.base import Recipe, update_compiled
from advrag.recipes.curated import Curated
from advrag.recipes.gar.config import GarConfig
from advrag.recipes.rex_rag.exploring import Exploring, probing_shape

JUDGED_SHOWN = 6  # slices in the run's judged_slices.png: half generated, half reference
_RATIONALE_RE = re.compile(r"rationale\s*[:\-]\s*(.*)", re.IGNORECASE | re.DOTALL)


class GarRecipe(Curated, Exploring, Recipe):
    """Reasoner ⇄ slice discriminator; the discriminator is an agent only when it trains."""

    name = "gar"
    agents = ("reasoner", "discriminator")  # with discriminator: trainable; else the reasoner alone
    verl_refusal = ("each step trains a reasoner and a discriminator on each other's "
                    "outputs, and verl's trainer holds one policy")
    reward_terms = {"R_m": "reasoner/answer_score", "R_s": "reasoner/slice_score",
                    "R_d": "discriminator/R_d", "R_a": "discriminator/R_a"}
    config: GarConfig
    config_model = GarConfig
    default_config = "configs/gar.yaml"

    def __init__(self, config: GarConfig):
        super().__init__(config)
        self.agents = (("reasoner", "discriminator") if config.discriminator == "trainable"
                       else ("reasoner",))
        self.references: dict[str, list] = {}  # question id → its demonstration's slices
        self.scorer = None
        self.count_tokens = None
        self.slice_log: list[dict] = []  # P(yes) per slice kind, per update of this run

    def upstream(self) -> tuple[str, ...]:
        """Curation when the config curates; the discriminator's SFT, unless the config has no
        discriminator or an untuned one."""
        c = self.config
        sft = ("discriminator_sft",) if c.discriminator != "none" and c.discriminator_sft else ()
        return self.curation_upstream() + sft

    def use_discriminator(self, adapter_dir: Path) -> None:
        """Start the discriminator from the SFT adapter in ``adapter_dir``."""
        self.configure(discriminator_adapter=adapter_dir)

    def demonstrations(self, records: Sequence[QARecord], retriever: Retriever,
                       chat_prompt) -> list[Trajectory]:
        """The reasoner's warm-up: grounded Search-R1 demonstrations (as ``grpo``)."""
        from advrag.recipes.rollout import search_demonstrations

        return search_demonstrations(self.config, records, retriever, chat_prompt)

    def episode_shape(self, max_turns: int) -> EpisodeShape:
        """The reasoner's Search-R1 episode, made longer by REX-RAG's probes when it explores."""
        return probing_shape(super().episode_shape(max_turns), self.config.exploration)

    def check_token_budgets(self, count, chat_prompt, questions: Sequence[QARecord],
                            passages) -> None:
        """The reasoner's budgets (``Recipe``'s), then the discriminator's: its RL update must
        hold a judgment of the longest question's slice (``max_slice_tokens``) with its passages
        (``evidence_tokens``) and ``max_judge_tokens`` of verdict."""
        from advrag.curation.gar_labels import discriminator_prompt

        super().check_token_budgets(count, chat_prompt, questions, passages)
        c = self.config
        if c.discriminator == "none":
            return
        prompt = max(count(chat_prompt(discriminator_prompt(q.question, "", "")))
                     for q in questions)
        need = prompt + c.evidence_tokens + c.max_slice_tokens + c.max_judge_tokens
        budget = (c.optim.model_dump() | c.discriminator_optim)["max_seq_len"]
        if budget < need:
            raise ConfigError(
                f"{self.name}: the discriminator's max_seq_len = {budget} cannot hold a judgment: "
                f"prompt {prompt} + evidence_tokens {c.evidence_tokens} + max_slice_tokens "
                f"{c.max_slice_tokens} + max_judge_tokens {c.max_judge_tokens} = {need} tokens; "
                f"raise discriminator_optim.max_seq_len to at least {need} (or lower those)")

    def build(self, start_model: str) -> None:
        """Adapters on one base (the SFT discriminator loaded), trainers, samplers, the scorer."""
        from advrag.engines.local import dual as d
        from advrag.engines.local.trainer import seed_everything
        from advrag.engines.local.verdicts import verdict_probabilities
        from advrag.models.loading import load_policy, resolve_model_dir

        c = self.config
        if c.discriminator == "fixed" and c.discriminator_sft and c.discriminator_adapter is None:
            raise ValueError("discriminator: fixed needs discriminator_adapter (the SFT judge): run "
                             "`advrag discriminator-sft` and name its adapter, or run the pipeline; "
                             "discriminator_sft: false judges with the untuned base model")
        seed_everything(c.optim.seed)  # adapter initialisation draws random numbers
        loaded = load_policy(start_model, dtype="float32")
        names = ("reasoner",) if c.discriminator == "none" else ("reasoner", "discriminator")
        policies = d.shared_lora_policies(
            loaded.model, c.lora, names=names, cpu_bf16=c.cpu_bf16, amx_attention=c.amx_attention,
            compile_update=update_compiled(c, [loaded.model], self.trained_sequences()))
        if c.discriminator_adapter is not None and "discriminator" in policies:
            policies["discriminator"].load_weights(c.discriminator_adapter)
        tokenizers = dict.fromkeys(names, loaded.tokenizer)
        configs = {"reasoner": c.optim, "discriminator": TrainConfig.model_validate(
            c.optim.model_dump() | c.discriminator_optim)}
        self.trainers = d.AgentTrainers.build({a: policies[a] for a in self.agents}, tokenizers,
                                              configs)
        self.generators = d.agent_generators(
            policies, tokenizers, temperature=c.temperature, backend=c.rollout_backend,
            model_dirs=dict.fromkeys(names, resolve_model_dir(start_model)), seed=c.optim.seed,
            **self.engine_options())
        if "discriminator" in policies:
            self.scorer = partial(verdict_probabilities, policies["discriminator"], loaded.tokenizer)
        self.count_tokens = lambda text: len(loaded.tokenizer(text, add_special_tokens=False)
                                             .input_ids)

    def step(self, retriever: Retriever, records: Sequence[QARecord]) -> dict[str, float]:
        """One joint update on ``records`` (``step.gar_step``; with ``exploration``, the
        reasoner's rollouts carry REX-RAG's probes)."""
        from advrag.recipes.gar.step import gar_step

        c = self.config
        pool = [s for r in records for s in self.reference_slices(r, retriever)]
        state = None if c.exploration is None else self.exploring_state(c.exploration)
        metrics = gar_step(self.trainers, self.generators, retriever, records, c,
                           references=pool, scorer=self.scorer, count_tokens=self.count_tokens,
                           step=self.trainers.step, slice_log=self.slice_log, exploration=state)
        return metrics | self.curation_metrics()

    def reference_slices(self, record: QARecord, retriever: Retriever) -> list:
        """The slices of ``record``'s grounded demonstration (none when it has no usable one)."""
        from advrag.curation.demonstrations import build_demonstrations
        from advrag.recipes.gar.step import trajectory_slices

        if record.id not in self.references:
            c, chat = self.config, self.generators["reasoner"].chat_prompt
            demos = build_demonstrations([record], retriever, chat, topk=c.topk,
                                         max_turns=c.max_turns)
            self.references[record.id] = [
                s for demo in demos for s in trajectory_slices(
                    demo, record, None, self.count_tokens, c.max_slice_tokens,
                    c.min_slice_tokens)]
        return self.references[record.id]

    def describe(self, metrics: dict[str, float]) -> str:
        """Reasoner reward, discriminator accuracy and the update's seconds."""
        accuracy = metrics.get("discriminator/accuracy")
        judged = "" if accuracy is None else f", discriminator accuracy {accuracy:.2f}"
        return (f"reasoner reward {metrics['reasoner/reward_mean']:.3f}{judged}, "
                f"{metrics['time/step_s']:.0f} s")

    def registry_names(self) -> dict[str, str]:
        """Agent → registered model name (the discriminator only when it was trained)."""
        names = {"reasoner": self.config.registered_reasoner,
                 "discriminator": self.config.registered_discriminator}
        return {agent: names[agent] for agent in self.agents}

    def figures(self, history: list[dict[str, float]]) -> dict:
        """The reasoner's reward and answer score; the discriminator's scores and accuracy; the
        histograms of its slice scores (first and last update of this run); and its verdicts and
        rationales on a few slices of the last update."""
        from advrag.evaluation.reports import (
            gar_curves,
            judged_slices_figure,
            slice_score_histograms,
        )

        figures = {"gar_curves.png": gar_curves(history)}
        if self.slice_log:  # the judge ran (slices it could not score are left out; 0 shows)
            figures["slice_scores.png"] = slice_score_histograms(self.slice_log)
        examples = self.judged_examples()
        if examples:
            figures["judged_slices.png"] = judged_slices_figure(examples)
        return figures

    def judged_examples(self, n: int = JUDGED_SHOWN) -> list[dict]:
        """Up to ``n // 2`` generated slices of the last update and as many reference slices
        (fewer when it judged fewer), with the judge's verdict and rationale: the rows of
        ``judged_slices.png``. Nothing is generated again: these are the update's own judgments."""
        from advrag.curation.gar_labels import parse_verdict

        judged = self.slice_log[-1]["judged"] if self.slice_log else []
        generated = [j for j in judged if j["source"] == "generated"][:n // 2]
        references = [j for j in judged if j["source"] == "reference"][:max(len(generated), 1)]
        return [j | {"verdict": parse_verdict(j["judgment"]), "rationale": rationale(j["judgment"])}
                for j in generated + references]


def rationale(judgment: str) -> str:
    """The text after the judgment's ``Rationale:`` ("" when it wrote none)."""
    match = _RATIONALE_RE.search(judgment)
    return match.group(1).strip() if match else ""
