"""What a recipe asks of verl (``Recipe.verl_runs``): its runs, in order, each trained from the
one before's merged model, and what each run brings besides verl's own trainer.

The engine's verbs (``launch``: export the rows, compose, launch; ``checkpoints``: merge)
read these and ask no recipe's name. Verl-free, so a recipe's package builds them on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from advrag.agents.prompts import search_r1_prompt
from advrag.datasets.records import QARecord

PLUGIN = "advrag.engines.verl"
"""The module verl imports at start-up (``VERL_USE_EXTERNAL_MODULES``): the plugin's
estimators, loss, rewards and agent loops."""
REX_AGENT_NAME = "advrag_rex_rag"
REX_AGENT_LOOP = f"{PLUGIN}.agent_loop.RexSearchAgentLoop"
REX_TRAINER_MODE = "advrag_rex_rag"
REX_TRAINER_MODULES = (PLUGIN, f"{PLUGIN}.rex_trainer")
REX_SECTION = "advrag_rex"
"""The plugin's REX-RAG parts a run may ask for: the agent loop that probes (its name and
class), the trainer with the filter and the correction (its mode, the modules that register
it) and the config section that trainer reads (``RexTrainerSettings``)."""


@dataclass(frozen=True)
class AgentLoop:
    """An agent loop the training rows run instead of Search-R1's: its name in verl's agent
    loop file, its class (a ``PLUGIN`` path) and its settings besides the search ones (the
    retrieval server, ``max_turns``, ``topk``), which every search loop gets."""

    name: str
    target: str
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RexTrainerSettings:
    """The section REX-RAG's trainer reads (``rex_trainer``): the pool, the keep ratio and
    its weight, the filter and the correction; built from the config's ``exploration:`` by
    ``recipes.rex_rag.verl`` and read back whole by the trainer."""

    pool_size: int
    keep_ratio: float
    keep_ratio_weight: float
    trajectory_filter: bool
    correction: Literal["fine", "coarse", "none"]

    @classmethod
    def read(cls, section: Mapping[str, Any]) -> RexTrainerSettings:
        """The settings from verl's composed config; a missing or unknown key fails naming it."""
        given, expected = set(section), set(cls.__dataclass_fields__)
        if given != expected:
            raise ValueError(f"REX-RAG's trainer section has {sorted(given)}; it needs exactly "
                             f"{sorted(expected)}: compose the run with recipes.rex_rag.verl")
        return cls(int(section["pool_size"]), float(section["keep_ratio"]),
                   float(section["keep_ratio_weight"]), bool(section["trajectory_filter"]),
                   str(section["correction"]))


@dataclass(frozen=True)
class TrainerMode:
    """A trainer that replaces verl's own: its ``trainer.v1.trainer_mode``, the modules that
    register it (imported by every Ray process), and its typed settings, composed as the
    config's ``section``."""

    mode: str
    modules: tuple[str, ...]
    section: str
    settings: Any
    """A dataclass (``RexTrainerSettings``): composed field by field, read back whole."""


@dataclass(frozen=True)
class VerlRun:
    """One run of verl's ``main_ppo``.

    ``part`` names it among the recipe's runs (``None`` for a recipe's only run; UR²:
    ``stage-1``, ``stage-2``): its checkpoints live under ``checkpoint_dir/verl/<part>``, its
    merged model under ``checkpoint_dir/verl-export/<part>``, its data under the out
    directory's ``<part>``. ``reward``: verl's reward function (``rewards``) and its
    settings. ``records``: its training questions (``None``: the world's training split),
    ``retrieval`` per record whether it searches (``None``: all do) under ``search_prompt``.
    ``check_server``: what the run needs of the retrieval server, checked before anything is
    written (it raises ``ValueError`` saying what to start)."""

    experiment: str
    steps: int
    reward: tuple[str, Mapping[str, Any]]
    part: str | None = None
    records: Sequence[QARecord] | None = None
    retrieval: Sequence[bool] | None = None
    search_prompt: Callable[[str], str] = search_r1_prompt
    search_loop: AgentLoop | None = None
    trainer: TrainerMode | None = None
    check_server: Callable[[str], None] | None = None

    def under(self, root: Path) -> Path:
        """``root/<part>``, or ``root`` itself for a recipe's only run."""
        return root if self.part is None else root / self.part

    @property
    def tracked_as(self) -> str:
        """The MLflow folder of its composed config (``verl``, ``verl/stage-1``)."""
        return "verl" if self.part is None else f"verl/{self.part}"
