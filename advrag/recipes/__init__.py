"""Training recipes: one module per RL method, each a ``base.Recipe``; one loop runs any.

``RECIPES`` maps a config's ``recipe:`` value to its recipe class and config model.
"""

from advrag.config import AdversarialRLConfig, TrainFlowConfig
from advrag.recipes.arr import ArrRecipe
from advrag.recipes.base import Recipe
from advrag.recipes.grpo import GrpoRecipe

RECIPES: dict[str, tuple[type[Recipe], type]] = {
    "grpo": (GrpoRecipe, TrainFlowConfig),
    "arr": (ArrRecipe, AdversarialRLConfig),
}
