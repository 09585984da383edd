"""One GAR update on scripted rollouts and judgments, with a trainer that records what it is
given (the GAR ablation and composition tests compare configs on it)."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from fakes import CORPUS, KeywordRetriever, ScriptedGenerator, cut_after_stop

from advrag.agents.prompts import exploration_pool
from advrag.core.advantages import grpo_advantages
from advrag.datasets.records import QARecord
from advrag.recipes.gar import GarConfig, GarRecipe
from advrag.recipes.gar.step import Slice, gar_step

RECORDS = [QARecord("q1", "What is the capital of France?", ["Paris"]),
           QARecord("q2", "Who wrote Hamlet?", ["William Shakespeare"])]
ROLLOUTS = [  # every question's group gets these four, in this order
    "<think> The capital of France is Paris, as every atlas of Europe says. So the answer is "
    "Paris. </think>\n<answer> Paris </answer>",
    "<think> The capital of France is Lyon, the second city on the Rhone. </think>\n"
    "<answer> Lyon </answer>",
    "<think> Hamlet is a play by William Shakespeare, the English playwright. </think>\n"
    "<answer> William Shakespeare </answer>",
    "<answer> Paris </answer>",  # no reasoning: no slice
]
JUDGMENTS = {  # keyed by a word of the judged slice
    "Lyon": "Analysis: Lyon is not the capital.\nVerdict: no\nRationale: wrong city.",
    "Paris": "Analysis: it names Paris.\nVerdict: yes\nRationale: right.",
    "playwright": "Analysis: it names the author.\nVerdict: yes\nRationale: right.",
}
REFERENCES = [Slice("q1", RECORDS[0].question, "France has Paris as its capital city.", None),
              Slice("q2", RECORDS[1].question, "Hamlet was written by William Shakespeare.", None)]


PROBED = {"What is the capital of France?": "<answer> Paris </answer>",
          "Who wrote Hamlet?": "<answer> William Shakespeare </answer>"}
"""What a probe (a prompt carrying an exploration prompt) answers, by its question: right,
with no new reasoning (its slices are its origin's)."""


class CyclingGenerator(ScriptedGenerator):
    """The reasoner: the i-th prompt of a call gets ``ROLLOUTS[i % 4]``; a REX-RAG probe's
    prompt (an exploration prompt inserted) gets its question's ``PROBED`` answer."""

    def __init__(self):
        super().__init__({})

    def generate(self, prompts, *, max_new_tokens, stop=()):
        self.calls.append(list(prompts))
        return [cut_after_stop(self.probed(p) or ROLLOUTS[i % len(ROLLOUTS)], stop)
                for i, p in enumerate(prompts)]

    @staticmethod
    def probed(prompt: str) -> str | None:
        if not any(explore in prompt for explore in exploration_pool(30)):
            return None
        return next(answer for question, answer in PROBED.items() if question in prompt)


def p_yes(prompts, outputs):
    """The scorer: P(yes) 0.8 after a written yes, 0.3 after anything else, none without one."""
    return [None if "Verdict:" not in o else 0.8 if "Verdict: yes" in o else 0.3 for o in outputs]


class RecordingTrainer:
    """Keeps each update's rewards and the GRPO advantages they give (and the trajectories and
    the policy correction, when there is one); learns nothing."""

    step = 0

    def __init__(self):
        self.policy = SimpleNamespace(model=SimpleNamespace(eval=lambda: None))
        self.updates: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.batches: list[tuple[list, object]] = []

    def update(self, trajectories, rewards, group_ids, correction=None):
        rewards = torch.as_tensor(rewards, dtype=torch.float32)
        self.updates.append((rewards, grpo_advantages(rewards, group_ids)))
        self.batches.append((list(trajectories), correction))
        return SimpleNamespace(metrics={})


def one_update(config: GarConfig) -> dict:
    """One ``gar_step`` (step 0: the same reference draw) wired as ``GarRecipe`` wires it."""
    recipe = GarRecipe(config)
    trainers = {agent: RecordingTrainer() for agent in recipe.agents}
    judge = ScriptedGenerator(JUDGMENTS, default="I cannot tell.")
    generators = {"reasoner": CyclingGenerator(), "discriminator": judge}
    scorer = None if config.discriminator == "none" else p_yes
    state = None if config.exploration is None else recipe.exploring_state(config.exploration)
    metrics = gar_step(trainers, generators, KeywordRetriever(CORPUS), RECORDS, config,
                       references=REFERENCES, scorer=scorer, count_tokens=lambda t: len(t.split()),
                       step=0, exploration=state)
    updates = {agent: t.updates[0] for agent, t in trainers.items()}
    return {"reasoner": updates["reasoner"], "discriminator": updates.get("discriminator"),
            "judged": sum(len(c) for c in judge.calls), "upstream": recipe.upstream(),
            "metrics": metrics, "batch": trainers["reasoner"].batches[0][0],
            "correction": trainers["reasoner"].batches[0][1], "state": state}


