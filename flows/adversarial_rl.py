"""Flow `adversarial_rl`: the `arr` recipe (ARR's reasoner and verifier) through the one loop."""

from __future__ import annotations

from prefect import flow

from advrag.config import AdversarialRLConfig
from advrag.flows.rl import run_recipe
from advrag.recipes.arr import ArrRecipe


@flow(name="adversarial_rl", log_prints=True)
def adversarial_rl(config: AdversarialRLConfig = AdversarialRLConfig(), run_name: str = "arr") -> dict:
    """Warm-up → resume → (batch → ARR step → log → checkpoint)* → plots → export → register ×2
    → benchmark."""
    return run_recipe(ArrRecipe(config), "adversarial_rl", run_name)
