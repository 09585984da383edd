"""Scoring ARR dialogues for training: outcome rewards, action spans, clarity inputs (ARR §4.2).

Pure episode logic over ``advrag.agents.arr.Dialogue``; the math is
``advrag.core.arr_rewards``'. Training needs three things from a dialogue:

1. Each agent's outcome reward (eq. 5) from the F1 of its own answer — the
   reasoner's ``<answer>`` (y_r) and the verifier's ``<final_answer>`` (y_v) —
   minus ``format_penalty`` once if that agent broke the tag grammar.
2. The tokens of chosen actions: ``split_actions`` cuts each "policy" segment
   around the content of the named tags (verifier critiques ``verify``/
   ``response``; the reasoner's monitored ``think``), so every action's
   content is a segment of its own and tokenises to exactly its own tokens
   (``Batch.segment_ids`` then maps tokens to actions).
3. What clarity (eq. 7) looks at per verifier action: the documents of its
   step (``verifier_turn_docs``) and the action's text.

How this departs from the paper (which does not say):

- An action is its content, the raw text between the tags, as in the authors'
  release: for ``<response>text</response>`` only the tokens of ``text`` get
  a mean entropy and the process advantage. The markup stays policy text
  (loss-mask 1, outcome advantage) outside every action, so a negative
  clarity does not push against writing the tag. Gold containment is checked
  on the stripped content. An unclosed tag's content runs to the next tag or
  the end of the message (what the dialogue acts on); a tag with empty
  content is no action (it has no token to score). Nested tags: only the
  outermost span counts.
- An action with no kept tokens (cut by ``max_seq_len``) has a NaN mean
  entropy (``core.actions.action_means``): ``per_turn_means`` leaves it out
  of the per-turn means behind impact (eq. 8), ``action_clarities`` gives it
  NaN clarity, and ``core.actions.excluded_actions`` counts it.
- Cutting a segment at tag boundaries re-tokenises the boundaries; as in
  ``engines.local.tokenize`` the old, reference and new log-probs are all
  computed on these ids, so the ratio is unaffected.
- The verifier's final verification has no documents of its own (its
  ``<information>`` is the reasoner's answer), so its critiques get clarity 0.
- The Final Predictor's answer is scored (logged) but earns no reward: eq. 5
  rewards y_r and y_v.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from advrag.agents.arr import Dialogue
from advrag.agents.protocol import Tag, extract_tags
from advrag.agents.types import Segment, Trajectory
from advrag.core.arr_rewards import adversarial_outcome_reward, clarity, gold_in_text
from advrag.core.metrics import Golds, exact_match, f1_score


@dataclass(frozen=True)
class ActionSpan:
    """One tagged action of an agent: its message index (turn), tag name and inner text."""

    turn: int
    name: str
    text: str


@dataclass
class SplitTrajectory:
    """A trajectory with its actions as separate segments.

    ``trajectory`` has the same text as the original; ``segment_action[i]`` is
    the index into ``actions`` of segment ``i``, or −1 for text outside them.
    """

    trajectory: Trajectory
    segment_action: list[int]
    actions: list[ActionSpan]


def _outermost(tags: Sequence[Tag], names: set[str]) -> list[Tag]:
    """The named tags, in order, dropping any that starts inside an earlier kept one."""
    kept: list[Tag] = []
    for tag in sorted((t for t in tags if t.name in names), key=lambda t: (t.start, -t.end)):
        if not kept or tag.start >= kept[-1].end:
            kept.append(tag)
    return kept


def _content_span(text: str, tag: Tag) -> tuple[int, int]:
    """``(start, end)`` of the tag's content in ``text``: after its opening tag's ``>``."""
    start = text.index(">", tag.start) + 1  # a tag token holds no ">" before its end
    return start, start + len(tag.content)


def split_actions(trajectory: Trajectory, names: Sequence[str]) -> SplitTrajectory:
    """Cut every "policy" segment around the content of the tags in ``names`` (case-insensitive).

    Each non-empty content becomes an action segment; the markup and the text
    between actions stay policy segments outside any action. Other segments
    are kept as they are (a REX-RAG probe's ``probe.segment`` follows its prompt's
    new index). Never raises on malformed text.
    """
    wanted = {n.lower() for n in names}
    segments: list[Segment] = []
    segment_action: list[int] = []
    actions: list[ActionSpan] = []

    def emit(text: str, action: int) -> None:
        if text:
            segments.append(Segment(text, "policy"))
            segment_action.append(action)

    turn, probe = 0, trajectory.probe
    for index, segment in enumerate(trajectory.segments):
        if segment.source != "policy":
            if probe is not None and index == probe.segment:  # REX-RAG's inserted prompt
                probe = replace(probe, segment=len(segments))
            segments.append(segment)
            segment_action.append(-1)
            continue
        cursor = 0
        for tag in _outermost(extract_tags(segment.text), wanted):
            if not tag.content:
                continue
            start, end = _content_span(segment.text, tag)
            emit(segment.text[cursor:start], -1)
            actions.append(ActionSpan(turn, tag.name, tag.content.strip()))
            emit(segment.text[start:end], len(actions) - 1)
            cursor = end
        emit(segment.text[cursor:], -1)
        turn += 1
    return SplitTrajectory(replace(trajectory, segments=segments, probe=probe), segment_action,
                           actions)


def verifier_turn_docs(dialogue: Dialogue) -> list[list[str]]:
    """The documents the verifier judged in each of its messages (its policy segments, in order).

    Its messages are one per search step with a non-empty output, then the
    final verification (no documents).
    """
    docs = [step.doc_texts for step in dialogue.steps if step.verifier_output]
    n_messages = sum(s.source == "policy" for s in dialogue.verifier.segments)
    if n_messages - len(docs) not in (0, 1):
        raise ValueError(
            f"verifier has {n_messages} messages but {len(docs)} search steps: "
            "the dialogue was not built by run_arr_dialogue"
        )
    return docs + [[]] * (n_messages - len(docs))


@dataclass(frozen=True)
class DialogueScore:
    """EM/F1 of the three answers of a dialogue and both agents' outcome rewards."""

    f1_reasoner: float
    f1_verifier: float
    f1_final: float
    em_reasoner: float
    em_verifier: float
    em_final: float
    reward_reasoner: float
    reward_verifier: float


