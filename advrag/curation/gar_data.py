"""GAR discriminator SFT data: judge-labelled reasoning slices, sound and unsound, split by question.

GAR §3/§4.1 slices DeepSeek-R1 chains of thought for 10 % of the training
questions, has GPT-o4-mini label each slice yes/no with an analysis and a
rationale, and downsamples the majority label to 1:1. How this departs:

- The reference reasoning is the grounded demonstrations
  (``demonstrations.build_demonstrations``: the world's hop chains with the
  real retriever's passages). The labeller is pluggable (``judge``): the
  grounded judge (``gar_labels``, the default offline) or an LLM behind any
  OpenAI-compatible server (``gar_llm_judge``), whose malformed replies are
  counted there and their slices left out.
- Demonstrations state only true facts, so unsound slices come from a
  corrupted copy of each demonstration: one hop's gold object (chosen by the
  seed) replaced everywhere in the policy's text by another world value of the
  same kind (``substitutes``: another entity or attribute value from the
  lexicon; for a number, another question's value of the same relation, else
  any chain number). Only the copy's unsound slices are kept: its sound ones
  repeat the demonstration's.
- Policy rollouts, when given, add every slice the judge labels, either way.
- The split is by question (``heldout_fraction`` of them, seeded), so no
  question's slices sit on both sides; each split is balanced 1:1 on its own.

A row: ``{"id", "question_id", "question", "slice", "evidence", "sound", "analysis",
"rationale", "source", "split"}`` with ``evidence`` the passages the episode had
retrieved before the slice (``gar_labels.information_passages``: what the
discriminator's prompt shows it, within its token cap), ``source`` one of
``SOURCES`` and ``split`` ``"train"`` or ``"heldout"``.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from random import Random

from advrag.agents.types import Segment, Trajectory
from advrag.curation.gar_labels import (
    NUMBER,
    Evidence,
    SliceJudge,
    SliceLabel,
    SliceQuery,
    WorldLexicon,
    answer_lexicon,
    balance_labels,
    capped_evidence,
    discriminator_prompt,
    grounded_judge,
    information_passages,
    slice_queries,
    world_lexicon,
)
from advrag.datasets.records import QARecord
from advrag.datasets.world import Entity, World, WorldConfig

SOURCES = ("demonstration", "corrupted", "rollout")
SPLITS = ("train", "heldout")


def read_world_lexicon(world_dir: str | Path) -> WorldLexicon:
    """The lexicon of the world written to ``world_dir`` (its ``world.json`` entities)."""
    doc = json.loads((Path(world_dir) / "world.json").read_text(encoding="utf-8"))
    entities = {e["id"]: Entity(**e) for e in doc["entities"]}
    return world_lexicon(World(WorldConfig(**doc["config"]), entities, [], {}))


def read_lexicon(dataset_dir: str | Path, records: Iterable[QARecord]) -> WorldLexicon:
    """The judge's lexicon: the world's when ``dataset_dir`` holds a generated world (its
    ``world.json``), else ``answer_lexicon`` of ``records`` (your files: golden answers)."""
    if (Path(dataset_dir) / "world.json").is_file():
        return read_world_lexicon(dataset_dir)
    return answer_lexicon(records)


def record_facts(record: QARecord, policy_text: str | None = None) -> list[dict]:
    """What a corruption may replace: the record's hop chain, or, for a question without one
    (your data), its golden answers as facts of relation ``"answer"`` — only those
    ``policy_text`` names, when given."""
    chain = record.metadata.get("chain")
    if chain:
        return chain
    return [{"subject": record.question, "relation": "answer", "object": answer}
            for answer in record.golden_answers
            if policy_text is None or answer in policy_text]


def substitutes(lexicon: WorldLexicon, records: Iterable[QARecord]) -> dict[str, list[str]]:
    """Values a corruption may put in, by kind (sorted).

    Entity kinds, text attributes and your data's answers: the lexicon's canonical
    terms. Numbers: the values the records' facts (``record_facts``) state, under
    ``"number:<relation>"``, and all of them under ``"number"``.
    """
    pool: dict[str, set[str]] = defaultdict(set)
    for canonical, kind in lexicon.entries.values():
        pool[kind].add(canonical)
    for record in records:
        for hop in record_facts(record):
            if lexicon.kind(_canonical(lexicon, hop["object"])) == NUMBER:
                pool[f"{NUMBER}:{hop['relation']}"].add(hop["object"])
                pool[NUMBER].add(hop["object"])
    return {kind: sorted(values) for kind, values in pool.items()}


def _canonical(lexicon: WorldLexicon, text: str) -> str:
    """The first world term ``text`` names, or ``text`` itself."""
    found = lexicon.terms(text)
    return found[0] if found else text


def replacement(lexicon: WorldLexicon, facts: Sequence[dict], hop: dict,
                pool: dict[str, list[str]], rng: Random) -> str | None:
    """Another value of the kind of ``hop``'s object, off the question's ``facts`` (None:
    there is none)."""
    on_chain = {_canonical(lexicon, h[end]) for h in facts for end in ("subject", "object")}
    kind = lexicon.kind(_canonical(lexicon, hop["object"]))
    keys = [f"{NUMBER}:{hop['relation']}", NUMBER] if kind == NUMBER else [kind]
    for key in keys:
        values = [v for v in pool.get(key, []) if _canonical(lexicon, v) not in on_chain]
        if values:
            return rng.choice(values)
    return None


def corrupted_copy(trajectory: Trajectory, record: QARecord, lexicon: WorldLexicon,
                   pool: dict[str, list[str]], rng: Random) -> Trajectory | None:
    """A copy of a demonstration with one fact's gold object (a hop's, or for your data a
    golden answer) replaced in the policy's text.

    The fact is drawn from ``rng`` (``record_facts``); None when no substitute exists or
    the object does not appear in the policy's text.
    """
    facts = record_facts(record, trajectory.policy_text())
    if not facts:
        return None
    hop = facts[rng.randrange(len(facts))]
    wrong = replacement(lexicon, facts, hop, pool, rng)
    if wrong is None or hop["object"] not in trajectory.policy_text():
        return None
    segments = [Segment(s.text.replace(hop["object"], wrong) if s.source == "policy" else s.text,
                        s.source) for s in trajectory.segments]
    return dataclasses.replace(trajectory, segments=segments)


def record_of(trajectory: Trajectory, by_question: dict[str, QARecord]) -> QARecord:
    """The record whose question the trajectory's prompt asks (``Question: <q>\\n``)."""
    prompt = "".join(s.text for s in trajectory.segments if s.source == "prompt")
    found = [r for q, r in by_question.items() if f"Question: {q}\n" in prompt]
    if len(found) != 1:
        raise ValueError(f"{len(found)} records match the prompt {prompt[-200:]!r}")
    return found[0]


