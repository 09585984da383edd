"""ARR reasoner ⇄ verifier dialogue: structure, sources, batching, fallbacks."""

from __future__ import annotations

from fakes import CORPUS, KeywordRetriever, ScriptedGenerator

from advrag.agents.arr import (
    REASONER_STOP,
    VERIFIER_FINAL_STOP,
    VERIFIER_STOP,
    render_dialogue,
    run_arr_dialogue,
)
from advrag.agents.prompts import (
    FORCE_ANSWER_HINT,
    INVALID_ACTION_HINT,
    NO_FEEDBACK_TEXT,
    arr_final_predictor_prompt,
    arr_reasoner_prompt,
    arr_verifier_prompt,
)
from advrag.common.types import format_doc

HAMLET, FRANCE, PYTHON = (
    "Who wrote Hamlet?",
    "What is the capital of France?",
    "Who created Python?",
)
FINAL_KEY = "The rollout text of the reasoner and verifier is:"

R_SEARCH = "<think>Need the author.</think><search>Hamlet author</search>"
R_ANSWER = "<verify>Doc 1 answers it.</verify><think>So Shakespeare.</think><answer>William Shakespeare</answer>"
V_SELECT = (
    "<verify>Good query.</verify><selected_doc>Doc 1</selected_doc>"
    "<response>Hamlet was written by William Shakespeare.</response>"
)
V_FINAL = "<verify>Supported by Doc 1.</verify><final_answer>William Shakespeare</final_answer>"


def _sources(traj):
    return [s.source for s in traj.segments]


def _texts(traj, source):
    return [s.text for s in traj.segments if s.source == source]


def _hamlet_agents(verifier_select: str = V_SELECT):
    reasoner = ScriptedGenerator(
        {
            FINAL_KEY: "<answer>Shakespeare</answer>",
            "</feedback>\n\n": R_ANSWER,
            f"Question: {HAMLET}": R_SEARCH,
        }
    )
    verifier = ScriptedGenerator(
        {"</answer></information>": V_FINAL, "<search>Hamlet author</search>": verifier_select}
    )
    return reasoner, verifier


def test_single_dialogue_structure_and_sources():
    reasoner, verifier = _hamlet_agents()
    retriever = KeywordRetriever(CORPUS)
    (d,) = run_arr_dialogue([HAMLET], reasoner, verifier, retriever)

    assert (d.reasoner_answer, d.verifier_answer, d.final_answer) == (
        "William Shakespeare",
        "William Shakespeare",
        "Shakespeare",
    )
    # reasoner: prompt, search, <feedback>, doc line, verifier response, </feedback>, answer
    assert _sources(d.reasoner) == ["prompt", "policy", "env", "env", "peer", "env", "policy"]
    assert d.reasoner.segments[0].text == reasoner.chat_prompt(arr_reasoner_prompt(HAMLET))
    assert _texts(d.reasoner, "policy") == [R_SEARCH, R_ANSWER]
    assert _texts(d.reasoner, "peer") == ["Hamlet was written by William Shakespeare."]
    assert d.reasoner.segments[3].text == format_doc(1, CORPUS[0]) + "\n"
    # verifier: prompt, <information> + reasoner text + docs, its step, then the answer check
    assert _sources(d.verifier) == [
        "prompt",
        "env",
        "peer",
        "env",
        "policy",
        "env",
        "peer",
        "env",
        "policy",
    ]
    assert d.verifier.segments[0].text == verifier.chat_prompt(arr_verifier_prompt(HAMLET))
    assert _texts(d.verifier, "peer") == [R_SEARCH, R_ANSWER]
    assert _texts(d.verifier, "policy") == [V_SELECT, V_FINAL]
    assert "Doc 3(Title: " in d.verifier.segments[3].text  # the verifier sees all top-3 docs

    (step,) = d.steps
    assert (step.turn, step.query, step.selected, step.verifier_output) == (
        0,
        "Hamlet author",
        0,
        V_SELECT,
    )
    assert step.doc_ids == ["p1", "p2", "p3"] and step.doc_texts[0] == CORPUS[0].contents
    assert d.reasoner.retrieved_ids == ["p1"]  # only the forwarded document reached the reasoner
    assert d.verifier.retrieved_ids == ["p1", "p2", "p3"]
    assert (d.reasoner.n_searches, d.reasoner.n_turns, d.verifier.n_turns) == (1, 2, 2)
    assert d.format_errors == {"reasoner": 0, "verifier": 0, "final": 0}


