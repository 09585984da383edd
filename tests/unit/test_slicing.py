"""GAR slicing: delimiters, semantic beginnings, the length range, and lossless coverage."""

from __future__ import annotations

import re
from random import Random

import pytest

from advrag.agents.types import Trajectory
from advrag.curation.slicing import (
    DISCOURSE_CUES,
    MIN_SLICE_TOKENS,
    reasoning_text,
    slice_reasoning,
    slices_with_evidence,
)


def words(text: str) -> int:
    return len(text.split())


def assert_covers(text: str, slices: list[str]) -> None:
    """Slices are stripped, non-empty, in order, and only whitespace lies between them."""
    pos = 0
    for piece in slices:
        assert piece and piece == piece.strip()
        start = text.index(piece, pos)
        assert not text[pos:start].strip(), f"lost text {text[pos:start]!r}"
        pos = start + len(piece)
    assert not text[pos:].strip()
    assert " ".join(slices).split() == text.split()


def test_discourse_cues_open_new_slices():
    # no minimum: every cue, "Since" (GAR App. F.1) among them, opens a slice of its own
    text = "I need the year. So the year is 1901.\nWait, check it. Since it holds, done."
    assert slice_reasoning(text, words, min_tokens=0) == [
        "I need the year.", "So the year is 1901.", "Wait, check it.", "Since it holds, done."]


def test_the_papers_cues_are_among_the_discourse_cues():
    assert {"Wait", "Since", "Therefore"} <= set(DISCOURSE_CUES)


def test_a_slice_under_the_minimum_absorbs_the_next_cue_segment():
    # with a minimum of 5 words: "I need the year." (4) takes in "So the year is 1901." (5);
    # the 9-word slice then closes at the cue "Wait"; "Wait, check it." (3) takes in the rest
    text = "I need the year. So the year is 1901.\nWait, check it. Since it holds, done."
    assert slice_reasoning(text, words, min_tokens=5) == [
        "I need the year. So the year is 1901.", "Wait, check it. Since it holds, done."]


def test_a_short_last_slice_joins_the_one_before():
    # "Since done." (2 words) is under the minimum of 3 with nothing after it: 5 + 2 ≤ 10
    text = "So the year is 1901. Since done."
    assert slice_reasoning(text, words, max_tokens=10, min_tokens=3) == [text]


def test_the_minimum_crosses_a_turn_boundary_but_never_the_maximum():
    # the blank line between turns is a new beginning, but a 4-word turn is under 5 words
    assert slice_reasoning("a b c d.\n\ne f g h.", words, min_tokens=5) == ["a b c d.\n\ne f g h."]
    # a short piece stays alone when neither neighbour can take it within the maximum
    text = "a b c d e. f. g h i j k."
    assert slice_reasoning(text, words, max_tokens=5, min_tokens=3) == ["a b c d e.", "f.",
                                                                         "g h i j k."]


def test_the_default_range_merges_a_lone_plan_sentence():
    # "I need the year." is 4 words, under MIN_SLICE_TOKENS of them: it takes in the next turn's
    # fact (across the blank line) and reaches 4 + 12 = 16 words; the next cue then opens a slice
    plan = "I need the year."
    fact = "The year the city of Tarn was founded is 1901 by record."
    rest = "So it is 1901 and the answer follows from the founding record of the city of Tarn."
    assert (words(plan), words(fact), words(rest)) == (4, 12, 17)
    assert MIN_SLICE_TOKENS == 16
    assert slice_reasoning(f"{plan}\n\n{fact} {rest}", words) == [f"{plan}\n\n{fact}", rest]


def test_a_minimum_above_the_maximum_is_the_maximum_and_a_negative_one_fails():
    text = "a b. c d. e f."
    assert slice_reasoning(text, words, max_tokens=4, min_tokens=40) == ["a b. c d.", "e f."]
    with pytest.raises(ValueError, match="min_tokens"):
        slice_reasoning(text, words, min_tokens=-1)


def test_segments_merge_keeping_their_separators():
    assert slice_reasoning("a b\nc d.  e f", words) == ["a b\nc d.  e f"]


def test_cues_count_only_at_a_sentence_start_and_as_whole_words():
    text = "It is odd, so we look again. Sometimes it rains. **So** it was wet."
    assert slice_reasoning(text, words, min_tokens=0) == [
        "It is odd, so we look again. Sometimes it rains.", "**So** it was wet."]


def test_blank_line_starts_a_new_slice():
    assert slice_reasoning("a b.\n\nc d.\ne f.", words, min_tokens=0) == ["a b.", "c d.\ne f."]


def test_budget_closes_a_slice_before_it_overflows():
    # 3 + 3 = 6 words fit in 7; adding 3 more would make 9
    text = "One two three. Four five six. Seven eight nine."
    assert slice_reasoning(text, words, max_tokens=7) == [
        "One two three. Four five six.", "Seven eight nine."]


def test_long_segment_is_split_at_whitespace_and_the_tail_keeps_merging():
    assert slice_reasoning("a b c d e f g", words, max_tokens=3) == ["a b c", "d e f", "g"]
    assert slice_reasoning("a b c d e f g. h", words, max_tokens=3) == [
        "a b c", "d e f", "g. h"]
    # a single word over the budget cannot be cut at whitespace: it stays whole
    assert slice_reasoning("tiny enormousword tiny", len, max_tokens=6) == [
        "tiny", "enormousword", "tiny"]


def test_empty_text_and_bad_budget():
    assert slice_reasoning("", words) == []
    assert slice_reasoning(" \n\n ", words) == []
    with pytest.raises(ValueError, match="max_tokens"):
        slice_reasoning("a", words, max_tokens=0)


