"""GAR discriminator SFT data: a grounded judge labels reasoning slices sound or unsound.

GAR §3/§4.1 has GPT-o4-mini write, per slice, a brief analysis, a yes/no
judgment and a concise rationale, then downsamples the majority label to 1:1.
No machine here reaches an API model, but the offline world knows the truth,
so a deterministic judge checks each slice against the question's gold fact
chain (``record.metadata["chain"]``) and the passages the trajectory retrieved
before the slice (what the policy had read when it wrote it).

The judge's rules (how this departs from the paper's LLM judge):

- It reads *world terms* only: entity names and aliases, professions and
  industries (``WorldLexicon``, matched case-sensitively as whole words), and
  numbers of two or more digits (commas ignored). Anything else is not checkable.
- Unsound, in this order of precedence:
  1. a contradiction: in one sentence, a chain hop's subject appears with a
     term of the same kind as that hop's gold object, other than the object,
     that nothing explains (not the two ends of another hop both named in the
     sentence, not a retrieved passage sentence naming both) — "the
     profession of X is poet" when X was a diplomat;
  2. a wrong answer: a sentence saying "answer" names a term of the gold
     answer's kind and no gold answer;
  3. an ungrounded term: one that neither the question, the chain, the gold
     answers nor the retrieved passages mention (a hallucinated entity).
- Sound otherwise. A slice naming no world term is sound only if it works on
  the question (it uses a chain relation, e.g. "born in", or a content word
  of the question); otherwise it drifts and is unsound.
- Known blind spot: a wrong value that happens to co-occur with the subject
  in some retrieved passage sentence passes, as the passages are the world's
  own statements.

On your own data (a corpus and questions with golden answers, no world) the
same judge runs on ``answer_lexicon``: the checkable terms are the golden
answers of the questions and numbers, and with no fact chain rule 1 never
fires; a slice is unsound when it offers another question's answer as the
answer (rule 2) or names an answer that neither the question, its golden
answers nor the retrieved passages hold (rule 3).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from random import Random

from advrag.agents.types import Trajectory
from advrag.curation.demonstrations import fact_phrase, relation_words
from advrag.curation.slicing import slices_with_evidence
from advrag.datasets.records import QARecord
from advrag.datasets.world import World

NUMBER = "number"
ANSWER = "answer"
"""The kind of a golden answer in ``answer_lexicon`` (your data has no entity kinds)."""
_ORDINARY_ANSWERS = frozenset({"yes", "no"})
DISCRIMINATOR_TEMPLATE = (
    "You check one slice of a step-by-step answer to a question against the passages retrieved "
    "before it. The slice is sound when every fact it states is correct and it moves toward "
    "the answer. Reply in exactly this form:\nAnalysis: <one or two short sentences>\nVerdict: "
    "<yes if the slice is sound, no if not>\nRationale: <one short sentence>\n\nQuestion: "
    "{question}\nPassages retrieved before the slice:\n{evidence}\nSlice: {slice}\n"
)
NO_EVIDENCE = "(none)"
_NUMBER_RE = re.compile(r"\b(?:\d{1,3}(?:,\d{3})+|\d{2,})\b")
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+")
_ANSWER_RE = re.compile(r"\banswer\b", re.IGNORECASE)
_VERDICT_RE = re.compile(r"verdict\s*[:\-]\s*[*_\"']*\s*(yes|no)\b", re.IGNORECASE)
_LABEL_RE = re.compile(r"^[\s*_#>-]*(?:analysis|rationale)\s*[*_]*\s*:[*_]*\s*", re.IGNORECASE)
_MARKDOWN = "*_ \t"
_MARKS = "\"'.,;:-"  # punctuation between a verdict and what follows it
_QUESTION_WORD_RE = re.compile(r"[a-z]{4,}")
_GENERIC = frozenset({"which", "what", "where", "when", "does", "that", "this", "with",
                      "from", "into", "than"})
_SHOWN = 6  # terms listed in an analysis, so the SFT target stays short (GAR's K = 128)


@dataclass(frozen=True)
class SliceLabel:
    """One judged slice: the verdict and the judge's analysis and rationale."""

    slice: str
    sound: bool
    analysis: str
    rationale: str


