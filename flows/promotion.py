"""The registry's promotion gates, shared by the pipeline (every night) and `advrag promote`.

Each registered model is judged by the evidence of its kind (``tasks.promotion``):
a reasoner by the per-question EM of its benchmark (the champion benchmarked
again on the candidate's questions when needed), the SFT discriminator by its
verdicts on its held-out slices; an agent trained jointly with the reasoner (GAR's
discriminator, ARR's verifier) follows the reasoner's decision.
"""

from __future__ import annotations

from pathlib import Path

from advrag.common.locks import exclusive
from advrag.config import BenchmarkConfig, PromotionSection
from advrag.flows.benchmark import benchmark
from advrag.tasks import promotion as promo

LOCKS = Path(".cache/advrag/registry")
"""Where a registered model's promotion lock lives (one per model, on this machine)."""


def registry_lock(name: str):
    """Hold registered model ``name`` for one promotion: its champion cannot change between
    reading the evidence and moving the aliases (another promotion fails at once, naming it)."""
    return exclusive(LOCKS / name, "the registered model")


def promotion_gate(name: str, settings: PromotionSection, version: str | None = None,
                   force: bool = False, *, kind: str = "answers",
                   evaluate: BenchmarkConfig | None = None) -> dict:
    """Judge version ``version`` of ``name`` (default: the latest) against its champion on the
    same items (a reasoner's champion benchmarked with ``evaluate`` when needed); set aliases,
    tags; all under ``registry_lock(name)``."""
    with registry_lock(name):
        return _gate(name, settings, version, force, kind, evaluate)


def _gate(name: str, settings: PromotionSection, version: str | None, force: bool, kind: str,
          evaluate: BenchmarkConfig | None) -> dict:
    """``promotion_gate``'s steps, the lock held."""
    candidate = promo.candidate_evidence(name, version, settings.method, kind)
    champion = promo.champion_evidence(name, settings.method, kind)
    if kind == "answers" and promo.needs_rebenchmark(candidate, champion):
        spec = f"models:/{name}/{champion.version}"
        run = benchmark(evaluate.model_copy(update={"model": spec}),
                        run_name=f"champion-v{champion.version}")
        champion = promo.rescored(champion, run["run_id"], settings.method)
    return announce(name, candidate.version, promo.judge(candidate, champion, settings, force, kind))


def paired_gate(name: str, version: str, reasoner: str, reasoner_decision: dict) -> dict:
    """Give version ``version`` of ``name`` the decision of the reasoner it was trained with."""
    with registry_lock(name):
        return announce(name, version, promo.paired(reasoner, reasoner_decision["version"],
                                                    reasoner_decision))


def announce(name: str, version: str, decision) -> dict:
    """Apply ``decision`` to the registry and say it; the version, alias and tags written."""
    tags = promo.apply_decision(name, version, decision)
    print(f"{name} v{version}: {decision.alias} — {decision.reason}")
    return {"version": version, "alias": decision.alias, **tags}
