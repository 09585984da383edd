"""GAR slicing: cut a reasoning trace into short, coherent slices for the discriminator.

GAR §3: "segment the reasoning trajectory based on delimiters, then merge
adjacent segments until a clear new semantic beginning is identified or a
predefined token length L = 320 is reached." The paper names neither the
delimiters nor what a "new semantic beginning" is, and has no public code.
Our reading:

- Delimiters: line breaks and sentence ends (``.``, ``!`` or ``?`` followed by
  whitespace). Every segment therefore starts at a sentence or line start.
- A new semantic beginning is a segment that starts with a discourse cue
  (``DISCOURSE_CUES``: the cues reasoning models use to open a step, such as
  "So", "Wait", "Therefore") or that follows a blank line. The blank line is
  our addition: ``reasoning_text`` separates the policy's turns (one
  ``<think>`` per search round, with new evidence in between) by one, so a
  slice never straddles two retrieval rounds.
- The budget L is counted with the caller's tokenizer on the merged text. A
  single segment over L is split at whitespace into pieces of at most L
  tokens (a lone word over L stays whole: there is no whitespace to cut at).

Slices are stripped substrings of the text, in order: the text is each
slice with only whitespace between them, so nothing but whitespace is lost.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from advrag.agents.protocol import extract_tags
from advrag.agents.types import Trajectory

DISCOURSE_CUES = ("So", "Therefore", "Thus", "Hence", "Wait", "However", "Alternatively",
                  "Next", "First", "Second", "Then", "Finally")
"""Words that open a new reasoning step when they start a sentence (capitalised, whole word)."""

_SEPARATOR = re.compile(r"\s*\n\s*|(?<=[.!?])\s+")
_CUE = re.compile(r"[\W_]*(?:" + "|".join(DISCOURSE_CUES) + r")\b")
_WORD = re.compile(r"\S+")

Span = tuple[int, int]


def _segments(text: str) -> list[tuple[Span, bool]]:
    """Stripped segment spans, each with whether it opens a new semantic step."""
    out: list[tuple[Span, bool]] = []
    start, paragraph = 0, False
    for sep in [*_SEPARATOR.finditer(text), None]:
        end = sep.start() if sep else len(text)
        piece = text[start:end]
        lead = len(piece) - len(piece.lstrip())
        if piece.strip():
            begins = paragraph or _CUE.match(piece, lead) is not None
            out.append(((start + lead, start + len(piece.rstrip())), begins))
            paragraph = False
        if sep:
            paragraph = paragraph or sep.group().count("\n") >= 2
            start = sep.end()
    return out


def _fit(text: str, span: Span, count_tokens: Callable[[str], int], max_tokens: int) -> list[Span]:
    """Split one over-long span at whitespace into greedy pieces of at most ``max_tokens``."""
    words = [(m.start(), m.end()) for m in _WORD.finditer(text, span[0], span[1])]
    pieces: list[Span] = []
    for word in words:
        if pieces and count_tokens(text[pieces[-1][0]:word[1]]) <= max_tokens:
            pieces[-1] = (pieces[-1][0], word[1])
        else:
            pieces.append(word)
    return pieces


def slice_reasoning(
    text: str, count_tokens: Callable[[str], int], max_tokens: int = 320
) -> list[str]:
    """Cut ``text`` into slices of at most ``max_tokens`` tokens (GAR's L), in order.

    Adjacent segments merge until one opens a new semantic step or the merged
    slice would exceed the budget (see the module docstring). Deterministic.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    spans: list[Span] = []
    current: Span | None = None
    for span, begins in _segments(text):
        merged = (current[0], span[1]) if current is not None and not begins else None
        if merged and count_tokens(text[merged[0]:merged[1]]) <= max_tokens:
            current = merged
            continue
        if current is not None:
            spans.append(current)
        current = span
        if count_tokens(text[span[0]:span[1]]) > max_tokens:
            *full, current = _fit(text, span, count_tokens, max_tokens)
            spans.extend(full)
    if current is not None:
        spans.append(current)
    return [text[a:b] for a, b in spans]


def _outside_tags(text: str) -> str:
    """``text`` with every tagged span (tags and content) removed: plain chain-of-thought."""
    kept, pos = [], 0
    for tag in extract_tags(text):
        if tag.start >= pos:
            kept.append(text[pos:tag.start])
            pos = tag.end
    kept.append(text[pos:])
    return "".join(kept).strip()


def _thoughts(text: str) -> list[str]:
    """Contents of the ``<think>`` spans not nested in another tag (e.g. an ``<information>``)."""
    tags = extract_tags(text)
    outer = [t for t in tags if not any(o.start < t.start and t.end <= o.end for o in tags)]
    return [t.content.strip() for t in outer if t.name == "think" and t.content.strip()]


def reasoning_text(trajectory: Trajectory) -> str:
    """The policy's own reasoning: its ``<think>`` contents, one paragraph per think block.

    Only ``source == "policy"`` segments are read, so retrieved documents and
    prompts never count as reasoning. With no think tag at all (a plain CoT
    answer), the policy's text outside any tag is the reasoning.
    """
    policy = [s.text for s in trajectory.segments if s.source == "policy"]
    thoughts = [thought for text in policy for thought in _thoughts(text)]
    if thoughts:
        return "\n\n".join(thoughts)
    return "\n\n".join(plain for text in policy if (plain := _outside_tags(text)))
