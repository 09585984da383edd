"""Typed configs: the shipped YAML validates; typos and bad values are named in one message."""

from __future__ import annotations

from pathlib import Path

import pytest
from annotated_types import Ge, Gt, Le, Lt

from advrag.config import (
    BenchmarkConfig,
    ConfigError,
    DemoConfig,
    PipelineConfig,
    Strict,
    did_you_mean,
    load_config,
)
from advrag.recipes.arr import ArrConfig
from advrag.recipes.gar import DiscriminatorSFTConfig, GarConfig
from advrag.recipes.grpo import GrpoConfig
from advrag.recipes.ur2 import UR2Config

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {"demo.yaml": DemoConfig, "train.yaml": GrpoConfig, "arr.yaml": ArrConfig,
           **dict.fromkeys(["rex-rag.yaml", "rex-rag-coarse.yaml", "rex-rag-no-is.yaml",
                            "rex-rag-no-filter.yaml", "rex-rag-no-is-no-filter.yaml",
                            "rex-rag-pool5.yaml", "rex-rag-pool15.yaml",
                            "rex-rag-probe-turns.yaml"], GrpoConfig),
           "arr-no-adv.yaml": ArrConfig, "arr-no-proc.yaml": ArrConfig, "arr-rex.yaml": ArrConfig,
           **dict.fromkeys(["ur2.yaml", "ur2-no-stage1.yaml", "ur2-no-fallback-penalty.yaml",
                            "ur2-no-curation.yaml", "ur2-no-mixing.yaml", "ur2-raw-docs.yaml",
                            "ur2-long-warmup.yaml", "ur2-warmup-4epochs.yaml"],
                           UR2Config),
           **dict.fromkeys(["gar.yaml", "gar-no-disc.yaml", "gar-fixed-disc.yaml", "gar-rd-only.yaml",
                            "gar-ra-only.yaml", "gar-rex.yaml", "gar-rex-curated.yaml", "gar-demo.yaml", "gar-nightly.yaml",
                            "gar-tiny.yaml", "gar-untuned-critic.yaml"],
                           GarConfig),
           **dict.fromkeys(["pipeline.yaml", "pipeline-demo.yaml", "nightly.yaml", "nightly-gpu.yaml",
                            "nightly-tiny.yaml"], PipelineConfig),
           **dict.fromkeys(["discriminator.yaml", "discriminator-demo.yaml",
                            "discriminator-tiny.yaml"], DiscriminatorSFTConfig)}


def config_models() -> list[type[Strict]]:
    """Every config model: all subclasses of ``Strict``, however deep."""
    found, todo = [], [Strict]
    while todo:
        children = todo.pop().__subclasses__()
        found += children
        todo += children
    return found


