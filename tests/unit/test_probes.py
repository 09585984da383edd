"""REX-RAG's probes in the search loop, against scripted doubles."""

from __future__ import annotations

import random

import pytest
from fakes import CORPUS, KeywordRetriever, ScriptedGenerator

from advrag.agents.mixed import run_mixed_agent
from advrag.agents.probes import Prober, open_probe, without_answer
from advrag.agents.prompts import FORCE_ANSWER_HINT, exploration_pool, probe_observation
from advrag.agents.search_loop import run_search_agent
from advrag.agents.types import ProbeOrigin, Trajectory

HAMLET, FRANCE = "Who wrote Hamlet?", "What is the capital of France?"
DOUBT = "Let me check that again by searching."


def _prober(probe_prob: float = 1.0, wrong=lambda i, answer: answer != "William Shakespeare",
            pool=(DOUBT,)) -> Prober:
    return Prober(list(pool), probe_prob, wrong, random.Random(0))


def _guessing_generator() -> ScriptedGenerator:
    """Guesses Hamlet's author wrong at once; after the doubt prompt it searches, then answers."""
    return ScriptedGenerator({
        "Doc 1(Title: Hamlet)": "<think>Found it.</think><answer>William Shakespeare</answer>",
        DOUBT: "<search>Hamlet author</search>",
        f"Question: {HAMLET}": "<think>A guess.</think><answer>Marlowe</answer>",
        f"Question: {FRANCE}": "<answer>Paris</answer>",
    })


def test_without_answer_cuts_the_answer_action_and_what_follows():
    assert without_answer("<think>A guess.</think> <answer>Marlowe</answer> done") == \
        "<think>A guess.</think>"
    assert without_answer("<answer>Marlowe</answer>") == ""
    assert without_answer("<search>q</search>") == "<search>q</search>"


def test_a_wrong_answer_opens_a_probe_that_searches_with_the_turns_left():
    generator = _guessing_generator()
    trajs = run_search_agent([HAMLET, FRANCE], generator, KeywordRetriever(CORPUS), max_turns=3,
                             prober=_prober(wrong=lambda i, answer: i == 0))
    assert len(trajs) == 3  # two policy trajectories, then the probe
    hamlet, france, probe = trajs
    assert hamlet.answer == "Marlowe" and hamlet.probe is None and france.probe is None
    assert probe.probe == ProbeOrigin(origin=0, segment=2, prompt=0)
    assert [s.source for s in probe.segments] == ["prompt", "policy", "probe", "policy", "env",
                                                   "policy"]
    assert probe.segments[1].text == "<think>A guess.</think>"  # the answer removed
    assert probe.segments[2].text == probe_observation(DOUBT)
    assert "Marlowe" not in probe.text
    assert probe.answer == "William Shakespeare"
    assert (probe.n_searches, probe.n_turns) == (1, 3)  # the original's turn, then two more
    assert probe.queries == ["Hamlet author"]


def test_no_probe_from_a_probe_from_full_marks_or_from_the_forced_last_turn():
    # the probe answers wrong again (Marlowe) and is not probed a second time
    stubborn = ScriptedGenerator({f"Question: {HAMLET}": "<answer>Marlowe</answer>"})
    trajs = run_search_agent([HAMLET], stubborn, KeywordRetriever(CORPUS), max_turns=3,
                             prober=_prober())
    assert len(trajs) == 2 and trajs[1].answer == "Marlowe"
    # full marks are never probed
    right = ScriptedGenerator({f"Question: {HAMLET}": "<answer>William Shakespeare</answer>"})
    assert len(run_search_agent([HAMLET], right, KeywordRetriever(CORPUS), prober=_prober())) == 1
    # an answer given only under the forced last turn is not probed
    searcher = ScriptedGenerator({FORCE_ANSWER_HINT: "<answer>Marlowe</answer>",
                                  f"Question: {HAMLET}": "<search>Hamlet</search>"})
    trajs = run_search_agent([HAMLET], searcher, KeywordRetriever(CORPUS), max_turns=2,
                             prober=_prober())
    assert len(trajs) == 1 and trajs[0].answer == "Marlowe"


