"""The recipe contract: one recipe table, config fields declared once, upstream stages declared by
the recipe (not guessed from its name), and command-line overrides validated like the file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from advrag.cli import app, config_kinds, config_model
from advrag.config import ConfigError, RLRunConfig, config_hash, load_config, parse_overrides
from advrag.recipes import RECIPES, recipe_for
from advrag.recipes.arr import ArrConfig, ArrRecipe
from advrag.recipes.base import UPSTREAM_STAGES
from advrag.recipes.gar import GarConfig, GarRecipe
from advrag.recipes.grpo import GrpoConfig, GrpoRecipe
from advrag.recipes.ur2 import UR2Config, UR2Recipe

ROOT = Path(__file__).resolve().parents[2]


def test_no_recipe_config_declares_a_shared_field_again():
    """Every shared field is declared once, in ``RLRunConfig``: a recipe changes its default
    through ``DEFAULTS``, never by declaring the field anew."""
    shared = set(RLRunConfig.model_fields)
    for recipe in RECIPES.values():
        for klass in recipe.config_model.__mro__:
            if klass is RLRunConfig:
                break
            assert not shared & set(vars(klass).get("__annotations__", {})), klass.__name__
            assert set(klass.DEFAULTS) <= shared, klass.__name__


def test_recipe_defaults_fill_only_what_the_file_leaves_out(tmp_path):
    """ARR's defaults (micro-batches of 2, 32 demonstrations) apply to absent keys; a file's own
    value wins; a section the file gives replaces the default section whole, as a field default
    would."""
    assert (ArrConfig().optim.micro_batch_size, ArrConfig().warmup.demonstrations) == (2, 32)
    assert (GrpoConfig().optim.micro_batch_size, GrpoConfig().warmup.demonstrations) == (4, 64)
    assert UR2Config().optim.advantage == "reinforce_pp" and GarConfig().optim.kl_coef == 0.0
    own = tmp_path / "own.yaml"
    own.write_text("recipe: arr\nmax_turns: 5\noptim: {lr: 1.0e-4}\n")
    config = load_config(own, ArrConfig)
    assert (config.max_turns, config.optim.lr, config.optim.micro_batch_size) == (5, 1e-4, 4)
    assert config.checkpoint_dir == Path(".cache/advrag/checkpoints/arr")


def test_a_file_for_another_recipe_is_refused_naming_it(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text("recipe: gar\n")
    with pytest.raises(ConfigError, match="this is the 'arr' recipe's config, the file names 'gar'"):
        load_config(other, ArrConfig)


def test_group_size_is_set_once_at_the_top():
    assert ArrConfig(group_size=3).group_size == 3
    with pytest.raises(ValueError, match="group_size: rollouts per question is set once"):
        GrpoConfig(optim={"group_size": 3})
    with pytest.raises(ValueError, match="group_size: rollouts per question is set once"):
        GarConfig(discriminator_optim={"group_size": 3})


@pytest.mark.parametrize(("recipe", "config", "stages"), [
    (GrpoRecipe, GrpoConfig(), ()),
    (ArrRecipe, ArrConfig(), ()),
    (UR2Recipe, UR2Config(), ("curation",)),
    (UR2Recipe, UR2Config(curate=None), ()),
    (GarRecipe, GarConfig(), ("discriminator_sft",)),
    (GarRecipe, GarConfig(discriminator="fixed"), ("discriminator_sft",)),
    (GarRecipe, GarConfig(discriminator="none"), ()),
    (GrpoRecipe, GrpoConfig(exploration={"kind": "rex"}), ()),
    (UR2Recipe, UR2Config(exploration={"kind": "rex"}), ("curation",)),
])
def test_each_recipe_declares_what_it_needs_upstream(recipe, config, stages):
    assert recipe(config).upstream() == stages
    assert set(stages) <= set(UPSTREAM_STAGES)


def test_a_recipe_without_a_stage_refuses_its_output():
    with pytest.raises(NotImplementedError, match="recipe 'grpo' takes no curation"):
        GrpoRecipe(GrpoConfig()).use_curation([], [])
    with pytest.raises(NotImplementedError, match="recipe 'arr' takes no discriminator"):
        ArrRecipe(ArrConfig()).use_discriminator(Path("adapter"))


def test_the_discriminator_adapter_is_handed_over_validated():
    recipe = GarRecipe(GarConfig(steps=3))
    recipe.use_discriminator(Path("sft/adapter"))
    assert recipe.config.discriminator_adapter == Path("sft/adapter")
    assert recipe.config.steps == 3 and isinstance(recipe.config, GarConfig)
    with pytest.raises(ValueError, match="steps"):
        recipe.configure(steps=0)


def test_cli_kinds_and_aliases_come_from_the_recipe_table():
    kinds = config_kinds()
    for name, recipe in RECIPES.items():
        assert config_model(name) is recipe.config_model
        for alias in recipe.aliases:
            assert alias in kinds and config_model(alias) is recipe.config_model
    assert config_model("train") is GrpoConfig and config_model("adversarial-rl") is ArrConfig
    commands = {c.name or c.callback.__name__ for c in app.registered_commands}
    assert {"train", "adversarial-rl", "rl"} <= commands


def test_an_alias_refuses_another_recipes_config():
    result = subprocess.run([sys.executable, "-m", "advrag.cli", "train", "--config",
                             "configs/arr.yaml"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    assert result.stderr == ("error: configs/arr.yaml: recipe: 'arr' — this command runs 'grpo' "
                             "configs; run `advrag rl --config configs/arr.yaml`\n")


def test_overrides_parse_as_yaml_and_nest_by_dots():
    settings = ["optim.lr=1.0e-5", "steps=8", "evaluate=null", "optim.lr=2.0e-5",
                "lora.target_modules=[q_proj, v_proj]"]
    assert parse_overrides(settings) == {"optim": {"lr": 2e-5}, "steps": 8, "evaluate": None,
                                         "lora": {"target_modules": ["q_proj", "v_proj"]}}
    for bad in ("steps", "=3", "optim..lr=1", "steps=[1"):
        with pytest.raises(ConfigError, match="--set"):
            parse_overrides([bad])


def test_overrides_are_validated_like_the_file_and_change_the_hash():
    base = recipe_for(ROOT / "configs/arr.yaml").config
    changed = recipe_for(ROOT / "configs/arr.yaml", parse_overrides(["optim.lr=1.0e-5",
                                                                     "steps=3"])).config
    assert (changed.optim.lr, changed.steps) == (1e-5, 3)
    assert changed.optim.micro_batch_size == base.optim.micro_batch_size  # merged, not replaced
    assert config_hash(changed) != config_hash(base)
    with pytest.raises(ConfigError, match="optim.lr_rate: unknown field — did you mean 'lr'"):
        recipe_for(ROOT / "configs/arr.yaml", parse_overrides(["optim.lr_rate=1"]))


def test_config_show_prints_the_overridden_config_and_its_hash():
    result = CliRunner().invoke(app, ["config", "show", str(ROOT / "configs/arr.yaml"),
                                      "--set", "optim.lr=1.0e-5", "--set", "steps=3"])
    assert result.exit_code == 0, result.output
    header, body = result.output.split("\n", 1)
    shown = yaml.safe_load(body)
    assert (shown["optim"]["lr"], shown["steps"]) == (1e-5, 3)
    expected = recipe_for(ROOT / "configs/arr.yaml", {"optim": {"lr": 1e-5}, "steps": 3}).config
    assert header.endswith(f"hash {config_hash(expected)}")


def test_a_bad_override_stops_rl_before_prefect_or_a_model():
    probe = ("import sys\nfrom advrag.cli import app\ntry:\n    app(sys.argv[1:])\nfinally:\n"
             "    print(sorted(m for m in ('prefect', 'torch', 'mlflow') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe, "rl", "--config", "configs/arr.yaml",
                             "--set", "optim.lr=-1"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    assert "optim.lr: Input should be greater than 0" in result.stderr
    assert result.stdout.strip() == "[]"


def test_the_pipeline_can_name_rex_rag_as_its_recipe():
    from advrag.config import PipelineConfig, load_config
    from advrag.recipes import recipe_for

    pipeline = load_config(ROOT / "configs/pipeline.yaml", PipelineConfig,
                           overrides={"recipe": "configs/rex-rag.yaml"})
    recipe = recipe_for(ROOT / pipeline.recipe)
    assert isinstance(recipe, GrpoRecipe) and recipe.config.exploration.kind == "rex"
    assert recipe.upstream() == ()
