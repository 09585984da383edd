"""GAR slice labels: the grounded judge's rules, 1:1 balancing, the SFT format, real transcripts."""

from __future__ import annotations

import dataclasses
from random import Random

import pytest
from small_worlds import bm25_world

from advrag.agents.types import Segment
from advrag.curation.demonstrations import build_demonstrations
from advrag.curation.gar_data import replacement, substitutes
from advrag.curation.gar_labels import (
    Evidence,
    SliceLabel,
    WorldLexicon,
    balance_labels,
    capped_evidence,
    discriminator_prompt,
    grounded_judge,
    information_passages,
    label_slice,
    parse_verdict,
    sft_target,
    slice_queries,
    world_lexicon,
)
from advrag.datasets.records import QARecord

LEXICON = WorldLexicon({
    **{n: (n, "person") for n in ("Ada Vell", "Bo Rask", "Cy Moor")},
    **{n: (n, "city") for n in ("Tarn", "Ost")},
    "Ostford": ("Ostford", "city"),
    **{p: (p, "profession") for p in ("diplomat", "poet")},
})
PASSAGES = [
    "Ada Vell\nAda Vell was married to Bo Rask. Ada Vell was born in the city of Tarn.",
    "Bo Rask\nBo Rask earned a living as a professional diplomat. Bo Rask was born in 1901.",
    "Tarn\nTarn has a population of 12,000 people.",
]
TWO_HOP = QARecord(
    "q1", "What was the profession of the spouse of Ada Vell?", ["diplomat"],
    {"chain": [
        {"subject": "Ada Vell", "relation": "spouse", "object": "Bo Rask", "passage_id": "a"},
        {"subject": "Bo Rask", "relation": "profession", "object": "diplomat", "passage_id": "b"},
    ]},
)
COMPARISON = QARecord(
    "q2", "Who was born earlier, Ada Vell or Bo Rask?", ["Bo Rask"],
    {"chain": [
        {"subject": "Ada Vell", "relation": "birth_year", "object": "1950", "passage_id": "a"},
        {"subject": "Bo Rask", "relation": "birth_year", "object": "1901", "passage_id": "b"},
    ]},
)
POPULATION = QARecord(
    "q3", "What is the population of Tarn?", ["12,000", "12000"],
    {"chain": [{"subject": "Tarn", "relation": "population", "object": "12,000",
                "passage_id": "c"}]},
)


def judge(text: str, record: QARecord = TWO_HOP, passages=PASSAGES) -> SliceLabel:
    return label_slice(text, record, passages, LEXICON)


def test_lexicon_finds_whole_names_longest_first_and_numbers_without_commas():
    assert LEXICON.terms("Ostford, not Ost; 1,901 or 12000 in Tarnish Tarn. Doc 1") == [
        "Ostford", "Ost", "1901", "12000", "Tarn"]
    assert (LEXICON.kind("1901"), LEXICON.kind("Tarn"), LEXICON.kind("Zed")) == (
        "number", "city", None)


@pytest.mark.parametrize("text", [
    "The spouse of Ada Vell is Bo Rask.",
    "Ada Vell married Bo Rask, a diplomat.",  # two hops, both ends named: explained
    "Ada Vell was born in Tarn.",  # off the chain but in a retrieved passage
    "Bo Rask was born in 1901.",
    "So the answer is diplomat.",
    "I need the profession of the spouse.",  # nothing checkable, but works on the chain
])
def test_sound_slices(text):
    label = judge(text)
    assert label.sound, label
    assert label.slice == text


@pytest.mark.parametrize(("text", "rationale"), [
    ("The spouse of Ada Vell is Cy Moor.",
     "It gives Cy Moor for Ada Vell, but the spouse of Ada Vell is Bo Rask."),
    ("I found it.\nBo Rask was a poet.",
     "It gives poet for Bo Rask, but the profession of Bo Rask is diplomat."),
    ("Therefore the answer is poet.",
     "It gives poet as the answer, but the answer is diplomat."),
    ("Ada Vell lived in Ost.",
     "Ost appears in neither the question, its facts nor the retrieved passages."),
    ("Let me think about it.", "It does not address the question."),
])
def test_unsound_slices_say_why(text, rationale):
    label = judge(text)
    assert not label.sound
    assert label.rationale == rationale


