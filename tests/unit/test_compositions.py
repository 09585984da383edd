"""Methods composed beyond the papers, each differing from the plain recipe exactly in the
composed part. REX-RAG's probes inside GAR's reasoner rollouts (``exploration: {kind: rex}``): probes
join the reasoner's groups, rewarded as GAR rewards any rollout, and their slices are judged;
the policy's rollouts, rewards and judgments are GAR's own. UR²'s curation in front
(``curate:``) of GAR and of ARR: the updates draw their questions from the curated sample,
scored by the recipe's own agent; the update on them is the recipe's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fakes import CORPUS, KeywordRetriever, ScriptedGenerator
from gar_fakes import RECORDS, CyclingGenerator, one_update

from advrag.agents.prompts import exploration_pool
from advrag.config import ConfigError, load_config
from advrag.datasets.records import QARecord
from advrag.recipes.arr import ArrConfig, ArrRecipe
from advrag.recipes.base import batch_for_step
from advrag.recipes.curated import CurateSection
from advrag.recipes.gar import GarConfig, GarRecipe
from advrag.recipes.grpo import GrpoConfig
from advrag.recipes.ur2 import UR2Config, UR2Recipe

GAR = Path(__file__).resolve().parents[2] / "configs" / "gar.yaml"


def gar(exploration: dict | None = None) -> GarConfig:
    return load_config(GAR, GarConfig, overrides={"exploration": exploration})


def rex(**settings) -> dict:
    """REX-RAG's probes on every wrong answer; no filter, no correction unless given."""
    return {"kind": "rex", "probe_prob": 1.0, "trajectory_filter": False, "correction": "none",
            **settings}


@pytest.fixture(scope="module")
def plain():
    return one_update(gar())


@pytest.fixture(scope="module")
def probed():
    return one_update(gar(rex()))


def test_probes_that_never_open_leave_gars_update_as_it_was(plain):
    composed = one_update(gar(rex(probe_prob=0.0)))
    for agent in ("reasoner", "discriminator"):
        for got, want in zip(composed[agent], plain[agent], strict=True):  # rewards, advantages
            assert torch.equal(got, want), agent
    assert len(composed["batch"]) == len(plain["batch"]) == 8
    assert composed["judged"] == plain["judged"]
    assert composed["metrics"]["rex/probes_opened"] == 0.0


def test_each_wrong_answer_is_probed_and_rewarded_as_gar_rewards_a_rollout(plain, probed):
    rewards, _ = probed["reasoner"]
    # the policy's eight rollouts keep GAR's rewards (λ1·R_m + λ2·R_s) ...
    assert torch.equal(rewards[:8], plain["reasoner"][0])
    # ... and the five wrong ones (q1: Lyon, the playwright; q2: Paris, Lyon, bare Paris) are
    # probed. A probe answers right (R_m 1) with no new reasoning, so its slice is its origin's:
    # Lyon → no (0), playwright → yes (1), Paris → yes (1), Lyon → 0, none for the bare answer
    assert rewards[8:].tolist() == [1.0, 2.0, 2.0, 1.0, 1.0]
    assert [t.probe.origin for t in probed["batch"][8:]] == [1, 2, 4, 5, 7]
    metrics = probed["metrics"]
    assert metrics["rex/probes_opened"] == 5.0 and metrics["rex/probes_kept"] == 5.0
    assert metrics["rex/probe_accuracy"] == 1.0 and metrics["rex/policy_accuracy"] == 0.375
    assert metrics["rex/probes_opened/untyped"] == metrics["rex/probes_correct/untyped"] == 5.0
    # the reasoner's reported reward and answer score stay the policy's
    for key in ("reasoner/reward_mean", "reasoner/answer_score", "reasoner/slice_score"):
        assert metrics[key] == plain["metrics"][key], key


def test_probes_join_their_questions_groups(probed):
    rewards, advantages = probed["reasoner"]
    # q1's group: the policy's [2, 0, 1, 1] and its probes [1, 2]; mean 7/6
    group = torch.tensor([2.0, 0.0, 1.0, 1.0, 1.0, 2.0])
    expected = (group - group.mean()) / (group.std() + 1e-6)
    q1_rows = [0, 1, 2, 3, 8, 9]
    assert torch.allclose(advantages[q1_rows], expected, atol=1e-5)


