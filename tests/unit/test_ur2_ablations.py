"""Every UR² ablation config changes exactly the part its paper row removes: its settings differ
from configs/ur2.yaml's in that field only, and one update (same seed, same questions, scripted
policy and summariser) differs from the main config's there and nowhere else."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import CORPUS, KeywordRetriever
from ur2_fakes import QuestionScript, dry_step, ur2_recipe

from advrag.agents.prompts import FALLBACK_HINT
from advrag.config import load_config
from advrag.datasets.records import QARecord
from advrag.recipes.base import batch_for_step
from advrag.recipes.ur2 import UR2Config
from advrag.retrieval.summary import SUMMARY_FALLBACK_MESSAGE

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TALLER = "Mount Krairto rises to 3,797 metres and Mount Kanou to 7,798 metres. Which is taller?"
HAMLET = "Who wrote Hamlet?"
PARIS = "What is the capital of France?"
COMPARE = "is 3797 larger than 7798"  # a query for reasoning, not facts: the summariser falls back
SCRIPT = {TALLER: (COMPARE, "Mount Kanou"), HAMLET: ("Hamlet author", "William Shakespeare"),
          PARIS: ("capital of France", "Paris")}
FILTERED_REASONING = QARecord("r1", TALLER, ["Mount Kanou"],
                              {"needs_retrieval": False, "level": None})
FILTERED_QA = QARecord("q1", PARIS, ["Paris"], {"level": None})
HARD_QA = QARecord("q2", HAMLET, ["William Shakespeare"], {"level": "hard"})
EASY_REASONING = QARecord("r2", TALLER, ["Mount Kanou"], {"needs_retrieval": False,
                                                          "level": "easy"})
ALL = [FILTERED_QA, FILTERED_REASONING, HARD_QA, EASY_REASONING]


def config(name: str) -> UR2Config:
    return load_config(CONFIGS / name, UR2Config)


def changed(base: dict, other: dict, prefix: str = "") -> set[str]:
    """Dotted keys whose values differ between two config dumps."""
    keys = set(base) | set(other)
    out = set()
    for key in keys:
        a, b = base.get(key), other.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out |= changed(a, b, f"{prefix}{key}.")
        elif a != b:
            out.add(f"{prefix}{key}")
    return out


@pytest.mark.parametrize(("name", "field"), [
    ("ur2-no-stage1.yaml", "stage1_steps"),
    ("ur2-no-fallback-penalty.yaml", "fallback_penalty"),
    ("ur2-no-curation.yaml", "curate"),
    ("ur2-no-mixing.yaml", "task_mixing"),
    ("ur2-raw-docs.yaml", "summary.summarise"),
])
def test_each_ablation_changes_one_setting_of_the_main_config(name, field):
    base, ablation = config("ur2.yaml").model_dump(), config(name).model_dump()
    assert changed(base, ablation) - {"checkpoint_dir", "registered_model"} == {field}


def test_the_main_config_is_the_papers_setting():
    c = config("ur2.yaml")
    assert c.summary.summarise and c.fallback_penalty == 0.5 and c.stage1_steps == 10
    assert c.task_mixing and c.curate is not None and c.optim.advantage == "reinforce_pp"


def step(name: str, tmp_path: Path, records, *, step_index: int = 0, curated=True):
    """One dry update of config ``name`` on ``records`` (pools: the fixed curation below)."""
    policy = QuestionScript(SCRIPT)
    recipe = ur2_recipe(config(name), policy, tmp_path=tmp_path / name,
                        reasoning_queries=[COMPARE], step=step_index)
    if curated and "curation" in recipe.upstream():
        recipe.use_curation(curated=[HARD_QA, EASY_REASONING],
                            stage1=[FILTERED_QA, FILTERED_REASONING])
    return recipe, policy, dry_step(recipe, KeywordRetriever(CORPUS), records)


def texts(done) -> list[str]:
    return [t.text for t in done.trajectories]


def test_without_stage1_the_first_update_pays_stage_two(tmp_path):
    base, _, main = step("ur2.yaml", tmp_path, [HARD_QA])
    ablation, _, no_stage1 = step("ur2-no-stage1.yaml", tmp_path, [HARD_QA])
    assert (main.metrics["ur2/stage"], no_stage1.metrics["ur2/stage"]) == (1.0, 2.0)
    assert texts(main) == texts(no_stage1)  # same rollouts
    # one clean valid query, a correct answer: stage 1 pays 1 + 3, stage 2 pays 2 + 1
    assert main.rewards == [4.0] * 4 and no_stage1.rewards == [3.0] * 4
    # and the stage decides the pool: the filtered reasoning item vs the curated sample
    assert base.batch(ALL, 0) == [FILTERED_REASONING]
    assert sorted(r.id for r in ablation.batch(ALL, 0)) == ["q2", "r2"]
    # after the paper's 10 stage-1 updates the two train alike
    _, _, late_main = step("ur2.yaml", tmp_path / "late", [HARD_QA], step_index=10)
    _, _, late_ablation = step("ur2-no-stage1.yaml", tmp_path / "late", [HARD_QA], step_index=10)
    assert late_main.rewards == late_ablation.rewards == [3.0] * 4


def test_without_the_fallback_penalty_a_fallback_costs_nothing(tmp_path):
    _, _, main = step("ur2.yaml", tmp_path, [FILTERED_REASONING, HARD_QA])
    _, _, free = step("ur2-no-fallback-penalty.yaml", tmp_path, [FILTERED_REASONING, HARD_QA])
    assert texts(main) == texts(free)
    fallbacks = [t.fallbacks for t in main.trajectories]
    assert fallbacks == [1] * 4 + [0] * 4  # the reasoning query falls back, the fact query not
    # stage 1, reasoning item: +1 clean, 0 valid queries (its one fell back), −0.5 per fallback
    assert main.rewards == [0.5] * 4 + [4.0] * 4
    assert free.rewards == [1.0] * 4 + [4.0] * 4
    assert main.metrics["ur2/fallbacks"] == free.metrics["ur2/fallbacks"] == 0.5


def test_without_curation_both_stages_draw_from_every_question(tmp_path):
    base, _, main = step("ur2.yaml", tmp_path, [HARD_QA])
    ablation, _, uncurated = step("ur2-no-curation.yaml", tmp_path, [HARD_QA])
    assert base.upstream() == ("curation",) and ablation.upstream() == ()
    assert base.batch(ALL, 0) == [FILTERED_REASONING]
    assert ablation.batch(ALL, 0) == batch_for_step(ALL, 0, 2, ablation.config.optim.seed)
    assert (main.metrics["uncurated_pool"], uncurated.metrics["uncurated_pool"]) == (0.0, 1.0)
    assert texts(main) == texts(uncurated) and main.rewards == uncurated.rewards


def test_without_task_mixing_the_easy_reasoning_item_searches_too(tmp_path):
    _, policy, main = step("ur2.yaml", tmp_path, [EASY_REASONING, HARD_QA], step_index=10)
    _, unmixed_policy, unmixed = step("ur2-no-mixing.yaml", tmp_path, [EASY_REASONING, HARD_QA],
                                      step_index=10)
    assert (main.metrics["ur2/retrieval_prompts"], unmixed.metrics["ur2/retrieval_prompts"]) == \
        (0.5, 1.0)
    # the easy reasoning item: answered directly (2 + 1) vs a search that falls back
    # (2 + 1 − 0.5); the QA item is the same in both
    assert main.rewards == [3.0] * 4 + [3.0] * 4
    assert unmixed.rewards == [2.5] * 4 + [3.0] * 4
    assert texts(main)[4:] == texts(unmixed)[4:]
    assert [t.n_searches for t in main.trajectories[:4]] == [0] * 4
    assert [t.n_searches for t in unmixed.trajectories[:4]] == [1] * 4
    # in stage 1 both ask every item to search: identical updates
    _, _, early = step("ur2.yaml", tmp_path / "early", [EASY_REASONING, HARD_QA])
    _, _, early_unmixed = step("ur2-no-mixing.yaml", tmp_path / "early",
                               [EASY_REASONING, HARD_QA])
    assert texts(early) == texts(early_unmixed) and early.rewards == early_unmixed.rewards


def test_raw_documents_replace_the_summaries_and_nothing_falls_back(tmp_path):
    _, _, main = step("ur2.yaml", tmp_path, [FILTERED_REASONING, HARD_QA])
    _, _, raw = step("ur2-raw-docs.yaml", tmp_path, [FILTERED_REASONING, HARD_QA])
    env = [[s.text for s in t.segments if s.source == "env"] for t in main.trajectories]
    raw_env = [[s.text for s in t.segments if s.source == "env"] for t in raw.trajectories]
    assert SUMMARY_FALLBACK_MESSAGE in env[0][0] and env[0][1] == FALLBACK_HINT
    assert "The fact asked for." in env[4][0]
    assert all(len(e) == 1 and "Doc 1(Title:" in e[0] for e in raw_env)
    # the same prompts and actions; only what the searches return, and the penalty, differ
    assert [t.segments[0].text for t in main.trajectories] == \
        [t.segments[0].text for t in raw.trajectories]
    assert [t.queries for t in main.trajectories] == [t.queries for t in raw.trajectories]
    assert main.rewards == [0.5] * 4 + [4.0] * 4 and raw.rewards == [4.0] * 4 + [4.0] * 4
    assert "summary/fallbacks" in main.metrics and "summary/fallbacks" not in raw.metrics