def test_comparison_values_must_stay_with_their_subjects():
    passages = ["Ada Vell was born in the year 1950.", "Bo Rask was born in the year 1901."]
    assert judge("Ada Vell was born in 1950 and Bo Rask in 1901.", COMPARISON, passages).sound
    swapped = judge("Ada Vell was born in 1901.", COMPARISON, passages)
    assert not swapped.sound
    assert swapped.rationale == (
        "It gives 1901 for Ada Vell, but the year Ada Vell was born is 1950.")
    assert not judge("So the answer is Ada Vell.", COMPARISON, passages).sound
    assert judge("So the answer is Bo Rask, not Ada Vell.", COMPARISON, passages).sound


def test_numbers_match_with_or_without_thousands_separators():
    assert judge("The population of Tarn is 12000.", POPULATION, []).sound
    wrong = judge("The population of Tarn is 13,000.", POPULATION, [])
    assert wrong.rationale == "It gives 13000 for Tarn, but the population of Tarn is 12000."


def test_a_stated_fact_is_held_to_its_own_value_not_to_another_of_its_subject():
    """Tarn's passage pairs it with 1299 (its founding year): that explains 1299 beside Tarn,
    but not as Tarn's population, which a sentence naming that fact claims."""
    passages = ["Tarn has a population of 12,000 people. Tarn was founded in 1299."]
    assert judge("Tarn, founded in 1299, is a town.", POPULATION, passages).sound
    wrong = judge("The population of Tarn is 1299.", POPULATION, passages)
    assert not wrong.sound
    assert wrong.rationale == "It gives 1299 for Tarn, but the population of Tarn is 12000."


def test_analysis_lists_the_checked_terms():
    assert judge("The spouse of Ada Vell is Bo Rask.").analysis == (
        "The slice names Ada Vell, Bo Rask.")
    assert judge("Let me think.").analysis == "The slice names no entity or number."


def _labels(pattern: str) -> list[SliceLabel]:
    return [SliceLabel(f"s{i}", c == "y", "a", "r") for i, c in enumerate(pattern)]


def test_balance_downsamples_the_larger_class_deterministically():
    labels = _labels("yyynyyny")  # 6 sound, 2 unsound
    kept = balance_labels(labels, seed=0)
    assert [label.sound for label in kept].count(True) == 2
    assert [label.slice for label in kept if not label.sound] == ["s3", "s6"]
    assert [label.slice for label in kept] == sorted(
        (label.slice for label in kept), key=lambda s: int(s[1:]))  # input order kept
    assert balance_labels(labels, seed=0) == kept
    draws = {tuple(lb.slice for lb in balance_labels(labels, seed=s)) for s in range(20)}
    assert len(draws) > 1  # the seed chooses which sound slices survive
    assert balance_labels(_labels("yyy"), seed=0) == []
    assert balance_labels([], seed=0) == []


def test_sft_target_and_parse_verdict_round_trip():
    label = SliceLabel("s", False, "The slice names Bo Rask, poet.",
                       "It gives poet for Bo Rask, but the profession of Bo Rask is diplomat.")
    assert sft_target(label) == (
        "Analysis: The slice names Bo Rask, poet.\nVerdict: no\n"
        "Rationale: It gives poet for Bo Rask, but the profession of Bo Rask is diplomat.")
    assert parse_verdict(sft_target(label)) is False
    assert parse_verdict(sft_target(dataclasses.replace(label, sound=True))) is True


@pytest.mark.parametrize(("text", "verdict"), [
    ("Analysis: fine.\nVERDICT: Yes.\nRationale: ok", True),
    ("Verdict: **no**", False),
    ("verdict - yes", True),
    ("Verdict: no\nVerdict: yes", False),  # the first verdict counts
    ("Analysis: it was cut off before the", None),
    ("Verdict: maybe", None),
    ("Verdict: nope", None),
    ("yes", None),
    ("", None),
    ("<|im_end|>\x00 Verdict:", None),
])
def test_parse_verdict_never_raises(text, verdict):
    assert parse_verdict(text) is verdict


