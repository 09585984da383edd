"""Flow `train`: the `grpo` recipe (GRPO on the Search-R1-style agent) through the one loop."""

from __future__ import annotations

from prefect import flow

from advrag.config import TrainFlowConfig
from advrag.flows.rl import run_recipe
from advrag.recipes.grpo import GrpoRecipe


@flow(name="train", log_prints=True)
def train(config: TrainFlowConfig = TrainFlowConfig(), run_name: str = "grpo") -> dict:
    """Warm-up → resume → (batch → GRPO step → log → checkpoint)* → export → register → benchmark."""
    return run_recipe(GrpoRecipe(config), "train", run_name)
