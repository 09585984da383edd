"""What UR²'s reward counts in a transcript: format violations, valid queries, fallback faults.

The one place these are defined (UR² §3.2.2 lists "malformed tags, overlength
queries, missing retrieval, or illegal tokens" as violations):

- a **format violation** is a turn with a protocol error (``Trajectory.format_errors``:
  malformed or missing tags, a forced answer that never closed ``<answer>``), each
  query of ``QUERY_WORD_LIMIT`` words or more, or empty, and — when the prompt asked
  for retrieval — a transcript with no search at all;
- a **valid query** is a search of 1 to ``QUERY_WORD_LIMIT`` − 1 words that the
  summariser did not reject (searches answered with the fallback message are
  subtracted: a rejected query earns nothing and is penalised as a fallback fault);
- a **fallback fault** is a search answered with the summariser's fallback message
  (``Trajectory.fallbacks``; always 0 without a summariser).

How this departs from the paper: "illegal tokens" has no counterpart in our tag
grammar beyond what ``format_errors`` already counts. The word limit is the one
UR²'s prompts state ("less than 20 words", so a 20-word query is overlength), and the
policy is told it: ``agents.prompts.ur2_search_prompt`` words its rule from the same
constant. Words are what ``str.split`` separates.
"""

from __future__ import annotations

from dataclasses import dataclass

from advrag.agents.types import Trajectory

QUERY_WORD_LIMIT = 20
"""A valid query has FEWER words than this (UR² D.2: "less than 20 words"); the prompt says so."""


@dataclass(frozen=True)
class UR2Counts:
    """The three counts ``core.rewards.ur2_reward`` reads, for one transcript."""

    format_violations: int
    valid_queries: int
    fallback_faults: int


def ur2_counts(trajectory: Trajectory, *, retrieval_expected: bool = True) -> UR2Counts:
    """Count ``trajectory``'s violations, valid queries and fallback faults (module docstring)."""
    well_sized = [q for q in trajectory.queries if 1 <= len(q.split()) < QUERY_WORD_LIMIT]
    bad_queries = len(trajectory.queries) - len(well_sized)
    missing_retrieval = int(retrieval_expected and not trajectory.queries)
    return UR2Counts(
        format_violations=trajectory.format_errors + bad_queries + missing_retrieval,
        valid_queries=max(len(well_sized) - trajectory.fallbacks, 0),
        fallback_faults=trajectory.fallbacks,
    )
