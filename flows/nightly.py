"""Flows `nightly` (refresh → gate → train → benchmark → promotion gate), `promote`, `rollback`."""

from __future__ import annotations

from prefect import flow

from advrag.config import (
    BenchmarkConfig,
    NightlyConfig,
    PromotionSection,
    TrainFlowConfig,
    config_hash,
    load_config,
)
from advrag.flows.benchmark import benchmark
from advrag.flows.rl import benchmark_tags
from advrag.flows.train import train
from advrag.tasks import data, tracking
from advrag.tasks import nightly as nt
from advrag.tasks import promotion as promo

DEFAULT_CONFIG = "configs/nightly.yaml"


@flow(name="nightly", log_prints=True)
def nightly(config: NightlyConfig | str = DEFAULT_CONFIG) -> dict:
    """World → GX gate → `dvc add` → `dvc repro` → train → benchmark → promotion gate."""
    config = as_config(config)
    world = data.build_world(config.data.world)
    qa = [world / f"{split}.jsonl" for split in ("train", "dev", "test")] + config.data.extra_files
    corpus = [world / "corpus.jsonl"]
    gate = nt.gate_data(qa, corpus, nt.content_digest([*qa, *corpus]))
    data.version_raw_data(config.data.raw_dir)
    digest = data.reproduce_stages()["digest"]
    trained = train(nightly_training(config.train, digest), run_name=f"nightly-{digest}")
    name, version = config.train.registered_model, trained["version"]
    promo.record_gate(name, version, gate, digest)
    evaluation = benchmark(config.train.evaluate.model_copy(update={"model": f"models:/{name}/{version}"}),
                           run_name=f"nightly-v{version}", return_state=True)
    if evaluation.is_completed():
        promo.record_benchmark(name, version, benchmark_tags(evaluation.result()))
    decision = promote(config, version)
    evaluation.result()  # a failed benchmark fails the night, after the gate recorded it
    return {"data_version": digest, "version": version, **decision}


@flow(name="promote", log_prints=True)
def promote(config: NightlyConfig | str = DEFAULT_CONFIG, version: str | None = None,
            force: bool = False) -> dict:
    """Evidence of the candidate (default: latest version) and of the champion on the same
    questions (benchmarked anew when needed) → decision → aliases and tags."""
    config = as_config(config)
    tracking.configure()
    return promotion_gate(config.train.registered_model, config.train.evaluate, config.promotion,
                          version, force)


def promotion_gate(name: str, evaluate: BenchmarkConfig, settings: PromotionSection,
                   version: str | None = None, force: bool = False) -> dict:
    """Judge version ``version`` of ``name`` against its champion on the same questions
    (benchmarking the champion with ``evaluate`` when needed); set aliases and tags."""
    method = settings.method
    candidate = promo.candidate_evidence(name, version, method)
    champion = promo.champion_evidence(name, method)
    if promo.needs_rebenchmark(candidate, champion):
        spec = f"models:/{name}/{champion.version}"
        run = benchmark(evaluate.model_copy(update={"model": spec}),
                        run_name=f"champion-v{champion.version}")
        champion = promo.rescored(champion, run["run_id"], method)
    decision = promo.judge(candidate, champion, settings, force)
    tags = promo.apply_decision(name, candidate.version, decision)
    print(f"{name} v{candidate.version}: {decision.alias} — {decision.reason}")
    return {"version": candidate.version, "alias": decision.alias, **tags}


@flow(name="rollback", log_prints=True)
def rollback(config: NightlyConfig | str = DEFAULT_CONFIG) -> dict:
    """Give `champion` back to the version the current champion replaced."""
    config = as_config(config)
    tracking.configure()
    name = config.train.registered_model
    restored, demoted = promo.rollback(name)
    print(f"{name}@champion: v{demoted} → v{restored}")
    return {"name": name, "restored": restored, "demoted": demoted}


def as_config(config: NightlyConfig | str) -> NightlyConfig:
    """A config object as is, a path (what deployments pass) read and validated."""
    return config if isinstance(config, NightlyConfig) else load_config(config, NightlyConfig)


def nightly_training(train_config: TrainFlowConfig, data_digest: str) -> TrainFlowConfig:
    """The train flow's settings for one night: checkpoints keyed by the data and the training
    settings (a rerun on the same data resumes instead of starting over); no evaluation inside,
    the nightly benchmarks the registered candidate itself."""
    training = train_config.model_copy(update={"evaluate": None})
    key = f"{data_digest}-{config_hash(training, exclude=training.RUN_CONTROL)}"
    return training.model_copy(update={"checkpoint_dir": train_config.checkpoint_dir / key})