def _reward(
    f1_self: float, f1_other: float, format_errors: int, *, lam: float, n_bins: int,
    adversarial: bool, format_penalty: float,
) -> float:
    """Eq. 5 (or the plain F1 without the adversarial term) minus the format penalty."""
    base = (
        adversarial_outcome_reward(f1_self, f1_other, lam=lam, n_buckets=n_bins)
        if adversarial
        else f1_self
    )
    return base - (format_penalty if format_errors > 0 else 0.0)


def score_dialogue(
    dialogue: Dialogue, golds: Golds, *, lam: float, n_bins: int, adversarial: bool = True,
    format_penalty: float = 0.0,
) -> DialogueScore:
    """F1/EM of y_r, y_v and the Final Predictor; each agent's reward (eq. 5 − format penalty).

    ``adversarial=False`` is the paper's "w/o adv-out" ablation: reward = own F1.
    A missing answer scores 0.
    """
    answers = (dialogue.reasoner_answer, dialogue.verifier_answer, dialogue.final_answer)
    f1_r, f1_v, f1_f = (f1_score(a, golds) if a is not None else 0.0 for a in answers)
    em_r, em_v, em_f = (exact_match(a, golds) if a is not None else 0.0 for a in answers)
    settings = dict(lam=lam, n_bins=n_bins, adversarial=adversarial, format_penalty=format_penalty)
    errors = dialogue.format_errors
    return DialogueScore(
        f1_r, f1_v, f1_f, em_r, em_v, em_f,
        reward_reasoner=_reward(f1_r, f1_v, errors["reasoner"], **settings),
        reward_verifier=_reward(f1_v, f1_r, errors["verifier"], **settings),
    )


