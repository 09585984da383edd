"""Typed run configuration (pydantic), read from ``configs/*.yaml``.

``flows``: one model per flow; ``engine``: the engine's sections (optimiser,
LoRA, SFT) embedded in them; ``loading``: YAML with ``extends:`` and the one-message
errors; ``base``:
the strict base model, the one config hash and the ``OverridesOf`` marker.
"""

from advrag.config.base import OverridesOf, Strict, config_hash
from advrag.config.engine import LoraSettings, SFTConfig, TrainConfig
from advrag.config.flows import (
    AdversarialRLConfig,
    BenchmarkConfig,
    CurateSection,
    DataConfig,
    DemoConfig,
    GARConfig,
    Method,
    PipelineConfig,
    PromotionSection,
    RLRunConfig,
    SummaryConfig,
    TrainFlowConfig,
    UR2Config,
    WarmupSection,
    WorldSection,
)
from advrag.config.gar import DiscriminatorSFTConfig
from advrag.config.loading import (
    ConfigError,
    did_you_mean,
    load_config,
    merged,
    read_yaml_mapping,
)

__all__ = [
    "AdversarialRLConfig", "BenchmarkConfig", "ConfigError", "CurateSection", "DataConfig", "DemoConfig",
    "DiscriminatorSFTConfig", "GARConfig",
    "LoraSettings", "Method", "PipelineConfig", "OverridesOf", "PromotionSection", "RLRunConfig",
    "SFTConfig", "Strict", "SummaryConfig", "TrainConfig", "TrainFlowConfig", "UR2Config", "WarmupSection", "WorldSection",
    "config_hash", "did_you_mean", "load_config", "merged", "read_yaml_mapping",
]
