"""Typed run configuration (pydantic), read from ``configs/*.yaml``.

One model per flow; each field says what it does. Defaults are the CPU demo
recipe: a few dozen held-out questions of the offline world with SmolLM2.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from advrag.config.base import Strict
from advrag.datasets.loaders import QA_SUFFIXES, is_qa_path
from advrag.datasets.world import WorldConfig

Method = Literal["cot", "naive_rag", "search_r1", "arr"]
ReasonerAction = Literal["think", "search", "verify", "answer"]
VerifierAction = Literal["verify", "selected_doc", "response", "final_answer"]

SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
RESERVED_NAMES = {"avg"}  # metric prefix of the per-method averages over datasets


def dataset_spec(entry: str | dict[str, str]) -> tuple[str, str]:
    """``(name, source)`` of a ``datasets`` entry: metric names and artifact paths use ``name``.

    A file path is named by its stem (characters MLflow refuses become ``_``);
    ``{name: path}`` names it explicitly; 'world' and standard names name themselves.
    """
    if isinstance(entry, dict):
        if len(entry) != 1:
            raise ValueError(f"datasets: {entry!r} must map one name to one path, e.g. "
                             "{my_qa: /data/my_qa/test.jsonl}")
        ((name, source),) = entry.items()
        if not SAFE_NAME.match(name):
            raise ValueError(f"datasets: name {name!r} may use only letters, digits, '_', '-', "
                             "'.' (not first), at most 100 characters")
        return _unreserved(name), source
    if is_qa_path(entry):
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(entry).stem).lstrip(".")[:100]
        return _unreserved(stem or "dataset"), entry
    return _unreserved(entry), entry


def _unreserved(name: str) -> str:
    """``name``, unless the metrics use it for something else."""
    if name in RESERVED_NAMES:
        raise ValueError(f"datasets: the name {name!r} is reserved for the averages over datasets; "
                         "name the dataset with the {name: path} form, e.g. {my_avg: <path>}")
    return name


_WORLD = WorldConfig()  # the generator's default sizes, the section's defaults too


class WorldSection(Strict):
    """Size and seed of the generated offline world."""

    out_dir: Path = Field(Path("data/world"), description="Where the world's jsonl files go.")
    seed: int = Field(13, ge=0, lt=2**32,
                      description="Generator seed; the same seed gives the same world.")
    n_train: int = Field(500, ge=1, description="Training questions.")
    n_dev: int = Field(100, ge=1, description="Development questions.")
    n_test: int = Field(100, ge=1, description="Held-out test questions.")
    passage_words: int = Field(60, ge=40, le=120, description="Words per passage (facts, then "
                               "filler up to it): shorter passages, shorter prompts.")
    n_countries: int = Field(_WORLD.n_countries, ge=2,
                             description="Countries, each with its capital city.")
    n_cities: int = Field(_WORLD.n_cities, ge=2, description="Cities (at least n_countries).")
    n_people: int = Field(_WORLD.n_people, ge=4, description="People (about two passages each).")
    n_organisations: int = Field(_WORLD.n_organisations, ge=2, description="Organisations.")
    n_rivers: int = Field(_WORLD.n_rivers, ge=2, description="Rivers.")
    n_mountains: int = Field(_WORLD.n_mountains, ge=2, description="Mountains. The entity counts "
                             "set the corpus size (the defaults: ~1.5k passages); tests use a "
                             "small world.")

    def world_config(self) -> WorldConfig:
        """The generator's settings: everything here but ``out_dir``."""
        return WorldConfig(**self.model_dump(exclude={"out_dir"}))

    @model_validator(mode="after")
    def _generates(self) -> WorldSection:
        """Sizes the generator refuses (fewer cities than countries) fail when the config loads."""
        try:
            self.world_config()
        except ValidationError as err:
            raise ValueError(err.errors()[0]["msg"].removeprefix("Value error, ")) from None
        return self


FILE_SHAPES = ("QA rows: id, question, golden_answers", "one {id, contents} JSON object a line")
"""What a QA file and the corpus hold (indexed by ``is corpus``), for the error messages."""


class DataFiles(Strict):
    """Your own data in FlashRAG's layout: a corpus of ``{"id", "contents"}`` JSON lines, and
    train/dev/test questions as ``{"id", "question", "golden_answers"}`` rows (JSON lines, a
    JSON array or parquet). Paths relative to the directory advrag runs in."""

    corpus: Path = Field(..., description="The corpus: one {id, contents} JSON object a line.")
    train: Path = Field(..., description="Training questions: RL, the warm-up, curation.")
    dev: Path = Field(..., description="Development questions: where settings are chosen.")
    test: Path = Field(..., description="Held-out questions: the benchmark and the promotion "
                       "gate score these.")

    @model_validator(mode="after")
    def _readable_files(self) -> DataFiles:
        """Each file exists and is of a format its loader reads, checked when the config loads."""
        for split in ("corpus", "train", "dev", "test"):
            path = getattr(self, split)
            formats = (".jsonl",) if split == "corpus" else QA_SUFFIXES
            if path.suffix.lower() not in formats:
                raise ValueError(f"{split}: {path} is not a {' or '.join(formats)} file "
                                 f"({FILE_SHAPES[split == 'corpus']})")
            if not path.expanduser().is_file():
                raise ValueError(f"{split}: {path} does not exist (a relative path is read from "
                                 f"{Path.cwd()})")
        return self