def test_final_predictor_sees_the_whole_dialogue():
    reasoner, verifier = _hamlet_agents()
    (d,) = run_arr_dialogue([HAMLET], reasoner, verifier, KeywordRetriever(CORPUS))
    assert [s for s, _ in d.messages] == [
        "Reasoner",
        "Search results",
        "Verifier",
        "Selected document",
        "Reasoner",
        "Verifier",
    ]
    final_prompt = reasoner.calls[-1][0]  # the final predictor runs on the reasoner generator
    expected = reasoner.chat_prompt(arr_final_predictor_prompt(HAMLET, render_dialogue(d.messages)))
    assert final_prompt == expected == d.final.segments[0].text
    docs = [format_doc(i + 1, p) for i, p in enumerate(CORPUS[:3])]  # all retrieved documents
    for text in [R_SEARCH, R_ANSWER, V_SELECT, V_FINAL, *docs]:
        assert text in final_prompt
    assert _sources(d.final) == ["prompt", "policy"]


def test_batching_one_call_per_role_per_turn():
    reasoner = ScriptedGenerator(
        {
            FINAL_KEY: "<answer>final</answer>",
            "Guido van Rossum created Python.</feedback>": "<answer>Guido van Rossum</answer>",
            "<feedback>Doc 1(Title: Python)": "<verify>ok</verify><search>Python creator Guido</search>",
            "<feedback>Doc 1(Title: Hamlet)": "<answer>William Shakespeare</answer>",
            f"Question: {HAMLET}": R_SEARCH,
            f"Question: {FRANCE}": "<think>Known.</think><answer>Paris</answer>",
            f"Question: {PYTHON}": "<search>Python language</search>",
        }
    )
    verifier = ScriptedGenerator(
        {
            "</answer></information>": "<verify>ok</verify><final_answer>checked</final_answer>",
            "<search>Python creator Guido</search>": (
                "<selected_doc>Doc 1</selected_doc><response>Guido van Rossum created Python.</response>"
            ),
            "<search>Python language</search>": "<selected_doc>Doc 1</selected_doc><response>A language.</response>",
            "<search>Hamlet author</search>": V_SELECT,
        }
    )
    retriever = KeywordRetriever(CORPUS)
    hamlet, france, python = run_arr_dialogue(
        [HAMLET, FRANCE, PYTHON], reasoner, verifier, retriever
    )

    # reasoner: turn 1 (all 3), turn 2 (Hamlet, Python), turn 3 (Python), final predictor (all 3)
    assert reasoner.batch_sizes == [3, 2, 1, 3]
    assert reasoner.stops == [REASONER_STOP] * 3 + [("</answer>",)]
    assert retriever.calls == [["Hamlet author", "Python language"], ["Python creator Guido"]]
    # verifier: search steps of turn 1 and 2, then one answer check over everything
    assert verifier.batch_sizes == [2, 1, 3]
    assert verifier.stops == [VERIFIER_STOP, VERIFIER_STOP, VERIFIER_FINAL_STOP]
    assert [d.reasoner_answer for d in (hamlet, france, python)] == [
        "William Shakespeare",
        "Paris",
        "Guido van Rossum",
    ]
    assert [d.verifier_answer for d in (hamlet, france, python)] == ["checked"] * 3
    assert [len(d.steps) for d in (hamlet, france, python)] == [1, 0, 2]
    assert [s.turn for s in python.steps] == [0, 1]
    # one verifier policy segment per retrieval step, then the final verification
    assert _texts(python.verifier, "policy")[:-1] == [s.verifier_output for s in python.steps]


def test_reasoner_and_verifier_can_be_one_generator():
    shared = ScriptedGenerator(
        {
            FINAL_KEY: "<answer>A</answer>",
            "</answer></information>": "<verify>ok</verify><final_answer>A</final_answer>",
            "Question: Q?": "<think>t</think><answer>A</answer>",
        }
    )
    (d,) = run_arr_dialogue(["Q?"], shared, shared, KeywordRetriever(CORPUS))
    assert shared.batch_sizes == [1, 1, 1]  # reasoner turn, verifier check, final predictor
    assert (d.reasoner_answer, d.verifier_answer, d.final_answer) == ("A", "A", "A")


def test_verifier_without_tags_gives_no_feedback_fallback():
    reasoner, verifier = _hamlet_agents("The documents look fine to me.")
    (d,) = run_arr_dialogue([HAMLET], reasoner, verifier, KeywordRetriever(CORPUS))
    assert d.steps[0].selected is None
    assert NO_FEEDBACK_TEXT in d.reasoner.text
    assert _texts(d.reasoner, "peer") == []
    assert d.reasoner.retrieved_ids == []
    assert d.verifier.format_errors == 1  # the step message; the final check was well-formed
    assert d.reasoner_answer == "William Shakespeare"


