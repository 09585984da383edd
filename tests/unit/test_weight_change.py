"""How far training moved a saved model: ‖after − before‖ / ‖before‖ over its weights."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from advrag.models.loading import weight_change


def saved(directory, *shards):
    """A model directory holding one safetensors file per shard."""
    directory.mkdir()
    for i, shard in enumerate(shards):
        save_file(shard, str(directory / f"model-{i}.safetensors"))
    return directory


def test_the_change_is_relative_to_the_start_over_every_shard(tmp_path):
    # before: ‖(3, 0, 0, 4)‖ = 5; after moves b by 3 → 3 / 5
    before = saved(tmp_path / "before", {"a": torch.tensor([3.0, 0.0])},
                   {"b": torch.tensor([0.0, 4.0])})
    after = saved(tmp_path / "after", {"a": torch.tensor([3.0, 0.0]),
                                       "b": torch.tensor([0.0, 7.0])})
    assert weight_change(before, after) == pytest.approx(0.6)
    assert weight_change(before, before) == 0.0


def test_models_with_other_weights_or_none_are_refused(tmp_path):
    before = saved(tmp_path / "before", {"a": torch.ones(2)})
    other = saved(tmp_path / "other", {"c": torch.ones(2)})
    with pytest.raises(ValueError, match="hold different weights"):
        weight_change(before, other)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no"):
        weight_change(before, tmp_path / "empty")