def test_probe_prob_draws_and_zero_never_probes():
    generator = _guessing_generator()
    none = run_search_agent([HAMLET] * 8, generator, KeywordRetriever(CORPUS), max_turns=2,
                            prober=_prober(probe_prob=0.0))
    assert len(none) == 8
    drawn = run_search_agent([HAMLET] * 200, generator, KeywordRetriever(CORPUS), max_turns=2,
                             prober=_prober(probe_prob=0.2))
    assert 20 <= len(drawn) - 200 <= 60  # Binomial(200, 0.2): mean 40, sd 5.7
    assert sorted({t.probe.origin for t in drawn[200:]}) == sorted(t.probe.origin for t in drawn[200:])


def test_a_probe_from_the_last_regular_turn_gets_the_forced_answer_only():
    generator = ScriptedGenerator({
        DOUBT: "<answer>Marlowe</answer>",
        "Doc 1(Title: Hamlet)": "<answer>Marlowe</answer>",
        f"Question: {HAMLET}": "<search>Hamlet author</search>"})
    policy, probe = run_search_agent([HAMLET], generator, KeywordRetriever(CORPUS), max_turns=2,
                                     prober=_prober())
    assert probe.probe.origin == 0
    assert [s.source for s in probe.segments][-3:] == ["probe", "env", "policy"]
    assert probe.segments[-2].text == FORCE_ANSWER_HINT


def _late_guesser() -> ScriptedGenerator:
    """Searches the wrong page, guesses wrong in the last regular turn (of 2); after the doubt
    prompt it searches Hamlet's page, and answers right once it has read it."""
    return ScriptedGenerator({
        "Doc 1(Title: Hamlet)": "<answer>William Shakespeare</answer>",
        DOUBT: "<search>Hamlet author</search>",
        "Doc 1(Title: Everest)": "<answer>Marlowe</answer>",
        f"Question: {HAMLET}": "<search>Everest</search>"})


@pytest.mark.parametrize("probe_turns, answer, turns, searches", [
    (None, None, 3, 1),  # the origin's turns: none left, only the forced answer (it searches)
    (1, "William Shakespeare", 4, 2),  # one search of its own, then the forced answer
    (2, "William Shakespeare", 4, 2),  # search, answer: its second turn is not needed
])
def test_probe_turns_give_a_late_probe_turns_of_its_own(probe_turns, answer, turns, searches):
    prober = Prober([DOUBT], 1.0, lambda i, a: a != "William Shakespeare", random.Random(0),
                    probe_turns)
    policy, probe = run_search_agent([HAMLET], _late_guesser(), KeywordRetriever(CORPUS),
                                     max_turns=2, prober=prober)
    assert (policy.answer, policy.n_turns) == ("Marlowe", 2)
    assert (probe.answer, probe.n_turns, probe.n_searches) == (answer, turns, searches)
    assert (FORCE_ANSWER_HINT in probe.text) == (probe_turns != 2)


def test_a_probe_needs_a_turn_when_it_is_given_its_own():
    with pytest.raises(ValueError, match="at least one turn"):
        Prober([DOUBT], 1.0, lambda i, a: True, random.Random(0), probe_turns=0)


def test_mixed_agent_maps_probes_back_to_its_questions():
    generator = _guessing_generator()
    trajs = run_mixed_agent([FRANCE, HAMLET], [False, True], generator, KeywordRetriever(CORPUS),
                            max_new_tokens=32, max_turns=3,
                            prober=_prober(wrong=lambda i, answer: answer == "Marlowe"))
    assert len(trajs) == 3 and trajs[2].probe.origin == 1  # HAMLET is question 1


def test_open_probe_needs_an_answer_turn_and_the_pool_named_sizes():
    traj = Trajectory()
    traj.add("question", "prompt")
    with pytest.raises(ValueError, match="right after the policy's answer turn"):
        open_probe(traj, origin=0, prompt_index=0, prompt=DOUBT)
    assert [len(exploration_pool(n)) for n in (5, 15, 30)] == [5, 15, 30]
    with pytest.raises(ValueError, match="probability"):
        _prober(probe_prob=1.5)