@dataclass(frozen=True)
class WorldLexicon:
    """The world's checkable words: surface form → (canonical name, kind)."""

    entries: Mapping[str, tuple[str, str]]

    @cached_property
    def _pattern(self) -> re.Pattern[str]:
        surfaces = sorted(self.entries, key=lambda s: (-len(s), s))
        return re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, surfaces)) + r")(?!\w)")

    def terms(self, text: str) -> list[str]:
        """Canonical world terms named in ``text`` (numbers as plain digits), first-seen order."""
        found = [(m.start(), m.group().replace(",", "")) for m in _NUMBER_RE.finditer(text)]
        if self.entries:
            found += [(m.start(), self.entries[m.group()][0]) for m in self._pattern.finditer(text)]
        return list(dict.fromkeys(term for _, term in sorted(found)))

    def kind(self, term: str) -> str | None:
        """``"number"``, an entity kind (``"city"`` ...), an attribute name, or None."""
        if term.isdigit():
            return NUMBER
        entry = self.entries.get(term)
        return entry[1] if entry else None


def answer_lexicon(records: Iterable[QARecord]) -> WorldLexicon:
    """Your data's checkable words, for a corpus and QA files without a world: every golden
    answer of ``records`` (kind ``"answer"``), so the judge can tell a slice that offers
    another question's answer, or names one that nothing it read holds. Yes/no answers and
    answers of one character are left out: they are ordinary words."""
    entries: dict[str, tuple[str, str]] = {}
    for record in records:
        for answer in record.golden_answers:
            text = answer.strip()
            if len(text) > 1 and text.lower() not in _ORDINARY_ANSWERS:
                entries[text] = (text, ANSWER)
    return WorldLexicon(entries)


def world_lexicon(world: World) -> WorldLexicon:
    """Names and aliases of every entity (kind = entity kind) plus its text attributes."""
    entries: dict[str, tuple[str, str]] = {}
    for ent in world.entities.values():
        for surface in (ent.name, *ent.aliases):
            entries[surface] = (ent.name, ent.kind)
        for attr, value in ent.attrs.items():
            if isinstance(value, str):
                entries[value] = (value, attr)
    return WorldLexicon(entries)


@dataclass(frozen=True)
class _Hop:
    subject: str
    relation: str
    obj: str
    kind: str | None


@dataclass
class _Evidence:
    """What a slice is checked against, built once per trajectory."""

    lexicon: WorldLexicon
    hops: list[_Hop]
    gold: set[str]
    on_path: set[str]
    retrieved: set[str]
    passage_sentences: list[set[str]]
    cue_words: set[str]


def _first_term(lexicon: WorldLexicon, text: str) -> str:
    """The canonical term ``text`` names (itself when the lexicon does not know it)."""
    found = lexicon.terms(text)
    return found[0] if found else text


def _evidence(record: QARecord, passages: Sequence[str], lexicon: WorldLexicon) -> _Evidence:
    """Gold hops, gold answers, on-path terms and the retrieved passages' terms."""
    hops = []
    for hop in record.metadata.get("chain") or []:
        obj = _first_term(lexicon, hop["object"])
        hops.append(_Hop(_first_term(lexicon, hop["subject"]), hop["relation"], obj,
                         lexicon.kind(obj)))
    gold = {t for answer in record.golden_answers for t in lexicon.terms(answer)}
    on_path = gold | set(lexicon.terms(record.question))
    on_path |= {t for h in hops for t in (h.subject, h.obj)}
    sentences = [set(lexicon.terms(s)) for p in passages for s in _SENTENCE_RE.split(p)]
    question_words = set(_QUESTION_WORD_RE.findall(record.question.lower())) - _GENERIC
    return _Evidence(
        lexicon=lexicon, hops=hops, gold=gold, on_path=on_path,
        retrieved=set().union(*sentences),
        passage_sentences=[s for s in sentences if len(s) > 1],
        cue_words=question_words | {relation_words(h.relation) for h in hops},
    )


def _explained(ev: _Evidence, hop: _Hop, term: str, named: set[str], claimed: bool) -> bool:
    """Whether ``term`` next to ``hop.subject`` is accounted for by the gold facts or passages.

    A sentence that states the hop's own fact (``claimed``: "the population of X is …") is
    held to the hop's object: another value that the passages pair with X (the year X was
    founded) does not account for it there."""
    if term in (hop.subject, hop.obj):
        return True
    if any(term in (h.subject, h.obj) and {h.subject, h.obj} <= named for h in ev.hops):
        return True
    return not claimed and any({hop.subject, term} <= sentence
                               for sentence in ev.passage_sentences)


