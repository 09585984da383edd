"""Prefect tasks of the registry promotion gate: gather evidence, decide, move aliases, roll back.

Evidence lives on the registered versions. A reasoner's (kind ``answers``):
``bench.run_id`` names the benchmark run (its status says whether it finished;
its predictions tables give the per-question EM). A discriminator's (kind
``judgments``): ``run_id`` names its SFT run, whose ``heldout/judgments.json``
gives per held-out slice whether its verdict matched the label. Both:
``data.gate`` / ``data.gate.version`` record that the GX gate passed on the data
version the model was trained on. Aliases:
``champion`` (serving), ``challenger`` (latest candidate not promoted) and
``previous-champion`` (what ``rollback`` restores). Each decision is also
written as ``promotion.*`` tags on the version, so the history survives alias moves.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

from prefect import task
from prefect.cache_policies import NO_CACHE

from advrag.config import PromotionSection
from advrag.registry.promotion import CHALLENGER, CHAMPION, Decision, decide
from advrag.tasks import tracking

PREVIOUS = "previous-champion"
IO = {"retries": 2, "retry_delay_seconds": 2, "cache_policy": NO_CACHE}  # registry I/O


@dataclass(frozen=True)
class Evidence:
    """What the gate knows about one version: per-question EM keyed ``dataset/id#content``."""

    version: str
    benchmark_finished: bool
    gate_passed: bool
    em: dict[str, float] | None


@task(**IO)
def record_gate(name: str, version: str, gate: dict[str, str], data_version: str) -> None:
    """Tag a version with the data gate that passed on the data it was trained on."""
    tracking.set_model_version_tags(name, version, {**gate, "data.gate.version": data_version})


@task(**IO)
def record_benchmark(name: str, version: str, tags: dict[str, str]) -> None:
    """Tag a version with its benchmark run id and EM/F1."""
    tracking.set_model_version_tags(name, version, tags)


@task(**IO)
def candidate_evidence(name: str, version: str | None, method: str,
                       kind: str = "answers") -> Evidence:
    """The named version (default: the latest) with its evaluation and gate evidence."""
    version = version or tracking.latest_version(name)
    if version is None:
        raise LookupError(f"model {name!r} has no registered versions: train one first")
    return _evidence(name, version, method, kind)


@task(**IO)
def champion_evidence(name: str, method: str, kind: str = "answers") -> Evidence | None:
    """The current champion's evidence (None: no champion yet)."""
    version = tracking.alias_version(name, CHAMPION)
    return None if version is None else _evidence(name, version, method, kind)


@task(**IO)
def rescored(evidence: Evidence, run_id: str, method: str) -> Evidence:
    """``evidence`` with the per-question EM of a fresh benchmark run."""
    return Evidence(evidence.version, evidence.benchmark_finished, evidence.gate_passed,
                    per_question_em(run_id, method))


def needs_rebenchmark(candidate: Evidence, champion: Evidence | None) -> bool:
    """The champion has no results on exactly the candidate's questions."""
    if champion is None or champion.version == candidate.version or not candidate.em:
        return False
    return champion.em is None or set(champion.em) != set(candidate.em)


@task
def judge(candidate: Evidence, champion: Evidence | None, settings: PromotionSection,
          force: bool = False, kind: str = "answers") -> Decision:
    """``advrag.registry.promotion.decide`` on the evidence; ``force`` promotes anyway, saying so."""
    if champion is not None and champion.version == candidate.version:
        return Decision(CHAMPION, "already the champion")
    decision = decide(candidate.em, None if champion is None else champion.em,
                      benchmark_finished=candidate.benchmark_finished,
                      gate_passed=candidate.gate_passed, min_margin=settings.min_margin,
                      n_boot=settings.n_boot, seed=settings.seed, measure=EVIDENCE[kind][2])
    if force and not decision.promote:
        return Decision(CHAMPION, f"forced by the user; the gate said: {decision.reason}",
                        decision.diff, decision.lo, decision.hi)
    return decision


PENDING = "promotion.pending"
"""The tag holding a decision's plan while its writes are under way (``apply_decision``)."""


