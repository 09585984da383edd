"""What a recipe carries to explore with REX-RAG's probes (``exploration: {kind: rex}``): the
keep ratio from one update to the next (and through its checkpoints), and the longer episode
a probe makes. The single search agent and GAR's reasoner share it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advrag.agents.budgets import EpisodeShape
from advrag.agents.prompts import exploration_pool, probe_observation
from advrag.recipes.rex_rag.config import RexExploration


@dataclass
class ExplorationState:
    """What REX-RAG carries from one update to the next (and through a checkpoint)."""

    keep_ratio: float


def probing_shape(shape: EpisodeShape, exploration: RexExploration | None) -> EpisodeShape:
    """``shape`` (the Search-R1 loop's: ``max_turns + 1`` generations, ``max_turns`` searches)
    with REX-RAG's probes and the longest exploration prompt they insert; unchanged without
    them. A probe of the origin's turns: one generation more (it goes on from its cut answer
    turn). With ``probe_turns`` N: the origin answered in its turn k ≤ ``max_turns`` after
    k − 1 searches, then N turns and the forced answer, so N generations and N − 1 searches
    more."""
    if exploration is None:
        return shape
    extra_env = (*shape.extra_env, probe_observation(max(exploration_pool(exploration.pool_size),
                                                         key=len)))
    if exploration.probe_turns is None:
        return EpisodeShape(shape.generations + 1, shape.searches, extra_env)
    own = exploration.probe_turns
    return EpisodeShape(shape.generations + own, shape.searches + own - 1, extra_env)


class Exploring:
    """Mixin for a recipe whose config has an ``exploration`` field: its keep ratio, created
    at the first exploring update and kept in the recipe's run state."""

    exploration_state: ExplorationState | None = None

    def exploring_state(self, exploration: RexExploration) -> ExplorationState:
        """The run's exploration state (the configured keep ratio at the first update)."""
        if self.exploration_state is None:
            self.exploration_state = ExplorationState(exploration.keep_ratio)
        return self.exploration_state

    def run_state(self) -> dict[str, Any]:
        """REX-RAG's keep ratio, when it explores."""
        state = self.exploration_state
        return {} if state is None else {"keep_ratio": state.keep_ratio}

    def restore_run_state(self, state: dict[str, Any]) -> None:
        """The keep ratio the run had reached."""
        if "keep_ratio" in state:
            self.exploration_state = ExplorationState(float(state["keep_ratio"]))
