"""Token budgets against the episodes they must hold: the bound's arithmetic on hand-built
episodes, the refusal's figure, and every shipped config checked on the world it trains on
with the SmolLM2 tokenizer (no shipped config cuts an episode of its own turn budget)."""

from __future__ import annotations

from pathlib import Path

import pytest

from advrag.agents.budgets import (
    Budget,
    EpisodeShape,
    episode_bound,
    longest_information,
    refusal,
    search_agent_shape,
)
from advrag.agents.prompts import FORCE_ANSWER_HINT, INVALID_ACTION_HINT
from advrag.agents.search_loop import run_search_agent
from advrag.common.types import Passage
from advrag.config import ConfigError, PipelineConfig, load_config
from advrag.datasets.records import QARecord
from advrag.datasets.world import WorldConfig, generate_world
from advrag.recipes import recipe_for

ROOT = Path(__file__).resolve().parents[2]


def words(text: str) -> int:
    """A token counter for hand-worked figures: one token per whitespace-separated word."""
    return len(text.split())


def test_the_bound_adds_prompt_generations_searches_and_hints():
    # The 2 longest passages (30 and 10 words) make "<information>Doc 1(Title: t1) x×30
    # Doc 2(Title: t3) x×9 x</information>": 3 + 30 + 3 + 10 = 46 words. 3 turns: 4
    # generations × 10, 3 searches, the forced-answer hint once; the prompt is 4 words.
    passages = [Passage("1", "t1\n" + " ".join(["x"] * 30)), Passage("2", "t2\na b"),
                Passage("3", "t3\n" + " ".join(["x"] * 10))]
    info = longest_information(words, passages, topk=2)
    assert info == 46
    bound = episode_bound(words, ["q w e r", "q w"], info, search_agent_shape(3), 10)
    assert (bound.prompt, bound.generations, bound.searches) == (4, 4, 3)
    assert bound.extra == words(FORCE_ANSWER_HINT)
    assert bound.tokens == 4 + 4 * 10 + 3 * 46 + words(FORCE_ANSWER_HINT)


def test_a_turn_without_an_action_can_add_more_than_a_short_search():
    """The invalid-action hint (30 words) replaces a block of 2 short passages (9 words)."""
    passages = [Passage("1", "t1\na"), Passage("2", "t2\nb")]
    assert longest_information(words, passages, topk=2) == len(INVALID_ACTION_HINT.split()) == 30


def test_a_budget_below_the_bound_is_refused_with_the_figure_and_the_setting():
    shape = EpisodeShape(generations=2, searches=1)
    bound = episode_bound(words, ["a b c"], 20, shape, 5)  # 3 + 2·5 + 1·20 = 33
    assert refusal(Budget("optim.max_seq_len", 33, "an RL episode", shape, 5), bound) is None
    why = refusal(Budget("optim.max_seq_len", 32, "an RL episode", shape, 5), bound)
    assert "optim.max_seq_len = 32" in why and "at least 33" in why
    assert "prompt 3 + 2 generations × 5 + 1 searches × 20 + hints 0 = 33 tokens" in why


class Scripted:
    """A generator whose every output is ``max_new_tokens`` characters that search."""

    def chat_prompt(self, user, system=None):
        return user

    def generate(self, prompts, *, max_new_tokens, stop=()):
        action = " <search> q </search>"
        return ["x" * (max_new_tokens - len(action)) + action for _ in prompts]


class Index:
    def __init__(self, passages):
        self.passages = passages

    def search(self, queries, k):
        return [sorted(self.passages, key=lambda p: -len(p.contents))[:k] for _ in queries]


def test_an_episode_that_uses_every_turn_in_full_reaches_the_bound_exactly():
    """Counted in characters (additive over segments): every generation at its budget, every
    search the longest block, the forced-answer hint — the episode is the bound."""
    passages = [Passage(str(i), f"t{i}\n" + "y" * (100 + 40 * i)) for i in range(5)]
    traj = run_search_agent(["what?"], Scripted(), Index(passages), max_turns=3, topk=2,
                            max_new_tokens=40, prompt=lambda q: q)[0]
    bound = episode_bound(len, ["what?"], longest_information(len, passages, 2),
                          search_agent_shape(3), 40)
    assert bound.information > len(INVALID_ACTION_HINT)
    assert len(traj.text) == bound.tokens


@pytest.fixture(scope="module")
def smollm2_counter():
    from transformers import AutoTokenizer

    from advrag.engines.local.generation import ChatPrompting
    from advrag.models.loading import resolve_model_dir

    tok = AutoTokenizer.from_pretrained(resolve_model_dir("smollm2"))
    return (lambda text: len(tok(text, add_special_tokens=False)["input_ids"]),
            ChatPrompting(tok).chat_prompt)


def world_data(world: WorldConfig) -> tuple[list[Passage], list[QARecord]]:
    generated = generate_world(world)
    return ([Passage(p["id"], p["contents"]) for p in generated.passages],
            generated.splits["train"])


TINY = {"gar-tiny.yaml"}  # a tiny model's config: checked at run time by the flows' tests
PIPELINES = ("pipeline.yaml", "pipeline-demo.yaml", "nightly.yaml", "nightly-gpu.yaml")