def test_the_judge_sees_the_probes_slices_beside_the_policys(plain, probed):
    # plain: 6 generated slices and 6 references; composed: the 4 probes with reasoning add 4,
    # and as many references are drawn, so the discriminator's batch is 10 + 10
    assert probed["metrics"]["slices/generated"] == 10.0
    assert probed["metrics"]["slices/reference"] == 10.0
    rewards, _ = probed["discriminator"]
    assert rewards.shape == (20,)
    # the policy's slices come first and are judged and rewarded as in plain GAR
    assert torch.equal(rewards[:6], plain["discriminator"][0][:6])


def test_the_keep_ratio_moves_and_travels_with_the_checkpoint(probed):
    # probe accuracy 1 pulls the ratio up, but never above the configured 0.12
    assert probed["state"].keep_ratio == 0.12
    recipe = GarRecipe(gar(rex()))
    recipe.restore_run_state({"keep_ratio": 0.05})
    assert recipe.run_state() == {"keep_ratio": 0.05}
    assert GarRecipe(gar()).run_state() == {}


def test_a_probing_episode_is_one_generation_longer():
    plain_shape, probing_shape = (GarRecipe(gar(e)).episode_shape(4) for e in (None, rex()))
    assert probing_shape.generations == plain_shape.generations + 1
    assert len(probing_shape.extra_env) == len(plain_shape.extra_env) + 1
    # 2 turns of its own after an answer in turn k ≤ 4 (k − 1 searches): k + 2 + 1 ≤ 7
    # generations (the plain 5 + 2), k − 1 + 2 ≤ 5 searches (the plain 4 + 1)
    own = GarRecipe(gar(rex(probe_turns=2))).episode_shape(4)
    assert (own.generations, own.searches) == (plain_shape.generations + 2,
                                               plain_shape.searches + 1)


def test_arr_refuses_probe_turns_its_dialogue_probes_do_not_have():
    with pytest.raises(ConfigError, match="probe_turns is for the Search-R1 loop"):
        load_config(GAR.with_name("arr.yaml"), ArrConfig,
                    overrides={"exploration": rex(probe_turns=2)})


def test_the_composed_step_filters_and_corrects_on_the_real_trainer(tiny_policy_dir):
    """GarRecipe with probes, its trainers the tiny policy's, its reasoner's rollouts the
    scripted ones (the tiny policy writes no answers to probe): q1's Paris and Lyon, q2's
    playwright and bare Paris; the two wrong ones are probed, the filter keeps the likelier,
    round(0.25 · 2 questions · 2) = 1, and a policy token's ratio is taken against the
    mixture: 1 / (1 − a) with a = 1/5."""
    config = load_config(GAR, GarConfig, overrides={
        "model": str(tiny_policy_dir), "lora": {"r": 4, "alpha": 8}, "cpu_bf16": False,
        "discriminator_sft": False, "group_size": 2, "max_turns": 1, "max_new_tokens": 8,
        "max_judge_tokens": 8, "rollout_backend": "hf", "optim": {"max_seq_len": 1024},
        "exploration": {"kind": "rex", "probe_prob": 1.0, "keep_ratio": 0.25}})
    recipe = GarRecipe(config)
    recipe.build(str(tiny_policy_dir))
    recipe.generators["reasoner"] = CyclingGenerator()
    metrics = recipe.step(KeywordRetriever(CORPUS), RECORDS)
    assert metrics["rex/probes_opened"] == 2.0 and metrics["rex/probes_kept"] == 1.0
    assert metrics["rex/probe_share"] == pytest.approx(1 / 5)
    assert metrics["rex/ratio_policy"] == pytest.approx(1.25, rel=1e-5)
    assert recipe.trainers["reasoner"].step == 1 and recipe.trainers["discriminator"].step == 1
    assert recipe.run_state()["keep_ratio"] <= 0.25


@pytest.mark.parametrize(("name", "model", "plain", "names"), [
    ("gar-rex.yaml", GarConfig, "gar.yaml", {"registered_reasoner", "registered_discriminator"}),
    ("arr-rex.yaml", ArrConfig, "arr.yaml", {"registered_reasoner", "registered_verifier",
                                             "warmup", "optim"})])  # ARR's: a longer budget
