"""The progress bar names the method a run trains: REX-RAG's probes composed into a recipe show."""

from pathlib import Path

import pytest

from advrag.flows.rl import run_label
from advrag.recipes import recipe_for

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(("config", "label"), [
    ("train.yaml", "grpo"), ("rex-rag.yaml", "grpo+rex"), ("ur2.yaml", "ur2"),
    ("gar.yaml", "gar"), ("gar-rex.yaml", "gar+rex"), ("arr.yaml", "arr"),
    ("arr-rex.yaml", "arr+rex")])
def test_a_run_is_labelled_with_its_recipe_and_its_probes(config, label):
    assert run_label(recipe_for(CONFIGS / config)) == label