def _contradiction(ev: _Evidence, sentence: str) -> str | None:
    """Rationale for the first term that contradicts a gold hop in ``sentence``, else None."""
    named = ev.lexicon.terms(sentence)
    for hop in ev.hops:
        if hop.kind is None or hop.subject not in named:
            continue
        claimed = fact_phrase(hop.relation, hop.subject).lower() in sentence.lower()
        for term in named:
            if ev.lexicon.kind(term) == hop.kind and not _explained(ev, hop, term, set(named),
                                                                    claimed):
                return (f"It gives {term} for {hop.subject}, but "
                        f"{fact_phrase(hop.relation, hop.subject)} is {hop.obj}.")
    return None


def _wrong_answer(ev: _Evidence, sentence: str) -> str | None:
    """Rationale when ``sentence`` offers a non-gold term of the gold's kind as the answer."""
    if not _ANSWER_RE.search(sentence):
        return None
    kinds = {ev.lexicon.kind(g) for g in ev.gold} - {None}
    named = ev.lexicon.terms(sentence)
    offered = [t for t in named if ev.lexicon.kind(t) in kinds]
    if offered and not ev.gold & set(named):
        return f"It gives {offered[0]} as the answer, but the answer is {min(ev.gold)}."
    return None


def _unsound_reason(ev: _Evidence, text: str, named: list[str]) -> str | None:
    """The first rule the slice breaks (contradiction, wrong answer, ungrounded), else None."""
    sentences = _SENTENCE_RE.split(text)
    for check in (_contradiction, _wrong_answer):
        reason = next((r for s in sentences if (r := check(ev, s))), None)
        if reason:
            return reason
    ungrounded = [t for t in named if t not in ev.on_path and t not in ev.retrieved]
    if ungrounded:
        return (f"{ungrounded[0]} appears in neither the question, its facts nor the "
                "retrieved passages.")
    return None


def _judge(text: str, ev: _Evidence) -> SliceLabel:
    """Label one slice against prepared evidence (see the module docstring for the rules)."""
    named = ev.lexicon.terms(text)
    if not named:
        lowered = text.lower()
        cues = sorted(w for w in ev.cue_words if re.search(rf"\b{re.escape(w)}\b", lowered))
        analysis = "The slice names no entity or number."
        if cues:
            return SliceLabel(text, True, analysis, f"It works on the question ({cues[0]}).")
        return SliceLabel(text, False, analysis, "It does not address the question.")
    analysis = f"The slice names {', '.join(named[:_SHOWN])}."
    reason = _unsound_reason(ev, text, named)
    if reason:
        return SliceLabel(text, False, analysis, reason)
    return SliceLabel(text, True, analysis, "Its claims agree with the question's facts and "
                                             "the retrieved passages.")


@dataclass(frozen=True)
class SliceQuery:
    """One slice to judge with what a judge may check it against: the question's record and
    the episode's ``env`` segments returned before the slice (what the policy had read)."""

    slice: str
    record: QARecord
    passages: tuple[str, ...]


SliceJudge = Callable[[Sequence[SliceQuery]], list[SliceLabel | None]]
"""A judge labels many slices in one call (an LLM judge batches them); None = no usable label."""


def slice_queries(trajectory: Trajectory, record: QARecord, count_tokens: Callable[[str], int],
                  max_tokens: int = 320) -> list[SliceQuery]:
    """The policy's reasoning cut into slices (``slicing.MIN_SLICE_TOKENS`` to ``max_tokens``
    tokens each, as GAR's RL step cuts rollouts by default), each with what it was written
    after, ready to judge."""
    return [SliceQuery(text, record, read)
            for text, read in slices_with_evidence(trajectory, count_tokens, max_tokens)]


def label_slice(text: str, record: QARecord, passages: Sequence[str],
                lexicon: WorldLexicon) -> SliceLabel:
    """Judge one slice of reasoning for ``record`` given the retrieved passage texts."""
    return _judge(text, _evidence(record, passages, lexicon))