def test_the_shipped_probe_compositions_take_rex_rags_paper_settings(name, model, plain, names):
    composed = load_config(GAR.with_name(name), model).model_dump()
    base = load_config(GAR.with_name(plain), model).model_dump()
    assert {k for k, v in composed.items() if base[k] != v} == {"exploration", "checkpoint_dir",
                                                                  *names}
    assert composed["exploration"] == load_config(
        GAR.with_name("rex-rag.yaml"), GrpoConfig).model_dump()["exploration"]
    if "optim" in names:  # only the token budgets grew
        assert {**composed["optim"], "max_seq_len": 0} == {**base["optim"], "max_seq_len": 0}
        assert {**composed["warmup"]["sft"], "max_seq_len": 0} == {
            **base["warmup"]["sft"], "max_seq_len": 0}


def test_curation_in_front_changes_the_questions_and_nothing_else():
    curated = [RECORDS[1]] * 3  # the sample: q2 alone
    composed = GarRecipe(gar().model_copy(update={"curate": CurateSection()}))
    plain = GarRecipe(gar())
    assert composed.upstream() == ("curation", "discriminator_sft")
    assert plain.upstream() == ("discriminator_sft",)
    assert composed.batch(RECORDS, 0) == plain.batch(RECORDS, 0)  # no sample yet: all questions
    composed.use_curation(curated, stage1=[])
    for step in range(4):
        assert composed.batch(RECORDS, step) == batch_for_step(curated, step, 2, 0)
        assert plain.batch(RECORDS, step) == batch_for_step(RECORDS, step, 2, 0)


def test_curation_scores_with_each_recipes_own_agent():
    gar_settings = GarRecipe(gar()).curation_settings()
    ur2_settings = UR2Recipe(load_config(GAR.with_name("ur2.yaml"), UR2Config)).curation_settings()
    assert gar_settings["agent"] == "search-r1" and ur2_settings["agent"] == "ur2-mixed"
    assert "summary" in ur2_settings and "summary" not in gar_settings
    # GAR's attempt is the Search-R1 loop: one trajectory per question, in order
    attempt = GarRecipe(gar()).curation_agent(CyclingGenerator(), KeywordRetriever(CORPUS))
    trajectories = attempt(RECORDS)
    assert [t.answer for t in trajectories] == ["Paris", "Lyon"]


def test_the_richest_shipped_composition_adds_curation_to_gar_rex():
    richest = load_config(GAR.with_name("gar-rex-curated.yaml"), GarConfig).model_dump()
    composed = load_config(GAR.with_name("gar-rex.yaml"), GarConfig).model_dump()
    changed = {k for k, v in richest.items() if composed[k] != v}
    assert changed == {"curate", "checkpoint_dir", "registered_reasoner",
                       "registered_discriminator"}
    assert richest["curate"]["ratio"] == {"hard": 7.0, "medium": 2.0, "easy": 1.0}


def test_arr_with_curation_in_front_draws_from_the_sample_and_scores_by_its_dialogue():
    arr = load_config(GAR.with_name("arr.yaml"), ArrConfig)
    composed, plain = ArrRecipe(arr.model_copy(update={"curate": CurateSection()})), ArrRecipe(arr)
    assert composed.upstream() == ("curation",) and plain.upstream() == ()
    composed.use_curation([RECORDS[0]] * 3, stage1=[])
    size, seed = arr.questions_per_step, arr.optim.seed
    for step in range(3):
        assert composed.batch(RECORDS, step) == batch_for_step([RECORDS[0]] * 3, step, size, seed)
        assert plain.batch(RECORDS, step) == batch_for_step(RECORDS, step, size, seed)
    assert composed.curation_settings()["agent"] == "arr-dialogue"
    # one dialogue per question with one policy in both roles (three generate calls: the
    # reasoners answer at once, the verifier checks, the Final Predictor answers); its answer
    # is the Final Predictor's, the i-th prompt's scripted rollout: Paris, then Lyon
    generator = CyclingGenerator()
    finals = composed.curation_agent(generator, KeywordRetriever(CORPUS))(RECORDS)
    assert [t.answer for t in finals] == ["Paris", "Lyon"] and len(generator.calls) == 3


# --- REX-RAG's probes inside ARR's dialogues ----------------------------------------------

HAMLET = QARecord("h1", "Who wrote Hamlet?", ["William Shakespeare"])
ARR_SEARCH = "<think>Need the author.</think><search>Hamlet author</search>"
ARR_RIGHT = "<think>So Shakespeare.</think><answer>William Shakespeare</answer>"