def write(tmp_path: Path, text: str) -> Path:
    """``text`` as the config file ``bad.yaml``."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return path


def test_demo_config_validates():
    cfg = load_config(ROOT / "configs/demo.yaml", DemoConfig)
    assert cfg.benchmark.methods == ["cot", "naive_rag", "search_r1", "arr"]
    assert cfg.data.world.out_dir == Path("data/world")


@pytest.mark.parametrize("path", sorted(p.name for p in (ROOT / "configs").glob("*.yaml")))
def test_every_shipped_config_loads(path):
    assert path in SHIPPED, "add the new config to SHIPPED with the model it is for"
    assert isinstance(load_config(ROOT / "configs" / path, SHIPPED[path]), SHIPPED[path])


def test_every_field_of_every_config_model_says_what_it_does():
    models = config_models()
    assert len(models) >= 12
    missing = [f"{m.__name__}.{name}" for m in models for name, info in m.model_fields.items()
               if not info.description]
    assert missing == []


def test_every_number_of_every_config_model_has_a_range():
    unbounded = [f"{m.__name__}.{name}" for m in config_models()
                 for name, info in m.model_fields.items()
                 if info.annotation in (int, float, int | None, float | None)
                 and not any(isinstance(c, (Ge, Gt, Le, Lt)) for c in info.metadata)]
    assert unbounded == []


def test_a_typo_is_one_line_naming_the_dotted_field_and_the_closest_name(tmp_path):
    bad = write(tmp_path, "optim: {lr_rate: 1}\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad, GrpoConfig)
    assert str(err.value) == (f"{bad}: invalid GrpoConfig config: optim.lr_rate: unknown "
                              "field — did you mean 'lr'?")


def test_topk_zero_is_rejected_with_the_range_and_what_topk_is(tmp_path):
    bad = write(tmp_path, "topk: 0\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad, BenchmarkConfig)
    assert str(err.value) == (f"{bad}: invalid BenchmarkConfig config: topk: Input should be "
                              "greater than or equal to 1 (got 0) — set a valid value (topk is: "
                              "Passages per search.)")


def test_several_problems_are_one_message_with_a_line_each(tmp_path):
    bad = write(tmp_path, "optim: {lr_rate: 1.0e-5}\ntopk: 0\nwarmup: {sft: {epochs: 0}}\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad, GrpoConfig)
    lines = str(err.value).splitlines()
    assert lines[0] == f"{bad}: invalid GrpoConfig config:"
    assert "  - optim.lr_rate: unknown field — did you mean 'lr'?" in lines
    assert any(line.startswith("  - topk: Input should be greater than or equal to 1 (got 0)")
               for line in lines)
    assert any(line.startswith("  - warmup.sft.epochs: Input should be greater than or equal "
                               "to 1 (got 0)") for line in lines)
    assert len(lines) == 4


@pytest.mark.parametrize(("model", "text", "problem"), [
    (PipelineConfig, "promotion:\n  n_bot: 8\n",
     "promotion.n_bot: unknown field — did you mean 'n_boot'?"),
    (BenchmarkConfig, "methods: [cot, naive-rag]\n", "methods[1]: Input should be 'cot', "
     "'naive_rag', 'search_r1' or 'arr' (got 'naive-rag') — did you mean 'naive_rag'?"),
    (GrpoConfig, "lora: {target_modules: 5}\n", "lora.target_modules: Input should be a "
     "valid string or Input should be a valid list (got 5) — set a valid value"),
    (ArrConfig, "verifier_optim: {lr_rate: 1.0}\n",
     "verifier_optim.lr_rate: unknown field — did you mean 'lr'?"),
    (ArrConfig, "verifier_optim: {lr: 0}\n",
     "verifier_optim.lr: Input should be greater than 0 (got 0)"),
    (ArrConfig, "critique_actions: [verfy]\n",
     "critique_actions[0]: Input should be 'verify', 'selected_doc', 'response' or "
     "'final_answer' (got 'verfy') — did you mean 'verify'?"),
    (ArrConfig, "pattern_scores: {D: 1.0, ID: 0.8, F: 0.6, DI: 0.4, X: 0.2}\n",
     "pattern_scores: give exactly the patterns D, ID, F, DI, I a score (missing: I; unknown: X)"),
    (ArrConfig, "pattern_scores: {D: 2.0, ID: 0.8, F: 0.6, DI: 0.4, I: 0.2}\n",
     "pattern_scores.D: Input should be less than or equal to 1 (got 2.0)"),
    (ArrConfig, "optim: {group_size: 3}\n",
     "optim: group_size: rollouts per question is set once, at the top level of the recipe's "
     "config (`group_size: 4`), not in an optimiser"),
    (ArrConfig, "lora: null\n", "policies: 'shared_lora' needs lora settings — give "
     "lora, or use policies: separate for full fine-tuning"),
    (PipelineConfig, "data: {dvc_repro: false}\n", "data.dvc_repro: must be true"),
    (GrpoConfig, "temperature: 0\n", "temperature: Input should be greater than 0"),
    (GrpoConfig, "optim: {seed: -1}\n", "optim.seed: Input should be greater than or equal"),
    (GrpoConfig, "lora: {dropout: 1.0}\n", "lora.dropout: Input should be less than 1"),
    (GrpoConfig, "model: ''\n", "model: String should have at least 1 character"),
    (BenchmarkConfig, "retriever_url: localhost:8000\n", "retriever_url: String should match"),
    (BenchmarkConfig, "methods: []\n", "methods: List should have at least 1 item"),
])
def test_each_bad_value_names_its_field_and_the_fix(tmp_path, model, text, problem):
    bad = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(bad, model)
    assert str(err.value).startswith(f"{bad}: invalid {model.__name__} config: {problem}")
    assert "\n" not in str(err.value) and "Value error" not in str(err.value)


def test_overrides_are_laid_over_the_file_and_named_in_the_message():
    demo = ROOT / "configs/demo.yaml"
    cfg = load_config(demo, DemoConfig, {"benchmark": {"limit": 4}})
    assert (cfg.benchmark.limit, cfg.benchmark.topk) == (4, 3)
    with pytest.raises(ConfigError, match=r"with overrides .*benchmark\.limit: Input should be"):
        load_config(demo, DemoConfig, {"benchmark": {"limit": 0}})


def test_did_you_mean_takes_a_similar_name_or_a_prefix():
    assert did_you_mean("modle", ["model", "methods"]) == "did you mean 'model'?"
    assert did_you_mean("rank", ["r", "alpha"]) == "did you mean 'r'?"
    assert did_you_mean("optim", ["data", "train", "promotion"]) is None


def test_unknown_method_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="telepathy"):
        load_config(write(tmp_path, "methods: [cot, telepathy]\n"), BenchmarkConfig)


def test_missing_file_says_where_examples_are(tmp_path):
    with pytest.raises(FileNotFoundError, match="configs/"):
        load_config(tmp_path / "nope.yaml", DemoConfig)


def test_broken_or_binary_yaml_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "promotion: {n_boot: [\n"), PipelineConfig)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(binary, PipelineConfig)


def test_extends_lays_the_file_over_its_parent(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base/grandparent.yaml").write_text(
        "steps: 5\nmax_turns: 3\noptim: {lr: 1.0e-5, micro_batch_size: 4}\n")
    (tmp_path / "base/parent.yaml").write_text(
        "extends: grandparent.yaml\nsteps: 7\noptim: {micro_batch_size: 8}\n")
    (tmp_path / "child.yaml").write_text("extends: base/parent.yaml\nmax_turns: 1\nwarmup: null\n")
    cfg = load_config(tmp_path / "child.yaml", GrpoConfig)
    # the nearest file wins; nested mappings merge key by key; null replaces
    assert (cfg.steps, cfg.max_turns, cfg.warmup) == (7, 1, None)
    assert cfg.optim.model_dump(exclude_unset=True) == {"lr": 1e-5, "micro_batch_size": 8}


def test_extends_errors_name_the_file_and_the_fix(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ValueError, match="cycle.*remove one"):
        load_config(tmp_path / "a.yaml", BenchmarkConfig)
    (tmp_path / "self.yaml").write_text("extends: self.yaml\n")
    with pytest.raises(ValueError, match="cycle"):
        load_config(tmp_path / "self.yaml", BenchmarkConfig)
    (tmp_path / "orphan.yaml").write_text("extends: missing.yaml\n")
    with pytest.raises(FileNotFoundError, match=r"missing.yaml does not exist \(named by extends: in"):
        load_config(tmp_path / "orphan.yaml", BenchmarkConfig)
    (tmp_path / "list.yaml").write_text("extends: [a.yaml, b.yaml]\n")
    with pytest.raises(ValueError, match="takes one file path"):
        load_config(tmp_path / "list.yaml", BenchmarkConfig)


def test_a_resumed_run_may_compile_its_update_but_not_change_its_sampling():
    from advrag.config.base import config_hash

    def settings(config) -> str:  # what a checkpoint and the run resuming it must share
        return config_hash(config, exclude=config.RUN_CONTROL)

    base = GrpoConfig()
    assert settings(base.model_copy(update={"compile_update": True})) == settings(base)
    assert settings(base.model_copy(update={"amx_attention": False})) == settings(base)
    assert settings(base.model_copy(update={"temperature": 0.7})) != settings(base)


def test_compile_update_is_auto_by_default_and_takes_only_auto_or_a_bool(tmp_path):
    assert GrpoConfig().compile_update == "auto"
    assert GrpoConfig(compile_update=True).compile_update is True
    (tmp_path / "typo.yaml").write_text("compile_update: atuo\n")
    with pytest.raises(ValueError, match="compile_update"):
        load_config(tmp_path / "typo.yaml", GrpoConfig)


REX_ABLATIONS = {"coarse": {"correction": "coarse"}, "no-is": {"correction": "none"},
                 "no-filter": {"trajectory_filter": False},
                 "no-is-no-filter": {"correction": "none", "trajectory_filter": False},
                 "pool5": {"pool_size": 5}, "pool15": {"pool_size": 15}}


@pytest.mark.parametrize("name", sorted(REX_ABLATIONS))
def test_rex_rag_ablations_change_their_exploration_setting_and_names_only(name):
    base = load_config(ROOT / "configs/rex-rag.yaml", GrpoConfig).model_dump()
    ablation = load_config(ROOT / f"configs/rex-rag-{name}.yaml", GrpoConfig).model_dump()
    assert {k for k in base if base[k] != ablation[k]} == {
        "exploration", "checkpoint_dir", "registered_model"}
    changed = {k: v for k, v in ablation["exploration"].items() if base["exploration"][k] != v}
    assert changed == REX_ABLATIONS[name]


def test_rex_rag_with_probe_turns_changes_the_probes_turns_and_budgets_only():
    base = load_config(ROOT / "configs/rex-rag.yaml", GrpoConfig).model_dump()
    own = load_config(ROOT / "configs/rex-rag-probe-turns.yaml", GrpoConfig).model_dump()
    assert {k for k in base if base[k] != own[k]} == {
        "exploration", "optim", "warmup", "checkpoint_dir", "registered_model"}
    assert {k for k in base["exploration"] if base["exploration"][k] != own["exploration"][k]} \
        == {"probe_turns"}
    assert {k for k in base["optim"] if base["optim"][k] != own["optim"][k]} == {"max_seq_len"}
    assert own["exploration"]["probe_turns"] == 2 and base["exploration"]["probe_turns"] is None


def test_rex_rag_is_the_papers_setting_and_a_typo_in_exploration_is_named():
    config = load_config(ROOT / "configs/rex-rag.yaml", GrpoConfig)
    assert (config.reward_metric, config.exploration.probe_prob, config.exploration.pool_size,
            config.exploration.keep_ratio, config.exploration.correction) == ("em", 0.2, 30, 0.12,
                                                                              "fine")
    assert config.max_turns >= 4 and config.evaluate.max_turns == config.max_turns
    with pytest.raises(ConfigError, match=r"exploration\.probe_prop.*did you mean 'probe_prob'"):
        load_config(ROOT / "configs/rex-rag.yaml", GrpoConfig,
                    overrides={"exploration": {"probe_prop": 0.3}})
