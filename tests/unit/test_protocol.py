"""The tag protocol parser: each malformed pattern, plus fuzzing that it never raises."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from advrag.agents.protocol import (
    INVALID,
    Tag,
    extract_tags,
    first_content,
    last_content,
    parse_step,
)

ACTIONS = ("search", "answer")


def test_well_formed_search_and_answer():
    step = parse_step("<think>I need facts.</think>\n<search> Hamlet author </search>", ACTIONS)
    assert (step.kind, step.content, step.error) == ("search", "Hamlet author", None)
    step = parse_step("<think>ok</think><answer>Paris</answer>", ACTIONS)
    assert (step.kind, step.content, step.error) == ("answer", "Paris", None)


def test_extract_tags_positions_and_content():
    text = "ab<think>x</think><answer>y"
    assert extract_tags(text) == [
        Tag("think", "x", 2, 18, True),  # "ab" is 2 chars; "<think>x</think>" is 16
        Tag("answer", "y", 18, len(text), False),
    ]


def test_unclosed_action_is_not_an_action():
    step = parse_step("<think>x</think><answer>Paris", ACTIONS)
    assert step.kind == INVALID and "unclosed <answer>" in step.error
    assert last_content("<think>x</think><answer>Paris", "answer") == "Paris"


def test_mismatched_case_and_whitespace_are_recognised_but_flagged():
    step = parse_step("<Answer>Paris</Answer>", ACTIONS)
    assert (step.kind, step.content) == ("answer", "Paris")
    assert "non-canonical tag '<Answer>'" in step.error
    step = parse_step("< search >q</ search>", ACTIONS)
    assert (step.kind, step.content) == ("search", "q")
    assert "non-canonical" in step.error


def test_nested_same_tag():
    # the inner <search> closes first and is the action; the outer one stays unclosed
    step = parse_step("<search>a<search>b</search>", ACTIONS)
    assert (step.kind, step.content) == ("search", "b")
    assert "nested <search> inside <search>" in step.error
    assert "unclosed <search>" in step.error


def test_duplicated_actions_take_the_first_and_flag_the_rest():
    step = parse_step("<search>a</search><answer>b</answer>", ACTIONS)
    assert (step.kind, step.content) == ("search", "a")
    assert "text after </search>" in step.error


def test_action_that_ends_first_wins_when_nested_in_think():
    # a generator with stop strings would have stopped after </search>
    step = parse_step("<think>x <search>q</search> y</think>", ACTIONS)
    assert (step.kind, step.content) == ("search", "q")
    assert "text after </search>" in step.error


def test_stray_close_tag():
    step = parse_step("</search><answer>x</answer>", ACTIONS)
    assert (step.kind, step.content) == ("answer", "x")
    assert "stray </search>" in step.error


def test_empty_bodies_are_invalid():
    for text in ("<search>  </search>", "<answer></answer>"):
        step = parse_step(text, ACTIONS)
        assert step.kind == INVALID and step.content == "" and "empty <" in step.error


def test_no_action_and_unknown_tags():
    step = parse_step("I think the answer is Paris.", ACTIONS)
    assert step.kind == INVALID and "no closed action tag" in step.error
    step = parse_step("<foo>bar</foo><answer>x</answer>", ACTIONS)
    assert step.kind == "answer" and "unknown tag <foo>" in step.error
    step = parse_step("<verify>ok</verify><answer>x</answer>", ACTIONS, passive=("verify",))
    assert step.error is None


def test_crossed_tags():
    # </think> implicitly closes <search> (unclosed), so </search> is then stray
    step = parse_step("<think><search>q</think></search>", ACTIONS)
    assert step.kind == INVALID
    assert "unclosed <search>" in step.error and "stray </search>" in step.error


def test_angle_brackets_inside_content_are_text():
    step = parse_step("<answer>a < b and c<d, x<|im_end|>y, z<w/></answer>", ACTIONS)
    assert step.content == "a < b and c<d, x<|im_end|>y, z<w/>"
    assert step.error is None


def test_unicode_content():
    step = parse_step("<think>首都は?</think><answer> 東京 café </answer>", ACTIONS)
    assert (step.kind, step.content, step.error) == ("answer", "東京 café", None)


def test_first_and_last_content():
    text = "<response>a</response><response></response><response>b</response>"
    assert first_content(text, "response") == "a"
    assert first_content(text, "RESPONSE") == "a"
    assert first_content("<response></response>", "response") == ""
    assert first_content("<response>open", "response") is None
    assert last_content(text, "response") == "b"
    assert last_content("<answer>A</answer> then <answer>B", "answer") == "A"  # closed first
    assert last_content("<answer> </answer>", "answer") is None


PATHOLOGICAL = [  # shapes that make naive tag parsers quadratic or recursive
    "x" * 1_000_000 + "<answer>y</answer>",
    "<" * 200_000,
    "< " * 100_000 + "/" * 1000,
    "<a>" * 20_000,
    "<answer>x" * 20_000,
    "<think>" * 20_000 + "</think>",
    "</search>" * 20_000,
    "<" + " " * 200_000,
    "<" + "a" * 200_000,
]


def test_extremely_long_and_pathological_inputs_are_parsed():
    """Their speed is measured in bench/rollouts/bench_protocol.py (never a timed test)."""
    steps = [parse_step(text, ACTIONS) for text in PATHOLOGICAL]
    assert steps[0].content == "y"
    assert all(s.kind == INVALID for s in steps[1:])
    assert len(steps[3].error) < 1000  # problems are de-duplicated and capped
    assert last_content(PATHOLOGICAL[4], "answer") == "x"  # unclosed content stops at the next tag


_FRAGMENTS = [
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "<verify>",
    "< answer >",
    "<Answer>",
    "</ANSWER>",
    "</ search>",
    "<foo>",
    "</foo>",
    "<",
    ">",
    "/",
    "</>",
    "<<",
    ">>",
    " ",
    "\n",
    "Paris",
    "é",
    "東京",
    "<|im_end|>",
    "<a/>",
    "<answer",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=8)), max_size=30))
def test_fuzz_never_raises_and_returns_valid_step(parts):
    text = "".join(parts)
    step = parse_step(text, ACTIONS, passive=("think", "verify"))
    assert step.kind in (*ACTIONS, INVALID)
    if step.kind == INVALID:
        assert step.content == "" and step.error
    else:
        assert step.content and step.content == step.content.strip()
        assert step.content in text
    for tag in step.tags:
        assert 0 <= tag.start < tag.end <= len(text)
        assert tag.content in text[tag.start : tag.end]
    first_content(text, "answer")
    last_content(text, "answer")


_plain = st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=40)


@settings(max_examples=200, deadline=None)
@given(_plain, _plain.filter(lambda s: s.strip()), st.sampled_from(ACTIONS))
def test_fuzz_well_formed_round_trip(thought, content, action):
    text = f"<think>{thought}</think><{action}>{content}</{action}>"
    step = parse_step(text, ACTIONS)
    assert (step.kind, step.content, step.error) == (action, content.strip(), None)