class DataConfig(Strict):
    """The data plane: the generated world or your files, gated, versioned and indexed."""

    raw_dir: Path = Field(Path("data"), description="Raw inputs tracked by data.dvc.")
    world: WorldSection | None = Field(default_factory=WorldSection, description="The "
                                       "generated world (the default); null with files:.")
    files: DataFiles | None = Field(None, description="Your own corpus and QA splits instead "
                                    "of the world; copied under raw_dir/files and versioned "
                                    "there.")
    extra_files: list[Path] = Field(
        default_factory=list, description="More QA jsonl/parquet files to gate with the world."
    )
    dvc_repro: bool = Field(True, description="Run `dvc repro` (chunk → embed → index).")

    @model_validator(mode="before")
    @classmethod
    def _world_or_files(cls, data: Any) -> Any:
        """Exactly one source: ``files:`` replaces the default world; naming both is an error."""
        if not isinstance(data, dict) or data.get("files") is None:
            if isinstance(data, dict) and "world" in data and data["world"] is None:
                raise ValueError("world: null needs files: {corpus, train, dev, test} (your own "
                                 "data); remove world: null to use the generated world")
            return data
        if data.get("world") is not None:
            raise ValueError("give world: (the generated world) or files: (your own data), not "
                             "both: remove the one you do not mean (a config that extends one "
                             "with world: sets world: null beside its files:)")
        return {**data, "world": None}

    @property
    def dataset_dir(self) -> Path:
        """Where the corpus and QA splits every stage reads live: the world's directory, or
        ``raw_dir/files`` where your files are copied."""
        return self.world.out_dir if self.world is not None else self.raw_dir / "files"


class SummaryConfig(Strict):
    """UR²'s LLM-summarised retrieval (§3.1.1): who summarises, how long, where summaries are cached."""

    summarise: bool = Field(False, description="Replace the top-k documents by the summariser's "
                            "summary (or its fallback message); false = raw documents.")
    endpoint: str | None = Field(None, pattern=r"^https?://", description="OpenAI-compatible "
                                 "server (http://host:port, e.g. a vLLM server); null = a local "
                                 "model (the policy's base in training).")
    model: str | None = Field(None, min_length=1, description="With endpoint: the served model "
                              "name (null = the first the server lists). Without: a model spec "
                              "(smollm2, a dir, a .gguf; null = the policy's base, else smollm2).")
    max_new_tokens: int = Field(256, ge=1, description="Token budget of one summary.")
    timeout_s: float = Field(60.0, gt=0, description="Per-request limit at the endpoint; a "
                             "request that runs past it gets the raw documents (and is counted).")
    cache_dir: Path = Field(Path(".cache/advrag/summaries"), description="Summaries are cached "
                            "here by (query, passage ids, summariser).")


class BenchmarkConfig(Strict):
    """Which methods to evaluate, on what, with which model and retriever."""

    model: str = Field("smollm2", min_length=1, description="Policy: 'smollm2', a directory, a "
                       ".gguf, a hub id or models:/name@alias.")
    verifier_model: str | None = Field(
        None, min_length=1,
        description="ARR's verifier policy (same specs as model); null = model plays both roles.",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="'auto' = bfloat16 where the CPU/GPU supports it, else float32; "
        "'float16' = fp16 weights (on a CPU: fp32 activations through fbgemm's kernels, faster "
        "decoding where bf16 is not native).",
    )
    methods: list[Method] = Field(
        default_factory=lambda: ["cot", "naive_rag", "search_r1", "arr"], min_length=1,
        description="Methods to evaluate, in order.",
    )
    datasets: list[str | dict[str, str]] = Field(
        default_factory=lambda: ["world"],
        description="'world' (the offline world), a standard name (nq, hotpotqa, …), a file path "
        "(named by its file stem in metrics and artifacts) or {name: path}; names are unique.",
    )
    split: str = Field("test", min_length=1, description="Split to evaluate.")
    limit: int | None = Field(32, ge=1, description="Evaluate only the first N questions per "
                              "dataset; null = all.")
    world_dir: Path = Field(Path("data/world"), description="The offline world's files.")
    index_dir: Path = Field(Path("processed/index"), description="Dense index built by `dvc repro`.")
    retriever: Literal["dense", "bm25"] = Field("dense", description="Retriever kind.")
    retriever_url: str | None = Field(None, pattern=r"^https?://", description="Use a running "
                                      "retrieval server (http://host:port) instead.")
    topk: int = Field(3, ge=1, description="Passages per search.")
    max_turns: int = Field(4, ge=1, description="Search-R1: searches per question (then a forced "
                           "answer); ARR: reasoner messages per dialogue, the answer included.")
    max_new_tokens: int = Field(128, ge=1, description="Token budget per generation call.")
    batch_size: int = Field(32, ge=1, description="Questions that advance together.")
    datasets_root: Path = Field(Path("data/benchmarks"), description="Where standard QA files live.")
    experiment: str = Field("advrag-benchmark", min_length=1, description="MLflow experiment name.")
    seed: int = Field(0, ge=0, lt=2**32, description="Seed for sampling and bootstrap intervals.")
    predictions_dir: Path = Field(
        Path(".cache/advrag/predictions"), description="Per-question predictions and summaries "
        "are written here (<run id>/<dataset>/<method>.json) before anything is logged to MLflow.",
    )

    @model_validator(mode="after")
    def _dataset_names(self) -> BenchmarkConfig:
        """Every dataset entry parses to a name, and no two share one."""
        names = [name for name, _ in self.dataset_specs()]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"datasets: the name(s) {repeated} are used twice; give one of them "
                             "its own name with the {name: path} form")
        return self

    def dataset_specs(self) -> list[tuple[str, str]]:
        """``(name, source)`` per dataset entry, in order (see ``dataset_spec``)."""
        return [dataset_spec(entry) for entry in self.datasets]


