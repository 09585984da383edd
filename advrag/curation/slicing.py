"""GAR slicing: cut a reasoning trace into short, coherent slices for the discriminator.

GAR §3: "segment the reasoning trajectory based on delimiters, then merge
adjacent segments until a clear new semantic beginning is identified or a
predefined token length L = 320 is reached." App. F.1 names the delimiters —
line breaks ("\\n") and discourse cues such as "Wait", "Since" and
"Therefore" — and adds a token-length range so that slices are neither
"excessively short or long". It gives no floor for the range and has no public
code. Our reading:

- Delimiters: line breaks, and sentence ends (``.``, ``!`` or ``?`` followed by
  whitespace). The sentence ends are ours: the world's reasoning is short
  paragraphs without line breaks, and without them a paragraph over L could
  only be cut mid-sentence. Every segment therefore starts at a sentence or
  line start.
- A new semantic beginning is a segment that starts with a discourse cue
  (``DISCOURSE_CUES``: the paper's "Wait", "Since", "Therefore", and the other
  words reasoning models open a step with, such as "So", "However") or that
  follows a blank line. The blank line is our addition: ``reasoning_text``
  separates the policy's turns (one ``<think>`` per search round, with new
  evidence in between) by one.
- The range is [``min_tokens``, ``max_tokens`` = L]. A slice shorter than the
  minimum keeps absorbing the next segments even across a new semantic
  beginning (a turn boundary included); then, left to right, a slice still
  short is joined to its neighbour — each merge only while it stays within L.
  A slice is therefore shorter than the minimum only when neither neighbour
  could take it, or the whole text is that short. The default minimum,
  ``MIN_SLICE_TOKENS`` = 16, is ours: about one sentence of the world's
  reasoning (a plan or fact sentence is 9 to 20 SmolLM2 tokens), so no slice is
  a lone fragment such as "I need the birth year of X.".
- The budget is counted with the caller's tokenizer on the merged text. A
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

DISCOURSE_CUES = ("Wait", "Since", "Therefore", "So", "Thus", "Hence", "However",
                  "Alternatively", "Next", "First", "Second", "Then", "Finally")
"""Words that open a new reasoning step when they start a sentence (capitalised, whole word);
the first three are the ones GAR App. F.1 names."""

MIN_SLICE_TOKENS = 16
"""The range's floor (module docstring): shorter pieces merge with a neighbour."""

PARAGRAPH = "\n\n"
"""What ``reasoning_text`` puts between two think blocks (a new semantic beginning)."""
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


def _fit(text: str, span: Span, size: Callable[[Span], int], max_tokens: int) -> list[Span]:
    """Split one over-long span at whitespace into greedy pieces of at most ``max_tokens``."""
    words = [(m.start(), m.end()) for m in _WORD.finditer(text, span[0], span[1])]
    pieces: list[Span] = []
    for word in words:
        if pieces and size((pieces[-1][0], word[1])) <= max_tokens:
            pieces[-1] = (pieces[-1][0], word[1])
        else:
            pieces.append(word)
    return pieces


def _merged_segments(text: str, size: Callable[[Span], int], min_tokens: int,
                     max_tokens: int) -> list[Span]:
    """Segments merged until one opens a new step (once the slice has ``min_tokens``) or the
    slice would pass ``max_tokens``; a segment over ``max_tokens`` split at whitespace."""
    spans: list[Span] = []
    current: Span | None = None
    for span, begins in _segments(text):
        if current is not None and (not begins or size(current) < min_tokens):
            merged = (current[0], span[1])
            if size(merged) <= max_tokens:
                current = merged
                continue
        if current is not None:
            spans.append(current)
        current = span
        if size(span) > max_tokens:
            *full, current = _fit(text, span, size, max_tokens)
            spans.extend(full)
    return spans if current is None else [*spans, current]


def _joined_short(spans: list[Span], size: Callable[[Span], int], min_tokens: int,
                  max_tokens: int) -> list[Span]:
    """Each pair of neighbours joined, left to right, when one is under ``min_tokens`` and the
    join stays within ``max_tokens``: a slice left short has no neighbour that could take it."""
    out: list[Span] = []
    for span in spans:
        joined = (out[-1][0], span[1]) if out else None
        if joined and min(size(out[-1]), size(span)) < min_tokens and size(joined) <= max_tokens:
            out[-1] = joined
        else:
            out.append(span)
    return out


def slice_reasoning(text: str, count_tokens: Callable[[str], int], max_tokens: int = 320,
                    min_tokens: int = MIN_SLICE_TOKENS) -> list[str]:
    """Cut ``text`` into slices of ``min_tokens`` to ``max_tokens`` tokens (GAR's range and L),
    in order (see the module docstring). A minimum above ``max_tokens`` is taken as
    ``max_tokens``. Deterministic.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if min_tokens < 0:
        raise ValueError(f"min_tokens must be >= 0, got {min_tokens}")
    min_tokens = min(min_tokens, max_tokens)

    def size(span: Span) -> int:
        return count_tokens(text[span[0]:span[1]])

    spans = _merged_segments(text, size, min_tokens, max_tokens)
    return [text[a:b] for a, b in _joined_short(spans, size, min_tokens, max_tokens)]


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


def _paragraphs(trajectory: Trajectory) -> list[tuple[str, tuple[str, ...]]]:
    """The policy's reasoning paragraphs (``reasoning_text``'s), each with the ``env`` segments
    the episode had returned before it (the passages it could have read)."""
    read: list[str] = []
    thoughts, plain = [], []
    for segment in trajectory.segments:
        if segment.source == "env":
            read.append(segment.text)
        elif segment.source == "policy":
            thoughts += [(t, tuple(read)) for t in _thoughts(segment.text)]
            if text := _outside_tags(segment.text):
                plain.append((text, tuple(read)))
    return thoughts or plain


def reasoning_text(trajectory: Trajectory) -> str:
    """The policy's own reasoning: its ``<think>`` contents, one paragraph per think block.

    Only ``source == "policy"`` segments are read, so retrieved documents and
    prompts never count as reasoning. With no think tag at all (a plain CoT
    answer), the policy's text outside any tag is the reasoning.
    """
    return PARAGRAPH.join(text for text, _ in _paragraphs(trajectory))


def slices_with_evidence(trajectory: Trajectory, count_tokens: Callable[[str], int],
                         max_tokens: int = 320, min_tokens: int = MIN_SLICE_TOKENS,
                         ) -> list[tuple[str, tuple[str, ...]]]:
    """``slice_reasoning`` of the trajectory's reasoning, each slice with the ``env`` segments
    returned before its last paragraph: what the policy had read when it wrote the slice, so a
    judge can check the slice against the same evidence."""
    paragraphs = _paragraphs(trajectory)
    text = PARAGRAPH.join(p for p, _ in paragraphs)
    ends, end = [], 0
    for paragraph, _ in paragraphs:
        end += len(paragraph)
        ends.append(end)
        end += len(PARAGRAPH)
    out, cursor = [], 0
    for piece in slice_reasoning(text, count_tokens, max_tokens, min_tokens):
        cursor = text.index(piece, cursor) + len(piece)
        last = next(i for i, e in enumerate(ends) if cursor <= e)
        out.append((piece, paragraphs[last][1]))
    return out
