"""Recipe ``ur2``: UR²'s curated two-stage RL of a Search-R1-style agent (UR² §3).

Before RL the flow curates the training questions with the start policy
(``curation.curate``: k rollouts per question, levels, a 7:2:1 sample); this
recipe then trains in two stages:

- **stage 1** (the first ``stage1_steps`` updates) on the questions the policy
  never solves (s < 0.2, App. C.5), rewarded for format and valid queries
  whatever the answer (``core.rewards.ur2_reward`` stage 1);
- **stage 2** on the curated 7:2:1 sample, rewarded for a correct answer and a
  valid format; both stages subtract ``fallback_penalty`` per fallback fault.

Task mixing (§3.1.2): reasoning-only items (``reasoning_share`` of the training
questions) get a direct step-by-step prompt unless curation found them hard;
every other item searches. What a violation, a valid query and a fallback fault
are is defined once, in ``agents.ur2_scoring`` (no search is a violation only
where the prompt asked for one). Advantages: REINFORCE++ with a group-mean baseline and
batch whitening (``optim.advantage: reinforce_pp``, App. C.2).

How this departs from the paper: "correct" is the answer scoring at least 0.5
under ``reward_metric`` (with EM: an exact match, the paper's reading; with F1:
half the answer's tokens, for a 135M policy that rarely matches exactly). When
curation leaves a stage's pool empty (e.g. the policy solves nothing, so no
question reaches the hard level), that stage trains on all the training
questions and the step's metrics say so (``uncurated_pool`` = 1).
"""

from __future__ import annotations

from collections.abc import Sequence

from advrag.agents.types import Trajectory
from advrag.agents.ur2_scoring import ur2_counts
from advrag.common.types import Retriever, TextGenerator
from advrag.core.rewards import ANSWER_METRICS, ur2_reward
from advrag.curation.mixing import needs_search
from advrag.datasets.records import QARecord
from advrag.recipes.base import batch_for_step
from advrag.recipes.grpo.recipe import GrpoRecipe
from advrag.recipes.ur2.config import UR2Config