def recipe_configs() -> list[tuple[str, str]]:
    """(recipe config, the pipeline config whose world it trains on or '' for the default)."""
    from test_config import SHIPPED

    from advrag.recipes.base import RLRunConfig

    pairs = []
    for pipeline in PIPELINES:
        config = load_config(ROOT / "configs" / pipeline, PipelineConfig)
        pairs.append((Path(config.recipe).name, pipeline))
    shipped = [p for p, model in SHIPPED.items() if issubclass(model, RLRunConfig)]
    return sorted(set(pairs) | {(p, "") for p in shipped if p not in TINY})


@pytest.mark.parametrize(("path", "pipeline"), recipe_configs())
def test_every_shipped_config_holds_its_own_episodes(path, pipeline, smollm2_counter):
    count, chat_prompt = smollm2_counter
    world = (load_config(ROOT / "configs" / pipeline, PipelineConfig).data.world.world_config()
             if pipeline else WorldConfig(seed=13))
    recipe = recipe_for(ROOT / "configs" / path)
    passages, questions = world_data(world)
    recipe.check_token_budgets(count, chat_prompt, questions, passages)  # raises if not


@pytest.mark.parametrize(("path", "pipeline"), recipe_configs())
def test_every_shipped_config_can_search_each_hop_of_the_deepest_chain(path, pipeline):
    """The world's deepest chain is three hops: three searches, then the answer."""
    recipe = recipe_for(ROOT / "configs" / path)
    assert recipe.config.max_turns >= 4
    if recipe.config.evaluate is not None:
        assert recipe.config.evaluate.max_turns >= 4


def test_a_config_too_short_for_its_episodes_is_refused_naming_the_fix(smollm2_counter):
    count, chat_prompt = smollm2_counter
    recipe = recipe_for(ROOT / "configs/train.yaml", {"optim": {"max_seq_len": 1024}})
    passages, questions = world_data(WorldConfig(seed=13))
    with pytest.raises(ConfigError, match=r"optim.max_seq_len = 1024 cannot hold an RL episode "
                                          r"of 4 searches.*raise optim.max_seq_len to at least"):
        recipe.check_token_budgets(count, chat_prompt, questions, passages)


def test_a_discriminator_too_short_for_a_judgment_with_its_passages_is_refused(smollm2_counter):
    count, chat_prompt = smollm2_counter
    passages, questions = world_data(WorldConfig(seed=13))
    recipe = recipe_for(ROOT / "configs/gar.yaml", {"discriminator_optim": {"max_seq_len": 1024}})
    with pytest.raises(ConfigError, match=r"discriminator's max_seq_len = 1024 cannot hold a "
                                          r"judgment: prompt \d+ \+ evidence_tokens 768 \+ "
                                          r"max_slice_tokens 320 \+ max_judge_tokens 128 = \d+ "
                                          r"tokens; raise discriminator_optim.max_seq_len"):
        recipe.check_token_budgets(count, chat_prompt, questions, passages)
    lean = recipe_for(ROOT / "configs/gar.yaml", {"discriminator_optim": {"max_seq_len": 1024},
                                                 "evidence_tokens": 256})
    lean.check_token_budgets(count, chat_prompt, questions, passages)  # 256 + 320 + 128 + prompt


class CutsEveryOther(Scripted):
    """Reports every other completion as cut by ``max_new_tokens`` (as the engines do)."""

    def generate(self, prompts, *, max_new_tokens, stop=()):
        self.last_cut = [i % 2 == 0 for i in range(len(prompts))]
        return super().generate(prompts, max_new_tokens=max_new_tokens, stop=stop)


def test_the_search_loop_counts_the_turns_a_generation_budget_cut():
    passages = [Passage("1", "t\nyy")]
    trajs = run_search_agent(["a", "b"], CutsEveryOther(), Index(passages), max_turns=2, topk=1,
                             max_new_tokens=30, prompt=lambda q: q)
    # 2 turns + the forced answer, each call cutting item 0 and sparing item 1
    assert [t.cut_turns for t in trajs] == [3, 0]
    assert [t.search_ids for t in trajs] == [[("1",), ("1",)]] * 2


def test_a_generator_that_reports_no_cuts_counts_none():
    trajs = run_search_agent(["a"], Scripted(), Index([Passage("1", "t\nyy")]), max_turns=1,
                             topk=1, max_new_tokens=30, prompt=lambda q: q)
    assert trajs[0].cut_turns == 0


def test_the_tiny_config_holds_its_episodes_on_the_nightly_test_world(tiny_policy_dir):
    """configs/gar-tiny.yaml (the tests' nightly) with a tiny model's tokenizer, trained on
    world text as the nightly tests' model is, on configs/nightly-tiny.yaml's world."""
    from advrag.engines.local.generation import ChatPrompting
    from advrag.models.loading import load_tokenizer

    tok = load_tokenizer(str(tiny_policy_dir))
    world = load_config(ROOT / "configs/nightly-tiny.yaml", PipelineConfig).data.world
    passages, questions = world_data(world.world_config())
    recipe_for(ROOT / "configs/gar-tiny.yaml").check_token_budgets(
        lambda text: len(tok(text, add_special_tokens=False)["input_ids"]),
        ChatPrompting(tok).chat_prompt, questions, passages)