class DemoConfig(Strict):
    """`make demo`: prepare the data, then benchmark."""

    data: DataConfig = Field(default_factory=DataConfig, description="World, gate and DVC stages.")
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig,
                                       description="Methods × datasets to evaluate.")


class PromotionSection(Strict):
    """The registry promotion gate (``advrag/promotion.py``)."""

    method: Method = Field("search_r1", description="Method whose per-question EM is compared "
                           "(the trained agent is a Search-R1-style agent).")
    min_margin: float = Field(0.0, ge=-1, le=1, description="The lower bound of the 95 % interval "
                              "of EM(candidate) − EM(champion) must exceed this to promote.")
    n_boot: int = Field(2000, ge=100, description="Paired-bootstrap resamples.")
    seed: int = Field(0, ge=0, lt=2**32,
                      description="Bootstrap seed (the same evidence gives the same decision).")


class VerlSection(Strict):
    """The pipeline's RL stage on verl's trainer (GPUs, Ray) instead of the local engine:
    ``advrag rl --engine verl``'s settings (docs/verl.md)."""

    gpus: int = Field(1, ge=1, description="GPUs per node.")
    nodes: int = Field(1, ge=1, description="Nodes of the Ray cluster.")
    retriever_url: str | None = Field(
        None, pattern=r"^https?://", description="The retrieval server the rollout workers "
        "search; unset: the pipeline serves its index on 127.0.0.1 for the stage (one node).")
    out_dir: Path = Field(Path(".cache/advrag/verl"), description="Where the exported parquet "
                          "and the agent loop file go.")

    @model_validator(mode="after")
    def _several_nodes_share_a_server(self) -> VerlSection:
        if self.nodes > 1 and self.retriever_url is None:
            raise ValueError("verl.retriever_url: several nodes need a retrieval server they "
                             "all reach (advrag serve-retriever --host 0.0.0.0 --allowed-host "
                             "<name> and https, with ADVRAG_RETRIEVER_TOKEN); the pipeline's "
                             "own serves one node")
        return self


class PipelineConfig(Strict):
    """`advrag pipeline` and `advrag nightly` (the pipeline on the night's config): data → warm-up
    → curation → discriminator SFT → joint RL → benchmark → promotion gates, each stage a
    subflow with its own MLflow run nested under the pipeline's."""

    data: DataConfig = Field(default_factory=DataConfig, description="World, gate and DVC stages.")
    recipe: Path = Field(Path("configs/gar.yaml"), description="The RL recipe's config file (its "
                         "`recipe:` — gar, arr, ur2, grpo — picks the method).")
    discriminator: Path | None = Field(
        Path("configs/discriminator.yaml"), description="The discriminator SFT config (GAR "
        "recipes with a discriminator); its base becomes the reasoner's start model.",
    )
    promotion: PromotionSection = Field(default_factory=PromotionSection,
                                        description="The registry's promotion gates (the "
                                        "reasoner's and the SFT discriminator's).")
    experiment: str = Field("advrag-pipeline", min_length=1, description="MLflow experiment of "
                            "the pipeline run and its stages' runs.")
    cache_dir: Path = Field(Path(".cache/advrag/pipeline"), description="Finished stages, by "
                            "the hash of their inputs: a rerun skips them, a killed run resumes.")
    verl: VerlSection | None = Field(None, description="Train the RL stage with verl's trainer "
                                     "on GPUs (single-policy recipes: grpo, ur2); unset: the local "
                                     "engine.")

    @model_validator(mode="after")
    def _trains_on_the_index_it_builds(self) -> PipelineConfig:
        """Training, the benchmark and the gate's data version all need `dvc repro`'s index."""
        if not self.data.dvc_repro:
            raise ValueError("data.dvc_repro: must be true — the pipeline trains on the index "
                             "it builds")
        return self
