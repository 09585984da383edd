"""Recipe ``ur2``: UR²'s curated two-stage RL of a Search-R1-style agent (UR² §3).

Before RL the flow curates the training questions with the start policy
(``curation.curate``: k rollouts per question, levels, a 7:2:1 sample); this
recipe then trains in two stages:

- **stage 1** (the first ``stage1_steps`` updates) on the reasoning-only questions
  the policy never solves (s < 0.2; App. C.5's discarded math problems,
  ``curation.mixing.stage1_pool``), every one with the retrieval prompt, rewarded
  for format and valid queries whatever the answer (``core.rewards.ur2_reward`` stage 1);
- **stage 2** on the curated 7:2:1 sample, prompts by task mixing, rewarded for a
  correct answer and a valid format; both stages subtract ``fallback_penalty`` per
  fallback fault.

Task mixing (§3.1.2): in stage 2 reasoning-only items (``reasoning_share`` of the
training questions) get a direct step-by-step prompt unless curation found them
hard; every other item searches; with ``task_mixing: false`` every item searches
(``curation.mixing.gets_retrieval_prompt``). Searching items get UR²'s search prompt
(``agents.prompts.ur2_search_prompt``: one fact per query, under the word limit the
reward counts, at most ``max_turns`` searches), and so do the warm-up's
demonstrations. What a violation, a valid query and a fallback fault are is defined
once, in ``agents.ur2_scoring`` (no search is a violation only where the prompt asked
for one). Advantages: REINFORCE++ with a group-mean baseline and batch whitening
(``optim.advantage: reinforce_pp``, App. C.1).

How this departs from the paper: "correct" is the answer scoring at least 0.5
under ``reward_metric`` (with EM: an exact match, the paper's reading; with F1:
half the answer's tokens, for a 135M policy that rarely matches exactly). When
curation leaves a stage's pool empty (e.g. the policy solves nothing, so no
question reaches the hard level), that stage trains on all the training
questions and the step's metrics say so (``uncurated_pool`` = 1). The query
budget the prompt states is the loop's ``max_turns`` (the paper's 4; fewer on a CPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from advrag.agents.prompts import ur2_search_prompt
from advrag.agents.types import Trajectory
from advrag.agents.ur2_scoring import ur2_counts
from advrag.common.types import Retriever, TextGenerator
from advrag.core.rewards import ANSWER_METRICS, ur2_reward
from advrag.curation.mixing import gets_retrieval_prompt, stage1_pool
from advrag.datasets.records import QARecord
from advrag.recipes.base import batch_for_step
from advrag.recipes.search_agent.recipe import SearchAgentRecipe
from advrag.recipes.ur2.config import UR2Config


class UR2Recipe(SearchAgentRecipe):
    """Two-stage GRPO/REINFORCE++ on curated questions; the single search agent
    (``recipes.search_agent``) under UR²'s prompt."""

    name = "ur2"
    config: UR2Config
    config_model = UR2Config
    default_config = "configs/ur2.yaml"

    def __init__(self, config: UR2Config):
        super().__init__(config)
        self.pools: dict[int, list[QARecord]] = {}
        self.summariser = None

    def demonstrations(self, records: Sequence[QARecord], retriever: Retriever,
                       chat_prompt) -> list[Trajectory]:
        """The search agent's grounded demonstrations, under UR²'s search prompt (its rollouts')."""
        from advrag.curation.demonstrations import build_demonstrations

        c = self.config
        return build_demonstrations(records, retriever, chat_prompt, topk=c.topk,
                                    max_turns=c.max_turns, limit=c.warmup.demonstrations,
                                    prompt=self.search_prompt())

    def warmup_settings(self) -> dict:
        """The search agent's, plus the prompt the demonstrations show: a warm-up made under another
        prompt (Search-R1's, before UR² had its own) is refused, not reused."""
        return super().warmup_settings() | {"prompt": self.search_prompt()("{question}")}

    def search_prompt(self):
        """Question → UR²'s search prompt, with the loop's turns as the query budget."""
        return partial(ur2_search_prompt, max_queries=self.config.max_turns)

    def rollout_prompts(self, question: str) -> tuple[str, ...]:
        """UR²'s search prompt (its direct-reasoning prompt holds no passages and is shorter)."""
        return (self.search_prompt()(question),)

    def build(self, start_model: str) -> None:
        """The search agent, plus the summariser (a frozen model) when ``summarise``."""
        from advrag.retrieval.summary import make_summariser

        super().build(start_model)
        self.summariser = make_summariser(self.config.summary, load_model=load_summary_model)

    def needs_world(self) -> list[str]:
        """Task mixing's reasoning-only items are the world's reasoning splits."""
        return (["UR²'s reasoning-only items are the world's reasoning splits: set "
                 "reasoning_share: 0"] if self.config.reasoning_share else [])

    def upstream(self) -> tuple[str, ...]:
        """Curation with the start policy, unless the config trains on uncurated questions."""
        return () if self.config.curate is None else ("curation",)

    def training_questions(self) -> list[QARecord]:
        """The world's training questions mixed with reasoning-only items (``mixed_questions``)."""
        return mixed_questions(self.config)

    def curation_agent(self, generator: TextGenerator, retriever: Retriever):
        """UR²'s attempt at a question: the search loop under UR²'s prompt for the items that
        search, a direct answer for the reasoning-only ones; retrieval summarised as in
        training (``summary``)."""
        from advrag.agents.mixed import run_mixed_agent
        from advrag.curation.mixing import needs_search
        from advrag.retrieval.summary import make_summariser

        c = self.config
        summariser = make_summariser(c.summary, load_model=load_summary_model)
        return lambda batch: run_mixed_agent(
            [r.question for r in batch], [needs_search(r) for r in batch], generator, retriever,
            max_turns=c.max_turns, topk=c.topk, max_new_tokens=c.max_new_tokens,
            summariser=summariser)

    def curation_settings(self) -> dict:
        """The loop's, UR²'s mixed agent, and the summaries' settings (their cache directory
        apart)."""
        return super().curation_settings() | {
            "agent": "ur2-mixed",
            "summary": self.config.summary.model_dump(mode="json", exclude={"cache_dir"})}

    def use_curation(self, curated: Sequence[QARecord], stage1: Sequence[QARecord]) -> None:
        """Train stage 1 on the reasoning-only items among ``stage1`` (the filtered
        questions, ``stage1_pool``), stage 2 on ``curated``."""
        self.pools = {1: stage1_pool(stage1), 2: list(curated)}

    def stage(self, step: int) -> int:
        """The reward stage of update ``step`` (0-based)."""
        return 1 if step < self.config.stage1_steps else 2

    def batch(self, records: Sequence[QARecord], step: int) -> list[QARecord]:
        """The step's questions, from its stage's pool (all ``records`` when that pool is empty)."""
        pool = self.pools.get(self.stage(step)) or records
        return batch_for_step(pool, step, self.config.questions_per_step, self.config.optim.seed)

    def step(self, retriever: Retriever, records: Sequence[QARecord]) -> dict[str, float]:
        """One update with the reward of the current stage; also logs UR²'s counts, as shares
        of the rewarded trajectories (``retrieval_prompts``: those asked to search)."""
        c, stage = self.config, self.stage(self.trainers["reasoner"].step)
        tally = dict.fromkeys(("violations", "valid_queries", "fallbacks", "correct",
                               "retrieval_prompts"), 0.0)
        scored = []  # one entry per rewarded trajectory (REX-RAG's probes included)

        def reward(trajectory: Trajectory, record: QARecord) -> float:
            searching = self.retrieval_prompt(record, stage)
            counts = ur2_counts(trajectory, retrieval_expected=searching)
            correct = self.correct(trajectory, record)
            scored.append(trajectory)
            for key, value in (("violations", counts.format_violations),
                               ("valid_queries", counts.valid_queries),
                               ("fallbacks", counts.fallback_faults), ("correct", correct),
                               ("retrieval_prompts", searching)):
                tally[key] += value
            return ur2_reward(stage, format_violations=counts.format_violations,
                              valid_queries=counts.valid_queries,
                              fallback_faults=counts.fallback_faults, correct=correct,
                              fallback_penalty=c.fallback_penalty)

        metrics = self.update(retriever, records, reward, agent=self.agent(retriever, stage))
        n = len(scored)
        summaries = {} if self.summariser is None else {
            f"summary/{k}": float(v) for k, v in self.summariser.stats.as_dict().items()}
        return metrics | {f"ur2/{k}": v / n for k, v in tally.items()} | summaries | {
            "ur2/stage": float(stage), "uncurated_pool": float(not self.pools.get(stage))}

    def verl_runs(self) -> list:
        """One verl run a stage (``recipes.ur2.verl``): on its pool (all the training questions
        while curation has not run or left it empty), prompted by task mixing, with UR²'s
        reward of the stage; with ``exploration``, REX-RAG's loop and trainer."""
        from functools import partial

        from advrag.engines.verl.runs import VerlRun
        from advrag.recipes.rex_rag.verl import verl_exploration
        from advrag.recipes.ur2.verl import require_summaries, stage_reward, stage_steps

        c, runs = self.config, []
        for stage, steps in stage_steps(c).items():
            records = self.pools.get(stage) or self.training_questions()
            reward = stage_reward(c, stage)
            runs.append(VerlRun(
                experiment=f"ur2-stage-{stage}", steps=steps, reward=reward,
                part=f"stage-{stage}", records=records,
                retrieval=[self.retrieval_prompt(r, stage) for r in records],
                search_prompt=self.search_prompt(), check_server=partial(require_summaries, c),
                **verl_exploration(c.exploration, reward, c.optim.seed)))
        return runs

    def retrieval_prompt(self, record: QARecord, stage: int) -> bool:
        """Whether ``record`` is asked to search in ``stage`` (``gets_retrieval_prompt``)."""
        return gets_retrieval_prompt(record, stage, task_mixing=self.config.task_mixing)

    def agent(self, retriever: Retriever, stage: int):
        """Task mixing's rollout in ``stage``: UR²'s search loop or a direct answer, per
        ``retrieval_prompt`` (REX-RAG's ``prober``, when it explores, probes the searching
        items)."""
        from advrag.agents.mixed import run_mixed_agent

        c, generator = self.config, self.generators["reasoner"]

        def run(records: Sequence[QARecord], prober=None) -> list[Trajectory]:
            return run_mixed_agent([r.question for r in records],
                                   [self.retrieval_prompt(r, stage) for r in records],
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
