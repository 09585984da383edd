"""Typed run configuration (pydantic), read from ``configs/*.yaml``.

``flows``: one model per non-RL flow and the sections lower layers read (data, benchmark,
summaries); ``rl``: the fields every RL recipe shares (each recipe's own config
extends it in ``advrag.recipes.<name>.config``); ``engine``: the engine's sections
(optimiser, LoRA, SFT); ``loading``: YAML with ``extends:``, ``--set`` overrides and the
one-message errors; ``base``: the strict base model, the one config hash and the
``OverridesOf`` marker.
"""

from advrag.config.base import OverridesOf, Strict, config_hash
from advrag.config.engine import LoraSettings, SFTConfig, TrainConfig
from advrag.config.flows import (
    BenchmarkConfig,
    DataConfig,
    DataFiles,
    DemoConfig,
    Method,
    PipelineConfig,
    PromotionSection,
    SummaryConfig,
    WorldSection,
)
from advrag.config.loading import (
    ConfigError,
    did_you_mean,
    load_config,
    merged,
    parse_overrides,
    read_yaml_mapping,
)
from advrag.config.rl import RLRunConfig, WarmupSection

__all__ = [
    "BenchmarkConfig", "ConfigError", "DataConfig", "DataFiles", "DemoConfig",
    "LoraSettings", "Method", "PipelineConfig", "OverridesOf",
    "PromotionSection", "RLRunConfig", "SFTConfig", "Strict", "SummaryConfig", "TrainConfig",
    "WarmupSection", "WorldSection",
    "config_hash", "did_you_mean", "load_config", "merged", "parse_overrides", "read_yaml_mapping",
]