def test_verifier_out_of_range_doc_forwards_only_the_response():
    reasoner, verifier = _hamlet_agents(
        "<selected_doc>Doc 9</selected_doc><response>See above.</response>"
    )
    (d,) = run_arr_dialogue([HAMLET], reasoner, verifier, KeywordRetriever(CORPUS))
    assert d.steps[0].selected is None
    assert _texts(d.reasoner, "peer") == ["See above."]
    assert d.verifier.format_errors == 1


def test_verifier_paper_misprint_and_unclosed_response_are_read():
    # the paper prints "<selected_doc> ... <selected_doc>"; the response is cut off by EOS
    reasoner, verifier = _hamlet_agents("<selected_doc> Doc 2 <selected_doc><response>Paris is")
    (d,) = run_arr_dialogue([HAMLET], reasoner, verifier, KeywordRetriever(CORPUS))
    assert d.steps[0].selected == 1
    assert d.reasoner.retrieved_ids == ["p2"]
    assert _texts(d.reasoner, "peer") == ["Paris is"]
    assert d.verifier.format_errors == 1


def test_malformed_reasoner_gets_hint_and_max_turns_forces_answer():
    reasoner = ScriptedGenerator(
        {
            FINAL_KEY: "no tags at all",
            "No more searches are allowed": "<answer>guess</answer>",
            "not a valid action": R_SEARCH,
            f"Question: {HAMLET}": "<think>rambling without an action",
        }
    )
    verifier = ScriptedGenerator({"<search>Hamlet author</search>": V_SELECT})
    (d,) = run_arr_dialogue([HAMLET], reasoner, verifier, KeywordRetriever(CORPUS), max_turns=3)
    # turn 1 malformed -> hint; turn 2 searches; turn 3 (the last) is the forced answer
    assert reasoner.batch_sizes == [1, 1, 1, 1]
    assert INVALID_ACTION_HINT in _texts(d.reasoner, "env")
    assert FORCE_ANSWER_HINT in _texts(d.reasoner, "env")
    assert d.reasoner_answer == "guess"
    assert d.reasoner.format_errors == 1
    # the answer check got the search-step script again: no <final_answer>
    assert d.verifier_answer is None and d.verifier.format_errors == 1
    assert d.final_answer is None and d.final.format_errors == 1


def test_empty_question_list():
    reasoner, verifier = _hamlet_agents()
    assert run_arr_dialogue([], reasoner, verifier, KeywordRetriever(CORPUS)) == []
    assert reasoner.calls == verifier.calls == []


def test_a_wrong_answer_is_probed_and_the_probe_dialogue_goes_on():
    """REX-RAG's probes inside ARR: both dialogues answer "Marlowe" at once; each is cloned,
    the clone's reasoner loses its answer (trajectory and transcript) and reads an exploration
    prompt, then searches, hears the verifier and answers right in a free turn."""
    import random

    from advrag.agents.probes import Prober
    from advrag.agents.prompts import exploration_pool, probe_observation

    pool = exploration_pool(30)
    reasoner = ScriptedGenerator({FINAL_KEY: "<answer>William Shakespeare</answer>",
                                  "</feedback>\n\n": R_ANSWER,
                                  **dict.fromkeys(pool, R_SEARCH),
                                  f"Question: {HAMLET}": "<think>A guess.</think><answer>Marlowe</answer>"})
    verifier = ScriptedGenerator({"</answer></information>": V_FINAL,
                                  "<search>Hamlet author</search>": V_SELECT})
    prober = Prober(pool, 1.0, lambda i, answer: answer != "William Shakespeare",
                    random.Random(0))
    dialogues = run_arr_dialogue([HAMLET, HAMLET], reasoner, verifier, KeywordRetriever(CORPUS),
                                 max_turns=4, prober=prober)

    assert len(dialogues) == 4  # two policy dialogues, then their two probes
    assert [d.reasoner_answer for d in dialogues] == ["Marlowe", "Marlowe", "William Shakespeare",
                                                      "William Shakespeare"]
    for origin, probe in enumerate(dialogues[2:]):
        assert probe.reasoner.probe.origin == origin
        inserted = probe.reasoner.segments[probe.reasoner.probe.segment]
        assert inserted.source == "probe"
        assert inserted.text == probe_observation(pool[probe.reasoner.probe.prompt])
        assert _texts(probe.reasoner, "policy") == ["<think>A guess.</think>", R_SEARCH, R_ANSWER]
        assert [s for s, _ in probe.messages] == ["Reasoner", "Reasoner", "Search results",
                                                  "Verifier", "Selected document", "Reasoner",
                                                  "Verifier"]
        assert probe.messages[0] == ("Reasoner", "<think>A guess.</think>")
        assert probe.reasoner.n_searches == 1 and len(probe.steps) == 1
    assert all(d.reasoner.probe is None and not d.steps for d in dialogues[:2])
    assert [d.final_answer for d in dialogues] == ["William Shakespeare"] * 4