def grounded_judge(lexicon: WorldLexicon) -> SliceJudge:
    """The offline world's judge (module docstring); evidence is built once per record and passages."""
    def judge(queries: Sequence[SliceQuery]) -> list[SliceLabel | None]:
        evidence: dict[tuple[str, tuple[str, ...]], _Evidence] = {}
        labels: list[SliceLabel | None] = []
        for query in queries:
            key = (query.record.id, query.passages)
            if key not in evidence:
                evidence[key] = _evidence(query.record, query.passages, lexicon)
            labels.append(_judge(query.slice, evidence[key]))
        return labels

    return judge


def balance_labels(labels: Iterable[SliceLabel], seed: int) -> list[SliceLabel]:
    """Downsample the larger class to a 1:1 sound/unsound ratio (GAR §3), keeping input order.

    Deterministic for a seed; empty when either class is empty.
    """
    labels = list(labels)
    sound = [i for i, label in enumerate(labels) if label.sound]
    unsound = [i for i, label in enumerate(labels) if not label.sound]
    n = min(len(sound), len(unsound))
    rng = Random(seed)
    keep = sorted(rng.sample(sound, n) + rng.sample(unsound, n))
    return [labels[i] for i in keep]


def sft_target(label: SliceLabel) -> str:
    """The discriminator's training target: analysis, then verdict, then rationale."""
    verdict = "yes" if label.sound else "no"
    return f"Analysis: {label.analysis}\nVerdict: {verdict}\nRationale: {label.rationale}"


def parse_verdict(text: str) -> bool | None:
    """True/False from the first ``Verdict: yes|no`` in the discriminator's output; None if absent."""
    match = _VERDICT_RE.search(text) if isinstance(text, str) else None
    return match.group(1).lower() == "yes" if match else None


def split_judgment(text: str) -> tuple[str, bool, str] | None:
    """``(analysis, sound, rationale)`` of a judgment in ``sft_target``'s form; None without a verdict.

    The verdict is ``parse_verdict``'s (the first ``Verdict: yes|no``); the analysis
    is the text before it, the rationale the first non-empty line after it, each
    without its label or markdown ("" when missing).
    """
    match = _VERDICT_RE.search(text) if isinstance(text, str) else None
    if match is None:
        return None
    analysis = _LABEL_RE.sub("", " ".join(text[:match.start()].split()), count=1)
    after = text[match.end():].lstrip(_MARKS + _MARKDOWN)
    line = next((ln for ln in after.splitlines() if ln.strip(_MARKS + _MARKDOWN)), "")
    rationale = _LABEL_RE.sub("", line.strip(), count=1)
    return analysis.strip(_MARKDOWN), match.group(1).lower() == "yes", rationale.strip(_MARKDOWN)


@dataclass(frozen=True)
class Evidence:
    """The passages a judge prompt carries, and how many earlier ones its token cap left out."""

    text: str
    left_out: int


def information_passages(env_segments: Iterable[str]) -> list[str]:
    """The passages of the ``<information>`` blocks among an episode's ``env`` segments, one
    per line as the policy read them (``Doc n(Title: t) text``, or a UR² summary), repeats
    left out; hints are not evidence."""
    passages: list[str] = []
    for segment in env_segments:
        body = segment.strip()
        if body.startswith("<information>") and body.endswith("</information>"):
            inner = body[len("<information>"):-len("</information>")]
            passages += [line.strip() for line in inner.splitlines() if line.strip()]
    return list(dict.fromkeys(passages))


def capped_evidence(passages: Sequence[str], count_tokens: Callable[[str], int],
                    max_tokens: int) -> Evidence:
    """The latest ``passages`` that fit in ``max_tokens`` (counted passage by passage, a line
    break each), in their order, and the number of earlier ones left out."""
    kept: list[str] = []
    used = 0
    for passage in reversed(passages):
        used += count_tokens(passage) + 1
        if used > max_tokens:
            break
        kept.append(passage)
    return Evidence("\n".join(reversed(kept)) or NO_EVIDENCE, len(passages) - len(kept))


def discriminator_prompt(question: str, slice_text: str, evidence: str = NO_EVIDENCE) -> str:
    """The discriminator's user message for one slice and the passages retrieved before it
    (``capped_evidence(...).text``); wrap it with the chat template."""
    return DISCRIMINATOR_TEMPLATE.format(question=question, slice=slice_text, evidence=evidence)