def test_discriminator_prompt_carries_question_evidence_slice_and_format():
    prompt = discriminator_prompt("Who?", "The spouse of Ada Vell is Bo Rask.",
                                  "Doc 1(Title: Ada Vell) Ada Vell was married to Bo Rask.")
    assert prompt.endswith("Question: Who?\nPassages retrieved before the slice:\nDoc 1(Title: "
                           "Ada Vell) Ada Vell was married to Bo Rask.\nSlice: The spouse of "
                           "Ada Vell is Bo Rask.\n")
    assert "Analysis:" in prompt and "Verdict:" in prompt and "Rationale:" in prompt
    assert "before the slice:\n(none)\nSlice: x" in discriminator_prompt("Who?", "x")


def test_information_passages_are_the_blocks_lines_without_hints_or_repeats():
    blocks = ["\n\n<information>Doc 1(Title: A) a.\nDoc 2(Title: B) b.</information>\n\n",
              "\nMy previous action is invalid. ...\n",
              "\n\n<information>Doc 1(Title: A) a.\nDoc 2(Title: C) c.</information>\n\n"]
    assert information_passages(blocks) == ["Doc 1(Title: A) a.", "Doc 2(Title: B) b.",
                                             "Doc 2(Title: C) c."]


def test_the_evidence_cap_keeps_the_latest_passages_and_counts_the_rest():
    passages = ["one two three", "four five", "six"]  # 3, 2 and 1 words, +1 a line break each
    assert capped_evidence(passages, words, 100) == Evidence("one two three\nfour five\nsix", 0)
    assert capped_evidence(passages, words, 5) == Evidence("four five\nsix", 1)
    assert capped_evidence(passages, words, 4) == Evidence("six", 2)
    assert capped_evidence(passages, words, 1) == Evidence("(none)", 3)
    assert capped_evidence([], words, 100) == Evidence("(none)", 0)


# ---------------------------------------------------------------- real transcripts


@pytest.fixture(scope="module")
def world_demos():
    """A small generated world, its BM25 retriever, and grounded demonstrations over it."""
    world, retriever = bm25_world(seed=2, n_train=20)
    records = {r.question: r for r in world.splits["train"]}
    demos = build_demonstrations(list(records.values()), retriever, str, topk=3, max_turns=4)
    pairs = [(demo, records[demo.segments[0].text.rsplit("Question: ", 1)[1].strip()])
             for demo in demos]
    assert len(pairs) >= 12
    assert {r.metadata["type"] for _, r in pairs} == {"single", "compositional", "comparison"}
    return world, world_lexicon(world), pairs


def words(text: str) -> int:
    return len(text.split())


def test_world_lexicon_knows_names_aliases_and_text_attributes(world_demos):
    world, lexicon, _ = world_demos
    person = next(e for e in world.entities.values() if e.kind == "person")
    org = next(e for e in world.entities.values() if e.kind == "organisation")
    assert lexicon.entries[person.name] == (person.name, "person")
    assert lexicon.entries[org.aliases[0]] == (org.name, "organisation")
    assert lexicon.kind(str(person.attrs["profession"])) == "profession"


def test_every_demonstration_slice_is_sound(world_demos):
    _, lexicon, pairs = world_demos
    for demo, record in pairs:
        labels = grounded_judge(lexicon)(slice_queries(demo, record, words))
        assert labels and all(label.sound for label in labels), (record.question, labels)


@pytest.mark.parametrize("hop_index", [0, -1])
def test_a_corrupted_fact_yields_an_unsound_slice(world_demos, hop_index):
    world, lexicon, pairs = world_demos
    rng, pool = Random(hop_index), substitutes(lexicon, world.splits["train"])
    for demo, record in pairs:
        hop = record.metadata["chain"][hop_index]
        obj, wrong = hop["object"], replacement(lexicon, record.metadata["chain"], hop, pool, rng)
        corrupted = dataclasses.replace(demo, segments=[
            Segment(s.text.replace(obj, wrong) if s.source == "policy" else s.text, s.source)
            for s in demo.segments])
        labels = grounded_judge(lexicon)(slice_queries(corrupted, record, words))
        unsound = [label for label in labels if not label.sound]
        assert unsound, (record.question, obj, wrong, labels)
        assert f"It gives {wrong.replace(',', '')}" in unsound[0].rationale  # numbers canonical