def _row(label: SliceLabel, query: SliceQuery, source: str) -> dict:
    """One slice row, before its id and split are known."""
    record = query.record
    return {"question_id": record.id, "question": record.question, "slice": label.slice,
            "evidence": information_passages(query.passages), "sound": label.sound,
            "analysis": label.analysis, "rationale": label.rationale, "source": source}


def _judged_rows(trajectories: Sequence[tuple[Trajectory, str]], by_question: dict[str, QARecord],
                 judge: SliceJudge, count_tokens: Callable[[str], int],
                 max_tokens: int) -> list[dict]:
    """Every judged slice of every ``(trajectory, source)`` in one judge call; slices the judge
    gave no label are dropped, and of a corrupted copy only the unsound ones are kept."""
    queries, sources = [], []
    for trajectory, source in trajectories:
        found = slice_queries(trajectory, record_of(trajectory, by_question), count_tokens,
                              max_tokens)
        queries += found
        sources += [source] * len(found)
    return [_row(label, query, source)
            for query, source, label in zip(queries, sources, judge(queries))
            if label is not None and (source != "corrupted" or not label.sound)]


def heldout_questions(question_ids: Iterable[str], fraction: float, seed: int) -> set[str]:
    """A seeded ``fraction`` of the distinct question ids (at least one, never all of several)."""
    ids = sorted(set(question_ids))
    Random(seed).shuffle(ids)
    n = round(fraction * len(ids))
    n = min(max(n, 1 if fraction > 0 else 0), max(len(ids) - 1, 0))
    return set(ids[:n])


def dev_and_measured(rows: Sequence[dict], fraction: float, seed: int
                     ) -> tuple[list[dict], list[dict]]:
    """The held-out rows parted by question: the dev rows (a seeded ``fraction`` of their
    questions), which early stopping reads to choose the epoch, and the others, the held-out
    measure; refused when fewer than two questions are held out (nothing to part)."""
    held = [r for r in rows if r["split"] == "heldout"]
    questions = {r["question_id"] for r in held}
    if len(questions) < 2:
        raise ValueError(f"the slice set holds {len(questions)} held-out question(s); early "
                         "stopping needs dev questions apart from the measured ones: raise "
                         "questions or heldout_fraction")
    dev = heldout_questions(questions, fraction, seed)
    return ([r for r in held if r["question_id"] in dev],
            [r for r in held if r["question_id"] not in dev])


