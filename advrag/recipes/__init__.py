"""Training recipes: one module per RL method, each a ``base.Recipe``; one loop runs any.

``RECIPES`` maps a config's ``recipe:`` value to its recipe class and config model.
"""

from pathlib import Path

from advrag.config import (
    AdversarialRLConfig,
    ConfigError,
    GARConfig,
    TrainFlowConfig,
    UR2Config,
    load_config,
    read_yaml_mapping,
)
from advrag.recipes.arr import ArrRecipe
from advrag.recipes.base import Recipe
from advrag.recipes.gar import GarRecipe
from advrag.recipes.grpo import GrpoRecipe
from advrag.recipes.ur2 import UR2Recipe

RECIPES: dict[str, tuple[type[Recipe], type]] = {
    "grpo": (GrpoRecipe, TrainFlowConfig),
    "arr": (ArrRecipe, AdversarialRLConfig),
    "ur2": (UR2Recipe, UR2Config),
    "gar": (GarRecipe, GARConfig),
}


def recipe_for(path: str | Path) -> Recipe:
    """The recipe a config file names (``recipe:``, default grpo), with its config validated.

    Torch- and Prefect-free: the CLI calls it so a bad file fails in a fraction of a second.
    """
    name = read_yaml_mapping(Path(path), chain=()).get("recipe", "grpo")
    if name not in RECIPES:
        raise ConfigError(f"{path}: recipe: unknown recipe {name!r} — choose one of "
                          f"{', '.join(sorted(RECIPES))}")
    recipe_class, config_model = RECIPES[name]
    return recipe_class(load_config(path, config_model))