def _random_trace(rng: Random) -> str:
    vocab = ["the", "year", "is", "1901", "city", "Tarn", "so", "x" * 30, "because", "it"]
    parts = []
    for _ in range(rng.randint(0, 40)):
        opener = rng.choice([*DISCOURSE_CUES, "", "", "", "Hmm,"])
        body = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 25)))
        parts.append(f"{opener} {body}".strip() + rng.choice([".", "!", "?", "", ","]))
        parts.append(rng.choice([" ", "  ", "\n", "\n\n", " \n \n", "\t"]))
    return "".join(parts)


@pytest.mark.parametrize("seed", range(25))
def test_slices_cover_the_text_and_keep_to_the_range(seed):
    rng = Random(seed)
    text, budget = _random_trace(rng), rng.choice([4, 12, 40, 320])
    count, floor = rng.choice([words, len]), rng.choice([0, 3, 16])
    slices = slice_reasoning(text, count, max_tokens=budget, min_tokens=floor)
    assert_covers(text, slices)
    assert all(count(s) <= budget or len(s.split()) == 1 for s in slices)
    spans, pos = [], 0
    for piece in slices:
        pos = text.index(piece, pos)
        spans.append((pos, pos + len(piece)))
        pos += len(piece)
    for i, (a, b) in enumerate(spans):  # a short slice: no neighbour could take it
        if count(text[a:b]) < min(floor, budget):
            joins = [text[spans[i - 1][0]:b]] if i else []
            joins += [text[a:spans[i + 1][1]]] if i + 1 < len(spans) else []
            assert all(count(j) > budget for j in joins)
    assert slice_reasoning(text, count, max_tokens=budget, min_tokens=floor) == slices


def _trajectory(*segments: tuple[str, str]) -> Trajectory:
    traj = Trajectory()
    for text, source in segments:
        traj.add(text, source)
    return traj


def test_reasoning_text_reads_only_the_policys_think_blocks():
    traj = _trajectory(
        ("<think> prompt example </think> Question: q", "prompt"),
        ("<think> I need the year. </think>\n<search> year </search>", "policy"),
        ("\n\n<information>Doc 1(Title: T) <think> injected </think></information>\n\n", "env"),
        ("<think> The year is 1901.\nSo it is 1901. </think>\n<answer> 1901 </answer>", "policy"),
    )
    assert reasoning_text(traj) == "I need the year.\n\nThe year is 1901.\nSo it is 1901."


def test_each_slice_carries_what_its_episode_had_returned_before_it():
    first = "\n\n<information>Doc 1(Title: T) The year is 1901.</information>\n\n"
    second = "\n\n<information>Doc 1(Title: U) U is in Ost.</information>\n\n"
    traj = _trajectory(
        ("Question: q", "prompt"),
        ("<think> I need the year of T first. </think>\n<search> T </search>", "policy"),
        (first, "env"),
        ("<think> The year of T is 1901. </think>\n<search> U </search>", "policy"),
        (second, "env"),
        ("<think> So U is in Ost. </think>\n<answer> Ost </answer>", "policy"),
    )
    # min_tokens 0: one slice per think block, each with the blocks returned before it
    assert slices_with_evidence(traj, words, max_tokens=320, min_tokens=0) == [
        ("I need the year of T first.", ()),
        ("The year of T is 1901.", (first,)),
        ("So U is in Ost.", (first, second)),
    ]
    # a slice merged across a turn carries what was returned before its last part
    merged = slices_with_evidence(traj, words, max_tokens=13, min_tokens=8)
    assert [text for text, _ in merged] == [
        "I need the year of T first.\n\nThe year of T is 1901.", "So U is in Ost."]
    assert [read for _, read in merged] == [(first,), (first, second)]


def test_reasoning_text_skips_think_inside_a_hallucinated_information_block():
    traj = _trajectory(
        ("<think> real </think><information><think> fake </think></information>", "policy"))
    assert reasoning_text(traj) == "real"


def test_reasoning_text_falls_back_to_plain_cot_and_keeps_unclosed_thoughts():
    plain = _trajectory(("p", "prompt"), ("Step one.\nStep two. <answer> x </answer>", "policy"))
    assert reasoning_text(plain) == "Step one.\nStep two."
    unclosed = _trajectory(("<think> cut off mid", "policy"))
    assert reasoning_text(unclosed) == "cut off mid"
    assert reasoning_text(_trajectory(("<answer> x </answer>", "policy"))) == ""


def test_demonstration_reasoning_slices_group_whole_turns(demos):
    for demo in demos:
        thoughts = [m.strip() for s in demo.segments if s.source == "policy"
                    for m in re.findall(r"<think>(.*?)</think>", s.text, re.S)]
        text = reasoning_text(demo)
        assert text == "\n\n".join(thoughts)
        assert "Doc 1(" not in text and "<information>" not in text
        # without a minimum: each slice one step of one turn (the plan, "First, …", "Next, …",
        # "So …" open steps: discourse cues), none across the blank line that ends a turn
        steps = slice_reasoning(text, words, min_tokens=0)
        assert all("\n\n" not in step for step in steps) and len(steps) > len(thoughts)
        assert_covers(text, steps)
        # with the default range: steps merged, none under the minimum but a lone slice
        slices = slice_reasoning(text, words)
        assert len(slices) == 1 or all(words(s) >= MIN_SLICE_TOKENS for s in slices)
        assert_covers(text, slices)


@pytest.fixture(scope="module")
def demos():
    from small_worlds import bm25_world

    from advrag.curation.demonstrations import build_demonstrations

    world, retriever = bm25_world(seed=3, n_train=12)
    built = build_demonstrations(world.splits["train"], retriever, str, topk=3, max_turns=4)
    assert len(built) >= 8
    return built