def arr_agents():
    """Scripted ARR agents: the reasoner guesses wrong at once; reopened by an exploration
    prompt it searches, and after the verifier's feedback it answers right."""
    reasoner = ScriptedGenerator({"The rollout text of the reasoner and verifier is:":
                                  "<answer>William Shakespeare</answer>",
                                  "</feedback>\n\n": ARR_RIGHT,
                                  **dict.fromkeys(exploration_pool(30), ARR_SEARCH),
                                  "Question: Who wrote Hamlet?":
                                  "<think>A guess.</think><answer>Marlowe</answer>"})
    verifier = ScriptedGenerator({
        "</answer></information>": "<verify>Doc 1.</verify><final_answer>William Shakespeare"
                                   "</final_answer>",
        "<search>Hamlet author</search>": "<verify>Good.</verify><selected_doc>Doc 1"
                                          "</selected_doc><response>Shakespeare wrote it.</response>"})
    return {"reasoner": reasoner, "verifier": verifier}


def arr_step_on_tiny(tiny_policy_dir, exploration: dict | None):
    """One ArrRecipe update: the tiny policy's trainers, the scripted agents' dialogues."""
    config = load_config(GAR.with_name("arr.yaml"), ArrConfig, overrides={
        "model": str(tiny_policy_dir), "lora": {"r": 4, "alpha": 8}, "cpu_bf16": False,
        "group_size": 2, "max_turns": 4, "max_new_tokens": 32, "rollout_backend": "hf",
        "optim": {"max_seq_len": 4096}, "exploration": exploration})
    recipe = ArrRecipe(config)
    recipe.build(str(tiny_policy_dir))
    recipe.generators = arr_agents()
    metrics = recipe.step(KeywordRetriever(CORPUS), [HAMLET])
    weights = {agent: [p.detach().clone() for p in recipe.trainers[agent].policy.trainable_parameters()]
               for agent in recipe.agents}
    return recipe, metrics, weights


def test_arr_probes_that_never_open_leave_arrs_update_as_it_was(tiny_policy_dir):
    _, plain, plain_weights = arr_step_on_tiny(tiny_policy_dir, None)
    _, composed, weights = arr_step_on_tiny(tiny_policy_dir, rex(probe_prob=0.0))
    assert composed["rex/probes_opened"] == 0.0
    timeless = [k for k in plain if "time" not in k and "per_s" not in k]
    assert {k: composed[k] for k in timeless} == {k: plain[k] for k in timeless}
    for agent in ("reasoner", "verifier"):
        assert all(torch.equal(a, b) for a, b in zip(weights[agent], plain_weights[agent],
                                                     strict=True)), agent


def test_arr_probes_reopen_wrong_dialogues_and_the_filter_keeps_one(tiny_policy_dir):
    """Both dialogues answer "Marlowe": both are probed, and the probes answer right; the filter
    keeps round(0.5 · 1 question · 2) = 1, so a policy token's ratio is 1 / (1 − 1/3)."""
    recipe, metrics, _ = arr_step_on_tiny(tiny_policy_dir, {"kind": "rex", "probe_prob": 1.0,
                                                            "keep_ratio": 0.5})
    assert metrics["rex/probes_opened"] == 2.0 and metrics["rex/probes_kept"] == 1.0
    assert metrics["rex/probe_accuracy"] == 1.0 and metrics["rex/policy_accuracy"] == 0.0
    # both probes counted for the question's kind (a record without a type), kept or not
    assert metrics["rex/probes_opened/untyped"] == metrics["rex/probes_correct/untyped"] == 2.0
    assert metrics["rex/ratio_policy"] == pytest.approx(1.5, rel=1e-5)
    # what the probes did: each reopened a "Marlowe" (F1 0), searched once after the prompt
    # (the script's ARR_SEARCH) and answered right (F1 1)
    assert (metrics["rex/probe_f1"], metrics["rex/probe_origin_f1"]) == (1.0, 0.0)
    assert metrics["rex/probe_same_answer"] == metrics["rex/probe_unanswered"] == 0.0
    assert metrics["rex/probe_new_searches"] == 1.0
    assert metrics["reasoner/em"] == 0.0  # the policy's dialogues: probes are not counted
    assert recipe.trainers["reasoner"].step == 1 and recipe.trainers["verifier"].step == 1
    assert recipe.run_state() == {"keep_ratio": 0.5}  # probe accuracy 1, capped at 0.5
