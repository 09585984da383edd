"""Typed run configuration (pydantic), read from ``configs/*.yaml``.

One model per flow; each field says what it does. Defaults are the CPU demo
recipe: a few dozen held-out questions of the offline world with SmolLM2.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from advrag.config.base import OverridesOf, Strict
from advrag.config.engine import AMX_ATTENTION, LoraSettings, SFTConfig, TrainConfig
from advrag.core.patterns import PATTERN_SCORES, PATTERNS
from advrag.datasets.loaders import is_qa_path
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
    passage_words: int = Field(100, ge=40, le=120, description="Words per passage (facts, then "
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


class DataConfig(Strict):
    """The data plane: build the world, gate it, version it, index it."""

    raw_dir: Path = Field(Path("data"), description="Raw inputs tracked by data.dvc.")
    world: WorldSection = Field(default_factory=WorldSection, description="The generated world.")
    extra_files: list[Path] = Field(
        default_factory=list, description="More QA jsonl/parquet files to gate with the world."
    )
    dvc_repro: bool = Field(True, description="Run `dvc repro` (chunk → embed → index).")


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
    max_turns: int = Field(2, ge=1, description="Search-R1: searches per question (then a forced "
                           "answer); ARR: reasoner messages per dialogue, the answer included.")
    max_new_tokens: int = Field(80, ge=1, description="Token budget per generation call.")
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


class WarmupSection(Strict):
    """SFT warm-up on grounded protocol demonstrations before RL (the cold start)."""

    demonstrations: int = Field(64, ge=1, description="Training questions turned into demonstrations.")
    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(lr=2e-4, batch_size=8, epochs=3),
        description="The SFT settings (lr, epochs, batch_size, micro_batch_size, max_seq_len, …).",
    )


class RLRunConfig(Strict):
    """Settings every RL training flow shares (the local engine on the offline world).

    ``RUN_CONTROL`` names the fields a resumed run may change (how long and where it
    runs, on which rollout engine, whether its update runs compiled or with the bf16
    attention kernels, what it is logged and registered as); every other field must match the
    checkpoint's (``config_hash`` without them).
    """

    RUN_CONTROL: ClassVar[frozenset[str]] = frozenset({
        "steps", "max_train_minutes", "checkpoint_every", "checkpoint_dir", "experiment",
        "evaluate", "registered_model", "registered_reasoner", "registered_verifier",
        "world_dir", "index_dir", "rollout_backend", "registered_discriminator",
        "benchmark_base", "compile_update", "amx_attention", "compile_rollout"})

    lora: LoraSettings | None = Field(
        default_factory=lambda: LoraSettings(r=16, alpha=32),
        description="LoRA settings (r, alpha, dropout, target_modules); null = full fine-tune.",
    )
    cpu_bf16: bool = Field(True, description="bf16 autocast on CPUs that run bf16 natively.")
    amx_attention: bool = Field(True, description=AMX_ATTENTION)
    compile_update: bool | Literal["auto"] = Field(
        "auto", description="Run the update's decoder layers through torch.compile (needs a C++ "
        "compiler on a CPU): a one-off compile of about half a minute (seconds once inductor's "
        "cache holds it), then faster updates. 'auto' = on a CPU with a C++ compiler, for runs "
        "that train at least 160 sequences (updates × sequences per update; the warm-up counts "
        "its own), else off.",
    )
    compile_rollout: bool | Literal["auto"] = Field(
        "auto", description="Run vLLM rollout engines on their torch.compile'd graph instead of "
        "eager: rollouts 1.15x faster on the 2-core AVX512-BF16 CPU of README 'How fast', for "
        "about a minute more at the engine's start (45 s once vLLM's and inductor's caches hold "
        "the graph). 'auto' = for runs that sample at least 3,000 rollouts (steps × questions "
        "× group; curation: questions × k), else eager. Rollouts on transformers ignore it.",
    )
    max_train_minutes: float | None = Field(
        None, gt=0, description="Wall-clock budget of this run's updates: stop (and checkpoint) "
        "after the update that spends it; null = run all steps. The LR schedule still spans steps.",
    )
    benchmark_base: bool = Field(
        True, description="Benchmark the untrained base model as well (with evaluate): the "
        "reference row; false spares its minutes where only warm-up → trained matters.",
    )
    questions_per_step: int = Field(2, ge=1, description="Distinct questions per update.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of rollouts.")
    max_new_tokens: int = Field(64, ge=1, description="Tokens per generation call.")
    world_dir: Path = Field(Path("data/world"), description="The offline world's files.")
    index_dir: Path = Field(Path("processed/index"), description="Dense index from `dvc repro`.")
    rollout_backend: Literal["auto", "hf", "hf-fp16", "vllm"] = Field(
        "auto", description="Rollouts: 'hf' = transformers generate (a bf16 copy under cpu_bf16); "
        "'hf-fp16' = transformers on a copy with fp16 weights (fp32 activations; fbgemm on a CPU); "
        "'vllm' = a vLLM engine per agent that receives the new weights after every update "
        "(`make vllm`); 'auto' = vLLM where it is installed and runs the model, else 'hf-fp16' "
        "for an fp32 policy on an x86 CPU, else 'hf'.",
    )


class TrainFlowConfig(RLRunConfig):
    """`advrag train`: GRPO on a Search-R1-style agent over the offline world."""

    recipe: Literal["grpo"] = Field("grpo", description="Training recipe: single-agent GRPO "
                                    "(or REINFORCE++/Dr.GRPO through optim.advantage).")

    model: str = Field("smollm2", min_length=1,
                       description="Policy to start from (same specs as benchmark).")
    optim: TrainConfig = Field(
        default_factory=lambda: TrainConfig(lr=1e-5, group_size=4, micro_batch_size=4,
                                            max_seq_len=1024),
        description="Optimiser and GRPO settings (lr, kl_coef, advantage, group_size, …).",
    )
    warmup: WarmupSection | None = Field(
        default_factory=WarmupSection,
        description="SFT warm-up before GRPO (its LoRA is merged into the base); null skips it.",
    )
    steps: int = Field(8, ge=1, description="GRPO updates to run (in total, across resumes).")
    reward_metric: Literal["em", "f1"] = Field("f1", description="Answer score of the reward.")
    format_penalty: float = Field(0.2, ge=0, description="Subtracted once for a broken tag grammar.")
    max_turns: int = Field(2, ge=1, description="Search turns per rollout.")
    topk: int = Field(3, ge=1, description="Passages per search.")
    checkpoint_every: int = Field(4, ge=1, description="Save a checkpoint every N updates.")
    checkpoint_dir: Path = Field(Path(".cache/advrag/checkpoints/train"),
                                 description="Checkpoints; a rerun resumes from the latest.")
    experiment: str = Field("advrag-train", min_length=1, description="MLflow experiment name.")
    registered_model: str = Field("advrag-reasoner", min_length=1,
                                  description="Registry name of the result.")
    evaluate: BenchmarkConfig | None = Field(
        default_factory=lambda: BenchmarkConfig(methods=["search_r1"], limit=32),
        description="Benchmark of base and trained model on held-out data; null skips it.",
    )




class CurateSection(Strict):
    """UR²'s difficulty estimation and 7:2:1 sampling (§3.1.2); the paper's values are named."""

    k: int = Field(4, ge=1, description="Rollouts per question (paper 20; each costs a whole "
                   "agent rollout on this CPU).")
    metric: Literal["em", "f1"] = Field("f1", description="Answer score averaged into s.")
    thresholds: dict[Literal["easy", "medium", "hard"], Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=lambda: {"easy": 0.8, "medium": 0.5, "hard": 0.2},
        description="Lowest score of each level; below hard's a question is filtered (paper's).",
    )
    ratio: dict[Literal["easy", "medium", "hard"], Annotated[float, Field(ge=0)]] = Field(
        default_factory=lambda: {"hard": 7.0, "medium": 2.0, "easy": 1.0},
        description="Hard:medium:easy of the sample (paper 7:2:1).",
    )
    questions: int | None = Field(None, ge=1, description="Score only the first N training "
                                  "questions; null = all.")
    sample_size: int | None = Field(None, ge=1, description="Questions in the curated sample; "
                                    "null = as many as the ratio allows.")
    batch_questions: int = Field(8, ge=1, description="Questions rolled out together (k each).")
    ratio_tolerance: float = Field(0.05, ge=0, le=1, description="The gate's tolerance on each "
                                   "level's share of the sample.")
    out_dir: Path = Field(Path("processed/curated"), description="scores/curated/stage1 jsonl "
                          "and summary.json go here.")
    cache_dir: Path = Field(Path(".cache/advrag/curation"), description="Finished questions per "
                            "(policy, k, rollout settings): a killed curation resumes from it.")
    experiment: str = Field("advrag-curate", min_length=1, description="MLflow experiment name.")

    @model_validator(mode="after")
    def _levels_ordered(self) -> CurateSection:
        """Thresholds fall from easy to hard and name all three levels."""
        t = self.thresholds
        if set(t) != {"easy", "medium", "hard"} or not t["easy"] > t["medium"] > t["hard"]:
            raise ValueError(f"thresholds: give easy > medium > hard, got {dict(t)}")
        return self


class UR2Config(TrainFlowConfig):
    """`advrag rl` with ``recipe: ur2``: curation → stage 1 → stage 2 (UR² §3).

    Stage 1 trains on the questions the policy never solves (App. C.5) with the
    format + retrieval reward; stage 2 on the 7:2:1 curated sample with the
    answer + format reward; both subtract ``fallback_penalty`` per fallback fault.
    """

    recipe: Literal["ur2"] = Field("ur2", description="Training recipe: UR².")
    optim: TrainConfig = Field(
        default_factory=lambda: TrainConfig(lr=1e-5, group_size=4, micro_batch_size=4,
                                            max_seq_len=1024, advantage="reinforce_pp"),
        description="Optimiser settings; UR² trains with the REINFORCE++ baseline (App. C.2).",
    )
    curate: CurateSection | None = Field(
        default_factory=CurateSection,
        description="Difficulty curation before RL; null = train on the uncurated questions.",
    )
    stage1_steps: int = Field(10, ge=0, description="Updates with the stage-1 reward before "
                              "stage 2 (paper 10); 0 = 'w/o stage 1'.")
    fallback_penalty: float = Field(0.5, ge=0, description="Per fallback fault (paper 0.5); 0 = "
                                    "'w/o P_fallback'.")
    summary: SummaryConfig = Field(
        default_factory=SummaryConfig,
        description="LLM-summarised retrieval with the fallback message (§3.1.1); summarise: "
        "false = raw documents ('w/o summary').",
    )
    reasoning_share: float = Field(0.2, ge=0, le=1, description="Share of reasoning-only world "
                                   "items (reasoning_train.jsonl) among the training questions: "
                                   "task mixing; 0 = 'w/o task mixing'.")
    checkpoint_dir: Path = Field(Path(".cache/advrag/checkpoints/ur2"),
                                 description="Checkpoints; a rerun resumes from the latest.")
    experiment: str = Field("advrag-ur2", min_length=1, description="MLflow experiment name.")


class GARConfig(RLRunConfig):
    """`advrag rl` with ``recipe: gar``: a reasoner and a slice discriminator trained jointly (GAR §3).

    Two LoRA adapters on one base. Each update slices the reasoner's rollouts,
    mixes in as many reference slices from grounded demonstrations, lets the
    discriminator judge every slice, and updates the reasoner with
    λ1·R_m + λ2·R_s and (``discriminator: trainable``) the discriminator with
    λ3·R_d + λ4·R_a, both by GRPO. The paper's λ are the defaults.
    """

    recipe: Literal["gar"] = Field("gar", description="Training recipe: GAR (reasoner ⇄ "
                                   "discriminator).")
    model: str = Field("smollm2", min_length=1, description="Starting policy (same specs as "
                       "benchmark); both adapters sit on it.")
    optim: TrainConfig = Field(
        default_factory=lambda: TrainConfig(lr=5e-5, group_size=4, micro_batch_size=4,
                                            max_seq_len=1024, kl_coef=0.0),
        description="The reasoner's optimiser and GRPO settings (group_size = rollouts per question).",
    )
    discriminator_optim: Annotated[dict[str, Any], OverridesOf(TrainConfig)] = Field(
        default_factory=dict, description="Optimiser settings (as in optim) that differ for the "
        "discriminator; checked against optim's fields when the config is loaded.",
    )
    warmup: WarmupSection | None = Field(
        default_factory=WarmupSection,
        description="SFT warm-up of the reasoner on grounded Search-R1 demonstrations (merged "
        "into the base both adapters sit on); null skips it.",
    )
    discriminator: Literal["none", "fixed", "trainable"] = Field(
        "trainable", description="Table 4's rows: 'none' = R_m only, no discriminator; 'fixed' = "
        "the SFT discriminator scores but never learns; 'trainable' = joint adversarial RL.",
    )
    discriminator_adapter: Path | None = Field(
        None, description="The SFT discriminator's adapter (`advrag discriminator-sft`); null = a "
        "fresh adapter (an untrained judge).",
    )
    lam1: float = Field(1.0, ge=0, description="λ1: weight of the answer reward R_m.")
    lam2: float = Field(1.0, ge=0, description="λ2: weight of the slice reward R_s.")
    lam3: float = Field(1.0, ge=0, description="λ3: weight of the GAN term R_d (0 = 'R_a only').")
    lam4: float = Field(0.5, ge=0, description="λ4: weight of the alignment term R_a (0 = 'R_d only').")
    max_slice_tokens: int = Field(320, ge=8, description="GAR's L: most tokens per slice.")
    max_judge_tokens: int = Field(128, ge=8, description="GAR's K: most tokens per judgment.")
    malformed_penalty: float = Field(1.0, ge=0, description="Subtracted from a judgment with no "
                                     "readable verdict (its slice then scores 0.5).")
    reward_metric: Literal["em", "f1"] = Field("em", description="R_m: EM (paper) or F1 of the answer.")
    steps: int = Field(8, ge=1, description="Joint updates to run (in total, across resumes).")
    max_turns: int = Field(2, ge=1, description="Search turns per rollout.")
    topk: int = Field(3, ge=1, description="Passages per search.")
    checkpoint_every: int = Field(4, ge=1, description="Save every N updates.")
    checkpoint_dir: Path = Field(Path(".cache/advrag/checkpoints/gar"),
                                 description="Checkpoints (one subdir per trained agent); reruns resume.")
    experiment: str = Field("advrag-gar", min_length=1, description="MLflow experiment name.")
    registered_reasoner: str = Field("advrag-gar-reasoner", min_length=1,
                                     description="Registry name (reasoner).")
    registered_discriminator: str = Field("advrag-gar-discriminator", min_length=1,
                                          description="Registry name (trained discriminator).")
    evaluate: BenchmarkConfig | None = Field(
        default_factory=lambda: BenchmarkConfig(methods=["search_r1"], limit=32),
        description="Benchmark of the untrained and trained reasoner on held-out data; null skips it.",
    )

    @model_validator(mode="after")
    def _adapters_need_lora(self) -> GARConfig:
        """Both agents are LoRA adapters on one base."""
        if self.lora is None:
            raise ValueError("lora: GAR keeps the reasoner and the discriminator as two LoRA "
                             "adapters on one base — give lora settings")
        return self


class AdversarialRLConfig(RLRunConfig):
    """`advrag adversarial-rl`: ARR, joint GRPO of a Reasoner and a Verifier (ARR §4.2).

    Defaults are the CPU recipe (SmolLM2, LoRA); the paper's values are named
    where they differ. The paper gives no λ, n or δ: the defaults are ours.
    """

    recipe: Literal["arr"] = Field("arr", description="Training recipe: ARR (reasoner ⇄ verifier).")
    model: str = Field("smollm2", min_length=1,
                       description="Starting policy of both agents (same specs as benchmark).")
    policies: Literal["shared_lora", "separate"] = Field(
        "shared_lora",
        description="'shared_lora': one base, a LoRA adapter per agent (needs lora); "
        "'separate': a model per agent (LoRA or full).",
    )
    verifier_model: str | None = Field(
        None, min_length=1,
        description="'separate' only: the verifier's starting model; null = `model`.",
    )
    optim: TrainConfig = Field(
        default_factory=lambda: TrainConfig(lr=5e-5, micro_batch_size=2, max_seq_len=2048,
                                            kl_coef=0.001),
        description="Optimiser settings of both agents (lr, kl_coef, …; not group_size).",
    )
    verifier_optim: Annotated[dict[str, Any], OverridesOf(TrainConfig)] = Field(
        default_factory=dict, description="Optimiser settings (as in optim) that differ for the "
        "verifier; checked against optim's fields when the config is loaded.",
    )
    warmup: WarmupSection | None = Field(
        default_factory=lambda: WarmupSection(demonstrations=32, sft=SFTConfig(
            lr=2e-4, batch_size=8, micro_batch_size=2, max_seq_len=2048)),
        description="SFT of the start model on grounded ARR dialogues (both roles), merged "
        "into the base both agents start from; null skips it.",
    )
    steps: int = Field(8, ge=1, description="Joint updates to run (in total, across resumes).")
    group_size: int = Field(4, ge=1, description="Dialogues G per question (GRPO group; paper 5).")
    max_turns: int = Field(3, ge=1, description="Turns T: reasoner messages per dialogue, the "
                           "answer included (paper 5); T − 1 searches at most.")
    topk: int = Field(3, ge=1, description="Documents per search (paper 3).")
    lam: float = Field(0.5, ge=0, description="λ of eq. 5: weight of the beat-the-other bonus.")
    n_bins: int = Field(10, ge=1, description="n of eq. 5: F1 buckets of bin(·).")
    delta: float = Field(0.1, ge=0, description="δ: entropy change treated as flat (eq. 8).")
    pattern_scores: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=lambda: dict(PATTERN_SCORES),
        description="Impact score of each entropy pattern (the paper's table).",
    )
    critique_actions: list[VerifierAction] = Field(
        default_factory=lambda: ["verify", "response"], min_length=1,
        description="Verifier actions that get the process advantage (A_sub^v).",
    )
    monitored_actions: list[ReasonerAction] = Field(
        default_factory=lambda: ["think"], min_length=1,
        description="Reasoner actions whose entropy trend gives the impact (A_sub^r).",
    )
    adversarial_reward: bool = Field(True, description="Eq. 5's bonus; false = 'w/o adv-out'.")
    process_advantage: bool = Field(True, description="Eqs. 6–9; false = 'w/o proc-adv'.")
    format_penalty: float = Field(0.2, ge=0, description="Subtracted once from an agent's "
                                  "reward when it broke the tag grammar.")
    checkpoint_every: int = Field(4, ge=1, description="Save both agents every N updates.")
    checkpoint_dir: Path = Field(Path(".cache/advrag/checkpoints/arr"),
                                 description="Checkpoints (one subdir per agent); reruns resume.")
    experiment: str = Field("advrag-arr", min_length=1, description="MLflow experiment name.")
    registered_reasoner: str = Field("advrag-arr-reasoner", min_length=1,
                                     description="Registry name (reasoner).")
    registered_verifier: str = Field("advrag-arr-verifier", min_length=1,
                                     description="Registry name (verifier).")
    evaluate: BenchmarkConfig | None = Field(
        default_factory=lambda: BenchmarkConfig(methods=["arr", "search_r1"], limit=32),
        description="Benchmark of the untrained and the trained pair on held-out data; null skips it.",
    )

    @field_validator("pattern_scores")
    @classmethod
    def _every_pattern_scored(cls, scores: dict[str, float]) -> dict[str, float]:
        """One score per pattern of the paper's table, no other key."""
        missing, unknown = set(PATTERNS) - set(scores), set(scores) - set(PATTERNS)
        if missing or unknown:
            raise ValueError(f"give exactly the patterns {', '.join(PATTERNS)} a score (missing: "
                             f"{', '.join(sorted(missing)) or 'none'}; unknown: "
                             f"{', '.join(sorted(unknown)) or 'none'})")
        return scores

    @model_validator(mode="after")
    def _policies_fit(self) -> AdversarialRLConfig:
        """Reject policy layouts the flow cannot run, naming the fix."""
        if self.policies == "shared_lora" and self.lora is None:
            raise ValueError("policies: 'shared_lora' needs lora settings — give lora, or use "
                             "policies: separate for full fine-tuning")
        if self.verifier_model is not None and self.policies != "separate":
            raise ValueError("verifier_model: needs policies: separate (a shared base has one "
                             "model) — set policies: separate, or remove verifier_model")
        if self.verifier_model is not None and self.warmup is not None:
            raise ValueError("verifier_model: the warm-up makes one start model for both agents "
                             "— set warmup: null to start the verifier from verifier_model")
        return self

    @model_validator(mode="after")
    def _one_group_size(self) -> AdversarialRLConfig:
        """Both agents share the top-level ``group_size``; ``optim`` gets it."""
        in_optim = ("group_size" in self.optim.model_fields_set
                    and self.optim.group_size != self.group_size)
        if in_optim or "group_size" in self.verifier_optim:
            section = "optim" if in_optim else "verifier_optim"
            raise ValueError(f"{section}.group_size: both agents share one group size — set "
                             "group_size at the top level")
        self.optim = self.optim.model_copy(update={"group_size": self.group_size})
        return self


class PromotionSection(Strict):
    """The registry promotion gate (``advrag/promotion.py``)."""

    method: Method = Field("search_r1", description="Method whose per-question EM is compared "
                           "(the trained agent is a Search-R1-style agent).")
    min_margin: float = Field(0.0, ge=-1, le=1, description="The lower bound of the 95 % interval "
                              "of EM(candidate) − EM(champion) must exceed this to promote.")
    n_boot: int = Field(2000, ge=100, description="Paired-bootstrap resamples.")
    seed: int = Field(0, ge=0, lt=2**32,
                      description="Bootstrap seed (the same evidence gives the same decision).")


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

    @model_validator(mode="after")
    def _trains_on_the_index_it_builds(self) -> PipelineConfig:
        """Training, the benchmark and the gate's data version all need `dvc repro`'s index."""
        if not self.data.dvc_repro:
            raise ValueError("data.dvc_repro: must be true — the pipeline trains on the index "
                             "it builds")
        return self