def decision_plan(name: str, version: str, decision: Decision) -> dict:
    """What applying ``decision`` to ``version`` writes: its tags, and the champion it finds
    (``previous``, which it replaces when it promotes)."""
    previous = tracking.alias_version(name, CHAMPION)
    tags = {"promotion.decision": decision.alias, "promotion.reason": decision.reason,
            "promotion.decided_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if previous is not None and previous != version:
        tags["promotion.compared_with"] = previous
    for key in ("diff", "lo", "hi"):
        if getattr(decision, key) is not None:
            tags[f"promotion.em_{key}"] = f"{getattr(decision, key):+.4f}"
    if decision.promote and previous not in (None, version):
        tags["promotion.previous_champion"] = previous
    return {"tags": tags, "previous": previous, "promote": decision.promote}


def move_aliases(name: str, version: str, plan: dict) -> None:
    """The plan's alias moves; each is a set or a delete, so doing them twice changes nothing."""
    previous = plan["previous"]
    if plan["promote"] and previous != version:
        if previous is not None:
            tracking.set_alias(name, PREVIOUS, previous)
        tracking.set_alias(name, CHAMPION, version)
        if tracking.alias_version(name, CHALLENGER) == version:
            tracking.delete_alias(name, CHALLENGER)
    elif not plan["promote"]:
        tracking.set_alias(name, CHALLENGER, version)


@task(**IO)
def apply_decision(name: str, version: str, decision: Decision) -> dict[str, str]:
    """Move the aliases and record the decision on the version; returns the tags written.

    Idempotent under the task's retries: the plan (``decision_plan``) is written first, as
    one ``promotion.pending`` tag, then the tags, then the aliases, and the pending tag is
    removed last. A retry after any one failed write finds the plan and carries it out as
    planned (the champion it replaces included, though the alias may have moved already), so
    it ends in the aliases and tags of a run without the failure."""
    recorded = tracking.model_version_tags(name, version).get(PENDING)
    plan = json.loads(recorded) if recorded else None
    if plan is None or plan["tags"]["promotion.decision"] != decision.alias:
        plan = decision_plan(name, version, decision)
        tracking.set_model_version_tags(name, version, {PENDING: json.dumps(plan)})
    tracking.set_model_version_tags(name, version, plan["tags"])
    move_aliases(name, version, plan)
    tracking.delete_model_version_tag(name, version, PENDING)
    return plan["tags"]


@task(**IO)
def rollback(name: str) -> tuple[str, str]:
    """Give ``champion`` back to the version the current one replaced: (restored, demoted)."""
    current = tracking.alias_version(name, CHAMPION)
    if current is None:
        raise LookupError(f"model {name!r} has no champion: nothing to roll back")
    restored = tracking.model_version_tags(name, current).get("promotion.previous_champion")
    if restored is None:
        raise LookupError(f"champion v{current} of {name!r} replaced no earlier champion: "
                          "there is nothing to roll back to")
    tracking.model_version_tags(name, restored)  # fails clearly if it was deleted
    tracking.set_alias(name, CHAMPION, restored)
    before = tracking.model_version_tags(name, restored).get("promotion.previous_champion")
    if before is None:
        tracking.delete_alias(name, PREVIOUS)
    else:
        tracking.set_alias(name, PREVIOUS, before)
    tracking.set_model_version_tags(name, current, {
        "promotion.rolled_back": f"champion returned to v{restored} at "
                                 f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}"})
    return restored, current


def paired(reasoner: str, version: str, decision: dict[str, str]) -> Decision:
    """The decision of an agent trained jointly with version ``version`` of ``reasoner``
    (GAR's discriminator): the pair moves together, so it gets the reasoner's alias."""
    return Decision(decision["promotion.decision"], f"trained with {reasoner} v{version}, which "
                    f"became {decision['promotion.decision']}: {decision['promotion.reason']}")


def _evidence(name: str, version: str, method: str, kind: str) -> Evidence:
    """Read a version's tags, its evaluation run's status and per-item scores."""
    tag, scores, _ = EVIDENCE[kind]
    tags = tracking.model_version_tags(name, version)
    run_id = tags.get(tag)
    finished = run_id is not None and tracking.run_status(run_id) == "FINISHED"
    gate = tags.get("data.gate") == "passed" and tags.get("data.gate.version") == tags.get("data.version")
    return Evidence(version, finished, gate, scores(run_id, method) if finished else None)


def per_question_em(run_id: str, method: str) -> dict[str, float] | None:
    """EM per question of ``method`` over every dataset of a benchmark run (None: not run).

    Keys carry a hash of the question and its gold answers, so two runs match
    only when they asked exactly the same questions, not merely the same ids.
    """
    em: dict[str, float] = {}
    for folder in tracking.list_artifacts(run_id, "predictions"):
        table = f"{folder}/{method}.json"
        if table not in tracking.list_artifacts(run_id, folder):
            continue
        dataset = folder.rsplit("/", 1)[-1]
        for row in tracking.read_table(run_id, table):
            content = json.dumps([row["question"], row["golden_answers"]], default=str)
            digest = hashlib.sha256(content.encode()).hexdigest()[:8]
            em[f"{dataset}/{row['id']}#{digest}"] = float(row["em"])
    return em or None


def per_slice_correct(run_id: str, method: str | None = None) -> dict[str, float] | None:
    """1 per held-out slice the discriminator's verdict got right, 0 otherwise (malformed
    included), keyed by slice id and a hash of its text and label (None: no judgments)."""
    if "heldout/judgments.json" not in tracking.list_artifacts(run_id, "heldout"):
        return None
    scores = {}
    for row in tracking.read_table(run_id, "heldout/judgments.json"):
        digest = hashlib.sha256(json.dumps([row.get("slice"), row["sound"]]).encode()).hexdigest()[:8]
        scores[f"{row['id']}#{digest}"] = float(row["verdict"] == row["sound"])
    return scores or None


# kind → (the version tag naming the run with its evidence, how to read the per-item scores,
# what the scores measure): a reasoner's answers, a discriminator's held-out judgments.
EVIDENCE = {"answers": ("bench.run_id", per_question_em, "EM"),
            "judgments": ("run_id", per_slice_correct, "verdict accuracy")}