def verifier_checks(dialogues: Sequence[Dialogue], scores: Sequence[DialogueScore]
                    ) -> dict[str, float]:
    """How the verifier's ``<final_answer>`` treats the reasoner's answer, by EM
    (``answer_checks`` of each dialogue's two answers; ``scores`` hold their EM)."""
    return answer_checks([d.reasoner_answer for d in dialogues],
                         [d.verifier_answer for d in dialogues],
                         [s.em_reasoner >= 1 for s in scores], [s.em_verifier >= 1 for s in scores])


def answer_checks(reasoner: Sequence[str | None], verifier: Sequence[str | None],
                  reasoner_right: Sequence[bool], verifier_right: Sequence[bool]
                  ) -> dict[str, float]:
    """How a verifier's answers treat a reasoner's, one pair per dialogue.

    Of the dialogues whose reasoner answer is wrong (EM 0, a missing answer included):
    ``flagged_wrong``, the share where the verifier gave an answer other than the reasoner's,
    and ``corrected_wrong``, the share where the verifier's is right. Of those whose reasoner
    answer is right: ``confirmed_right``, the share where the verifier's is right too. Each
    comes with its count (``n_wrong``, ``n_right``); a rate over no dialogue is left out.
    """
    pairs = list(zip(reasoner, verifier, reasoner_right, verifier_right, strict=True))
    wrong = [(r, v, v_ok) for r, v, r_ok, v_ok in pairs if not r_ok]
    right = [v_ok for _, _, r_ok, v_ok in pairs if r_ok]
    out = {"n_wrong": float(len(wrong)), "n_right": float(len(right))}
    if wrong:
        out["flagged_wrong"] = sum(v is not None and (r is None or not exact_match(v, [r]))
                                   for r, v, _ in wrong) / len(wrong)
        out["corrected_wrong"] = sum(v_ok for _, _, v_ok in wrong) / len(wrong)
    if right:
        out["confirmed_right"] = sum(right) / len(right)
    return out


def per_turn_means(
    actions: Sequence[ActionSpan], values: Sequence[float], name: str
) -> dict[int, float]:
    """Mean of ``values`` (one per action) over the actions called ``name``, per turn.

    A NaN value (an action with no kept tokens) is left out; turns without
    such an action, or with only NaN ones, are absent. Used for the reasoner's
    per-turn think entropy (impact, eq. 8) and the entropy-trajectory plots.
    """
    sums: dict[int, list[float]] = {}
    for action, value in zip(actions, values, strict=True):
        if action.name == name and not math.isnan(value):
            sums.setdefault(action.turn, []).append(float(value))
    return {turn: sum(v) / len(v) for turn, v in sorted(sums.items())}


def action_clarities(
    actions: Sequence[ActionSpan],
    mean_entropies: Sequence[float],
    turn_docs: Sequence[Sequence[str]],
    golds: Golds,
) -> list[float]:
    """Eq. 7 per verifier action: ``exp(−H̄)·1[gold in its step's docs]·(2·1[gold in action] − 1)``.

    An action with no kept tokens (NaN mean entropy) gets NaN: it has no clarity.

    Args:
        actions: the verifier's critique actions (``split_actions``).
        mean_entropies: each action's mean token entropy under the sampling policy
            (``core.actions.action_means``).
        turn_docs: documents per verifier message (``verifier_turn_docs``).
        golds: the question's gold answers.
    """
    return [
        clarity(h, gold_in_text(golds, list(turn_docs[a.turn])), gold_in_text(golds, a.text))
        for a, h in zip(actions, mean_entropies, strict=True)
    ]
