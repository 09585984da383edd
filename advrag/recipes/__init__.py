"""Training recipes: one package per RL method (``advrag.recipes.<name>``), each a
``base.Recipe`` with its step and its config; one loop (``advrag.flows.rl.run_recipe``) runs any.

``RECIPES`` is the one table of recipes: a config's ``recipe:`` value → its recipe class
(whose ``config_model`` is its config). The CLI's commands and config kinds derive from it.
"""

from pathlib import Path

from advrag.config import ConfigError, load_config, read_yaml_mapping
from advrag.recipes.arr import ArrRecipe
from advrag.recipes.base import Recipe
from advrag.recipes.gar import GarRecipe
from advrag.recipes.grpo import GrpoRecipe
from advrag.recipes.ur2 import UR2Recipe

RECIPES: dict[str, type[Recipe]] = {
    recipe.name: recipe for recipe in (GrpoRecipe, ArrRecipe, UR2Recipe, GarRecipe)}


def recipe_named(name: str) -> type[Recipe]:
    """The recipe class of ``name``; an unknown name fails naming the known ones."""
    if name not in RECIPES:
        raise ConfigError(f"recipe: unknown recipe {name!r} — choose one of "
                          f"{', '.join(sorted(RECIPES))}")
    return RECIPES[name]


def recipe_for(path: str | Path, overrides: dict | None = None) -> Recipe:
    """The recipe a config file names (``recipe:``, default grpo), with its config (the file,
    then ``overrides``) validated.

    Torch- and Prefect-free: the CLI calls it so a bad file fails in a fraction of a second.
    """
    raw = read_yaml_mapping(Path(path), chain=())
    name = str((overrides or {}).get("recipe", raw.get("recipe", "grpo")))
    try:
        recipe_class = recipe_named(name)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    return recipe_class(load_config(path, recipe_class.config_model, overrides))
