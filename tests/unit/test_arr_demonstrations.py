"""Grounded ARR demonstration dialogues for the warm-up: exact messages, real layout, filtering."""

from __future__ import annotations

from fakes import KeywordRetriever, ScriptedGenerator

from advrag.agents.arr import run_arr_dialogue
from advrag.agents.arr_scoring import score_dialogue, split_actions
from advrag.agents.prompts import FORCE_ANSWER_HINT
from advrag.common.types import Passage
from advrag.curation.arr_demonstrations import (
    build_arr_demonstrations,
    demonstration_trajectories,
)
from advrag.datasets.records import QARecord

CORPUS = [
    Passage("p1", "Leissti Naperkram\nLeissti Naperkram is married to Kaheth Droube."),
    Passage("p2", "Kaheth Droube\nKaheth Droube works as a diplomat."),
    Passage("p3", "Breno\nBreno is a city on the river Aul."),
]
SPOUSE = {"subject": "Leissti Naperkram", "relation": "spouse", "object": "Kaheth Droube"}
PROFESSION = {"subject": "Kaheth Droube", "relation": "profession", "object": "diplomat"}
TWO_HOP = QARecord("q1", "What was the profession of the spouse of Leissti Naperkram?",
                   ["diplomat"], {"chain": [SPOUSE, PROFESSION]})
ONE_HOP = QARecord("q2", "Who is the spouse of Leissti Naperkram?", ["Kaheth Droube"],
                   {"chain": [SPOUSE]})
UNGROUNDED = QARecord("q3", "Where was Kaheth Droube born?", ["Lumo"], {"chain": [
    {"subject": "Kaheth Droube", "relation": "born_in", "object": "Lumo"}]})
NO_CHAIN = QARecord("q4", "Name a city.", ["Breno"], {})


def chat(user: str) -> str:
    return ScriptedGenerator({}).chat_prompt(user)


def policy_texts(trajectory) -> list[str]:
    return [s.text for s in trajectory.segments if s.source == "policy"]


def test_two_hop_demonstration_messages_and_layout():
    (d,) = build_arr_demonstrations([TWO_HOP], KeywordRetriever(CORPUS), chat, topk=2, max_turns=3)
    assert policy_texts(d.reasoner) == [
        "<think> I need the spouse of Leissti Naperkram. </think>\n"
        "<search> Leissti Naperkram spouse </search>",
        "<verify> The feedback gives the spouse of Leissti Naperkram: Kaheth Droube. </verify>\n"
        "<think> The spouse of Leissti Naperkram is Kaheth Droube. I need the profession of "
        "Kaheth Droube. </think>\n<search> Kaheth Droube profession </search>",
        "<verify> The feedback gives the profession of Kaheth Droube: diplomat. </verify>\n"
        "<think> The spouse of Leissti Naperkram is Kaheth Droube. The profession of Kaheth "
        "Droube is diplomat. </think>\n<answer> diplomat </answer>",
    ]
    # hop 2's query ranks p1 first (it names Kaheth Droube too): the verifier picks Doc 2
    assert [s.selected for s in d.steps] == [0, 1]
    assert policy_texts(d.verifier) == [
        "<verify> The query asks for the spouse of Leissti Naperkram; Doc 1 answers it. </verify>\n"
        "<selected_doc> Doc 1 </selected_doc>\n"
        "<response> The spouse of Leissti Naperkram is Kaheth Droube. </response>",
        "<verify> The query asks for the profession of Kaheth Droube; Doc 2 answers it. </verify>\n"
        "<selected_doc> Doc 2 </selected_doc>\n"
        "<response> The profession of Kaheth Droube is diplomat. </response>",
        "<verify> The evidence supports the answer diplomat. </verify>\n"
        "<final_answer> diplomat </final_answer>",
    ]
    assert policy_texts(d.final) == ["<answer> diplomat </answer>"]
    # two hops used both search turns: the last turn's forced-answer hint precedes the answer
    assert FORCE_ANSWER_HINT in [s.text for s in d.reasoner.segments if s.source == "env"]
    assert d.reasoner.retrieved_ids == ["p1", "p2"]  # the selected documents reached the reasoner


def test_demonstrations_have_the_layout_of_a_rollout_with_the_same_messages():
    (demo,) = build_arr_demonstrations([ONE_HOP], KeywordRetriever(CORPUS), chat, topk=2,
                                       max_turns=2)
    reasoner = ScriptedGenerator({"The rollout text": policy_texts(demo.final)[0],
                                  "</feedback>\n\n": policy_texts(demo.reasoner)[1],
                                  "Question:": policy_texts(demo.reasoner)[0]})
    verifier = ScriptedGenerator({"</answer></information>": policy_texts(demo.verifier)[1],
                                  "Question:": policy_texts(demo.verifier)[0]})
    (rollout,) = run_arr_dialogue([ONE_HOP.question], reasoner, verifier,
                                  KeywordRetriever(CORPUS), max_turns=2, topk=2)
    for role in ("reasoner", "verifier", "final"):
        assert getattr(demo, role).segments == getattr(rollout, role).segments, role