class UR2Recipe(GrpoRecipe):
    """Two-stage GRPO/REINFORCE++ on curated questions; warm-up and agents as ``grpo``."""

    name = "ur2"
    config: UR2Config
    config_model = UR2Config
    default_config = "configs/ur2.yaml"
    aliases = ()  # `advrag train` is grpo's

    def __init__(self, config: UR2Config):
        super().__init__(config)
        self.pools: dict[int, list[QARecord]] = {}
        self.summariser = None

    def build(self, start_model: str) -> None:
        """The agent as in ``grpo``, plus the summariser (a frozen model) when ``summarise``."""
        from advrag.retrieval.summary import make_summariser

        super().build(start_model)
        self.summariser = make_summariser(self.config.summary, load_model=load_summary_model)

    def upstream(self) -> tuple[str, ...]:
        """Curation with the start policy, unless the config trains on uncurated questions."""
        return () if self.config.curate is None else ("curation",)

    def training_questions(self) -> list[QARecord]:
        """The world's training questions mixed with reasoning-only items (``mixed_questions``)."""
        return mixed_questions(self.config)

    def use_curation(self, curated: Sequence[QARecord], stage1: Sequence[QARecord]) -> None:
        """Train stage 1 on ``stage1`` (the filtered questions), stage 2 on ``curated``."""
        self.pools = {1: list(stage1), 2: list(curated)}

    def stage(self, step: int) -> int:
        """The reward stage of update ``step`` (0-based)."""
        return 1 if step < self.config.stage1_steps else 2

    def batch(self, records: Sequence[QARecord], step: int) -> list[QARecord]:
        """The step's questions, from its stage's pool (all ``records`` when that pool is empty)."""
        pool = self.pools.get(self.stage(step)) or records
        return batch_for_step(pool, step, self.config.questions_per_step, self.config.optim.seed)

    def step(self, retriever: Retriever, records: Sequence[QARecord]) -> dict[str, float]:
        """One update with the reward of the current stage; also logs UR²'s counts."""
        c, stage = self.config, self.stage(self.trainers["reasoner"].step)
        tally = {"violations": 0.0, "valid_queries": 0.0, "fallbacks": 0.0, "correct": 0.0}
        scored = []  # one entry per rewarded trajectory (REX-RAG's probes included)

        def reward(trajectory: Trajectory, record: QARecord) -> float:
            counts = ur2_counts(trajectory, retrieval_expected=needs_search(record))
            correct = self.correct(trajectory, record)
            scored.append(trajectory)
            for key, value in zip(tally, (counts.format_violations, counts.valid_queries,
                                          counts.fallback_faults, correct), strict=True):
                tally[key] += value
            return ur2_reward(stage, format_violations=counts.format_violations,
                              valid_queries=counts.valid_queries,
                              fallback_faults=counts.fallback_faults, correct=correct,
                              fallback_penalty=c.fallback_penalty)

        metrics = self.update(retriever, records, reward, agent=self.agent(retriever))
        n = len(scored)
        summaries = {} if self.summariser is None else {
            f"summary/{k}": float(v) for k, v in self.summariser.stats.as_dict().items()}
        return metrics | {f"ur2/{k}": v / n for k, v in tally.items()} | summaries | {
            "ur2/stage": float(stage), "uncurated_pool": float(not self.pools.get(stage))}

    def agent(self, retriever: Retriever):
        """Task mixing's rollout: the search loop or a direct answer, per ``needs_search``
        (REX-RAG's ``prober``, when it explores, probes the searching items)."""
        from advrag.agents.mixed import run_mixed_agent

        c, generator = self.config, self.generators["reasoner"]

        def run(records: Sequence[QARecord], prober=None) -> list[Trajectory]:
            return run_mixed_agent([r.question for r in records], [needs_search(r) for r in records],
                                   generator, retriever, max_turns=c.max_turns, topk=c.topk,
                                   max_new_tokens=c.max_new_tokens, summariser=self.summariser,
                                   prober=prober)

        return run

    def correct(self, trajectory: Trajectory, record: QARecord) -> bool:
        """The answer scores at least 0.5 under ``reward_metric`` (module docstring)."""
        if trajectory.answer is None:
            return False
        return ANSWER_METRICS[self.config.reward_metric](trajectory.answer,
                                                        record.golden_answers) >= 0.5

    def describe(self, metrics: dict[str, float]) -> str:
        """Stage, reward, correct share, queries and seconds of one update."""
        seconds = metrics["rollout_s"] + metrics["score_s"] + metrics["update_s"]
        return (f"stage {metrics['ur2/stage']:.0f}, reward {metrics['reward_mean']:.3f}, "
                f"correct {metrics['ur2/correct']:.2f}, valid queries "
                f"{metrics['ur2/valid_queries']:.2f}, {seconds:.0f} s")


def mixed_questions(config: UR2Config) -> list[QARecord]:
    """Task mixing's training questions: the world's QA items, with ``reasoning_share`` of the
    result reasoning-only items (``reasoning_train.jsonl``); all QA items are kept."""
    from advrag.curation.mixing import mix_tasks
    from advrag.datasets.loaders import load_qa

    records = load_qa(config.world_dir / "train.jsonl")
    share = config.reasoning_share
    if not share:
        return records
    reasoning = load_qa(config.world_dir / "reasoning_train.jsonl")
    wanted = round(len(records) / (1.0 - share)) if share < 1 else len(reasoning)
    return mix_tasks(records, reasoning, share, wanted, config.optim.seed)


def load_summary_model(spec: str) -> TextGenerator:
    """Greedy transformers generation from the model ``spec`` names: the summariser's local
    model, handed to ``retrieval.summary`` (which imports neither models nor engines)."""
    from advrag.engines.local.generation import HFGenerator
    from advrag.models.loading import load_policy

    policy = load_policy(spec)
    return HFGenerator(policy.model, policy.tokenizer)