def _balanced(rows: list[dict], seed: int) -> list[dict]:
    """``rows`` downsampled to 1:1 sound/unsound with ``balance_labels``, input order kept."""
    labels = [row_label(r) for r in rows]
    kept, out, i = balance_labels(labels, seed), [], 0
    for label in kept:  # kept is a subsequence of labels: walk both to find its rows
        while labels[i] != label:
            i += 1
        out.append(rows[i])
        i += 1
    return out


def _first_per_slice(rows: list[dict]) -> list[dict]:
    """``rows`` without a repeated (question, slice): the first row of each is kept."""
    seen: set[tuple[str, str]] = set()
    out = []
    for row in rows:
        key = (row["question_id"], row["slice"])
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


def _sources(records: Sequence[QARecord], demonstrations: Sequence[Trajectory],
             lexicon: WorldLexicon, corrupt: bool, rollouts: Sequence[Trajectory],
             seed: int) -> list[tuple[Trajectory, str]]:
    """``(trajectory, source)`` of the demonstrations, their corrupted copies and the rollouts."""
    by_question = {r.question: r for r in records}
    rng, pool = Random(seed), substitutes(lexicon, records)
    copies = [corrupted_copy(t, record_of(t, by_question), lexicon, pool, rng)
              for t in (demonstrations if corrupt else ())]
    return ([(t, "demonstration") for t in demonstrations]
            + [(t, "corrupted") for t in copies if t is not None]
            + [(t, "rollout") for t in rollouts])


def build_slice_set(
    records: Sequence[QARecord], demonstrations: Sequence[Trajectory], lexicon: WorldLexicon,
    count_tokens: Callable[[str], int], *, max_tokens: int, seed: int, corrupt: bool = True,
    rollouts: Sequence[Trajectory] = (), heldout_fraction: float = 0.2,
    judge: SliceJudge | None = None,
) -> list[dict]:
    """The discriminator's SFT rows (see the module docstring), deterministic for a seed.

    Trajectories are matched to ``records`` by the question in their prompt;
    slices are cut at ``max_tokens`` (GAR's L) as ``count_tokens`` counts.
    ``corrupt`` adds the corrupted copies' unsound slices. A (question, slice)
    seen twice keeps its first row (demonstrations, then copies, then rollouts).
    ``judge`` labels the slices (default: ``grounded_judge(lexicon)``); a slice it
    gives no label (an LLM judge's malformed reply) is left out.
    """
    by_question = {r.question: r for r in records}
    sources = _sources(records, demonstrations, lexicon, corrupt, rollouts, seed)
    rows = _first_per_slice(_judged_rows(sources, by_question, judge or grounded_judge(lexicon),
                                         count_tokens, max_tokens))
    held = heldout_questions((r["question_id"] for r in rows), heldout_fraction, seed)
    out = []
    for split in SPLITS:
        part = [r for r in rows if (r["question_id"] in held) == (split == "heldout")]
        out += [{**r, "split": split} for r in _balanced(part, seed)]
    return _with_ids(out)


def _with_ids(rows: list[dict]) -> list[dict]:
    """Rows with ids ``<question_id>/<source>/<n>`` (n counts per question and source)."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    out = []
    for row in rows:
        key = (row["question_id"], row["source"])
        out.append({"id": f"{key[0]}/{key[1]}/{counts[key]}", **row})
        counts[key] += 1
    return out


def row_label(row: dict) -> SliceLabel:
    """The judge's label a slice row carries."""
    return SliceLabel(row["slice"], row["sound"], row["analysis"], row["rationale"])


def row_prompt(row: dict, count_tokens: Callable[[str], int], evidence_tokens: int) -> Evidence:
    """A row's discriminator prompt (the user message: its question, the passages read before
    the slice within ``evidence_tokens``, the slice) as ``text``, and the passages left out."""
    evidence = capped_evidence(row["evidence"], count_tokens, evidence_tokens)
    return Evidence(discriminator_prompt(row["question"], row["slice"], evidence.text),
                    evidence.left_out)


def judgment_trajectory(prompt: str, chat_prompt: Callable[[str], str], target: str) -> Trajectory:
    """An SFT example: the chat-rendered discriminator ``prompt`` (``row_prompt``), then
    ``target`` as the policy's text (``sft_target(row_label(row))`` as the caller cut it, e.g.
    at K tokens)."""
    trajectory = Trajectory()
    trajectory.add(chat_prompt(prompt), "prompt")
    trajectory.add(target, "policy")
    return trajectory