def test_only_grounded_chains_within_the_turn_budget_are_kept():
    retriever = KeywordRetriever(CORPUS)
    records = [UNGROUNDED, NO_CHAIN, TWO_HOP, ONE_HOP]
    kept = build_arr_demonstrations(records, retriever, chat, topk=2, max_turns=3)
    assert [d.question for d in kept] == [NO_CHAIN.question, TWO_HOP.question, ONE_HOP.question]
    # n hops need n + 1 reasoner turns (n searches, then the answer); no chain is one search
    short = build_arr_demonstrations(records, retriever, chat, topk=2, max_turns=2)
    assert [d.question for d in short] == [NO_CHAIN.question, ONE_HOP.question]
    assert build_arr_demonstrations(records, retriever, chat, topk=2, max_turns=1) == []
    assert len(build_arr_demonstrations(records, retriever, chat, topk=2, max_turns=3,
                                        limit=1)) == 1
    trajectories = demonstration_trajectories(kept)
    assert len(trajectories) == 9 and trajectories[4] is kept[1].verifier


def test_a_question_without_a_chain_searches_itself_for_its_first_answer():
    (d,) = build_arr_demonstrations([NO_CHAIN], KeywordRetriever(CORPUS), chat, topk=2,
                                    max_turns=2)
    assert policy_texts(d.reasoner) == [
        "<think> I need the answer to the question. </think>\n<search> Name a city. </search>",
        "<verify> The feedback gives the answer to the question: Breno. </verify>\n"
        "<think> The answer to the question is Breno. </think>\n<answer> Breno </answer>",
    ]
    assert policy_texts(d.verifier)[0] == (
        "<verify> The query asks for the answer to the question; Doc 1 answers it. </verify>\n"
        "<selected_doc> Doc 1 </selected_doc>\n"
        "<response> The answer to the question is Breno. </response>")
    assert d.reasoner.retrieved_ids == ["p3"]
    elsewhere = QARecord("q5", "Name a city.", ["Lumo"], {})  # no passage holds the answer
    assert build_arr_demonstrations([elsewhere], KeywordRetriever(CORPUS), chat, topk=2,
                                    max_turns=2) == []


def test_demonstrations_earn_full_reward_and_credit_the_grounded_response():
    (d,) = build_arr_demonstrations([TWO_HOP], KeywordRetriever(CORPUS), chat, topk=2, max_turns=3)
    s = score_dialogue(d, TWO_HOP.golden_answers, lam=0.5, n_bins=10, format_penalty=0.2)
    assert (s.reward_reasoner, s.reward_verifier, s.f1_final) == (1.0, 1.0, 1.0)
    critiques = split_actions(d.verifier, ["verify", "response"]).actions
    assert [(a.turn, a.name) for a in critiques] == [
        (0, "verify"), (0, "response"), (1, "verify"), (1, "response"), (2, "verify")]
    assert "diplomat" in critiques[3].text  # the response of the hop whose documents hold the gold


def test_a_planned_dialogue_states_the_questions_facts_before_its_first_search_only():
    """With ``plan`` the first thought names both facts (the second by what the first finds),
    as the single agent's demonstrations do; every later message is the unplanned one; a
    question without a chain states no plan."""
    retriever = KeywordRetriever(CORPUS)
    (plain,) = build_arr_demonstrations([TWO_HOP], retriever, chat, topk=2, max_turns=3)
    (planned,) = build_arr_demonstrations([TWO_HOP], retriever, chat, topk=2, max_turns=3,
                                          plan=True)
    first, *later = policy_texts(planned.reasoner)
    assert first == ("<think> Two facts: the spouse of Leissti Naperkram, then the profession of "
                     "that person. I need the spouse of Leissti Naperkram. </think>\n"
                     "<search> Leissti Naperkram spouse </search>")
    assert later == policy_texts(plain.reasoner)[1:]
    assert policy_texts(planned.verifier) == policy_texts(plain.verifier)
    (own,) = build_arr_demonstrations([NO_CHAIN], retriever, chat, topk=2, max_turns=2, plan=True)
    (own_plain,) = build_arr_demonstrations([NO_CHAIN], retriever, chat, topk=2, max_turns=2)
    assert policy_texts(own.reasoner) == policy_texts(own_plain.reasoner)


def test_the_recipe_plans_its_warm_up_when_asked_and_a_planned_warm_up_is_told_apart():
    """``warmup_plan`` reaches the dialogues, and a planned warm-up carries ``plan`` in its
    settings, so an unplanned one cached under the same directory is refused, not reused; an
    unplanned warm-up's settings are those made before the setting existed."""
    from advrag.recipes.arr import ArrConfig, ArrRecipe

    plain, planned = (ArrRecipe(ArrConfig(warmup_plan=p)) for p in (False, True))
    reasoner, _verifier, _final = planned.demonstrations([TWO_HOP], KeywordRetriever(CORPUS), chat)
    assert "Two facts: the spouse of Leissti Naperkram" in policy_texts(reasoner)[0]
    assert "plan" not in plain.warmup_settings()
    assert planned.warmup_settings() == plain.warmup_settings() | {"plan": True}
