"""UR² on verl: each stage its own verl run, on the stage's pool prompted by task mixing, with
UR²'s reward of the stage (``engines.verl.rewards.ur2_score``) and, with summaries, a retrieval
server that summarises."""

from __future__ import annotations

from typing import Any

from advrag.recipes.ur2.config import UR2Config


def stage_steps(config: UR2Config) -> dict[int, int]:
    """UR²'s stages on verl: stage → its updates (a stage with none is left out)."""
    first = min(config.stage1_steps, config.steps)
    return {stage: steps for stage, steps in ((1, first), (2, config.steps - first)) if steps}


def stage_reward(config: UR2Config, stage: int) -> tuple[str, dict[str, Any]]:
    """verl's reward function for a UR² stage, and its settings."""
    return "ur2_score", {"stage": stage, "metric": config.reward_metric,
                         "fallback_penalty": config.fallback_penalty}


def require_summaries(config: UR2Config, retriever_url: str) -> None:
    """UR² with ``summary.summarise`` reads summaries from the retrieval server: refuse one
    that does not summarise (its ``/health`` has no summariser counts)."""
    import httpx

    if not getattr(getattr(config, "summary", None), "summarise", False):
        return
    try:
        health = httpx.get(f"{retriever_url.rstrip('/')}/health", timeout=30).json()
    except (httpx.HTTPError, ValueError) as error:
        raise ValueError(f"UR² summaries: the retrieval server at {retriever_url} did not "
                         f"answer /health ({error})") from None
    if "summaries" not in health:
        raise ValueError(f"UR² summaries: the retrieval server at {retriever_url} serves raw "
                         "documents; start it with `advrag serve-retriever --summarise`, or "
                         "set summary.summarise: false")
