"""UR²'s task mixing (§3.1.2) and stage-1 pool (§3.2.2, App. C.5), the pure part: which
prompt an item gets in each stage, which items stage 1 trains on, and a mixed draw.

UR² mixes math with open-domain QA: hard math problems get the retrieval
prompt, the other math problems direct step-by-step reasoning, and QA always
gets retrieval "since these questions need external knowledge". Stage 1 trains
"on mathematical problems requiring retrieval calls in the specified format":
the math problems curation discarded (s < 0.2), every one with the retrieval
prompt, so each can earn the retrieval reward stage 1 pays. Here the offline
world's reasoning-only items (facts stated in the question, answer computed;
``metadata["needs_retrieval"] = False``) play the part of math, its regular
questions the part of QA. Without task mixing (Table 4's "w/o task mixing",
"retrieving for all samples") every item gets the retrieval prompt.

How this departs from the paper:

- the paper gives no share of reasoning-only items for the math + QA mixture
  (only "an overall 1:1" between the two prompt kinds for its multiple-choice
  mixture, which is not implemented here); ``reasoning_share`` is the caller's
  config value, rounded with largest remainders;
- an item's level is read from ``metadata["level"]`` (``"easy"``,
  ``"medium"``, ``"hard"``; None or absent: unscored, or filtered below hard) and
  None counts as not hard in stage 2 (filtered items train in stage 1);
- a record without ``needs_retrieval`` in its metadata needs retrieval (every
  regular world question does: its facts are fictional);
- when one pool is too small for its share, the other fills the gap (as
  ``sample_by_difficulty`` does), so the draw has ``min(n, available)`` items.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence

from advrag.curation.difficulty import LEVELS, level_counts
from advrag.datasets.records import QARecord


def prompt_mode(level: str | None, needs_retrieval: bool) -> str:
    """``"retrieval"`` or ``"reasoning"`` (direct step-by-step) for one item (UR² §3.1.2).

    An item that needs retrieval always gets the retrieval prompt; a reasoning-only
    item gets it only when hard, and direct reasoning otherwise (easy, medium, unscored).
    """
    if level is not None and level not in LEVELS:
        raise ValueError(f"difficulty level must be one of {LEVELS} or None, got {level!r}")
    return "retrieval" if needs_retrieval or level == "hard" else "reasoning"


def needs_search(record: QARecord) -> bool:
    """Whether task mixing gives ``record`` the retrieval prompt, from its metadata
    (``prompt_mode``)."""
    meta = record.metadata
    return prompt_mode(meta.get("level"), meta.get("needs_retrieval", True)) == "retrieval"


def gets_retrieval_prompt(record: QARecord, stage: int, *, task_mixing: bool = True) -> bool:
    """Whether ``record`` gets the retrieval prompt in UR² stage ``stage`` (1 or 2).

    Stage 1: always (it pays for retrieval in the specified format). Stage 2: by task
    mixing (``needs_search``), or always without it ("w/o task mixing").
    """
    if stage not in (1, 2):
        raise ValueError(f"UR² has stages 1 and 2, got stage {stage!r}")
    return stage == 1 or not task_mixing or needs_search(record)


def stage1_pool(filtered: Sequence[QARecord]) -> list[QARecord]:
    """Stage 1's questions among those curation filtered (s < 0.2): the reasoning-only ones
    (App. C.5: "the discarded math training samples"); filtered QA items are not in it."""
    return [r for r in filtered if not r.metadata.get("needs_retrieval", True)]


def mix_tasks(qa_records: Sequence[QARecord], reasoning_records: Sequence[QARecord],
              reasoning_share: float, n: int, seed: int) -> list[QARecord]:
    """Draw ``min(n, available)`` distinct records, ``reasoning_share`` of them reasoning-only.

    The draw and its order are fixed by ``seed``; the inputs are not changed (which
    prompt an item gets depends on its level and the stage: ``gets_retrieval_prompt``).
    Raises ValueError for a share outside [0, 1], a negative ``n`` or a repeated id.
    """
    if not 0.0 <= reasoning_share <= 1.0 or math.isnan(reasoning_share):
        raise ValueError(f"reasoning_share is a fraction of the draw in [0, 1], "
                         f"got {reasoning_share!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    _check_unique_ids([*qa_records, *reasoning_records])
    pools = {"qa": list(qa_records), "reasoning": list(reasoning_records)}
    ratio = {"qa": 1.0 - reasoning_share, "reasoning": reasoning_share}
    counts = level_counts({k: len(pool) for k, pool in pools.items()}, n, ratio)
    rng = random.Random(seed)
    drawn = [r for k, pool in pools.items() for r in rng.sample(pool, counts[k])]
    rng.shuffle(drawn)
    return drawn


def _check_unique_ids(records: Sequence[QARecord]) -> None:
    """Refuse repeated ids: the draw would not be duplicate-free."""
    repeated = sorted(i for i, count in Counter(r.id for r in records).items() if count > 1)
    if repeated:
        raise ValueError(f"record ids must be unique across both pools; repeated: "
                         f"{repeated[:5]}{' ...' if len(repeated) > 5 else ''}")
