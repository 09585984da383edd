"""``advrag rl --engine verl``: a GRPO or UR² recipe config as runs of verl's ``main_ppo`` on Ray.

Three steps, each checkable on a CPU:

1. **Data** (``export_parquet``): the training and dev questions in verl's RLHF parquet
   schema — ``data_source``, ``prompt`` (the chat messages: the recipe's search prompt),
   ``ability``, ``reward_model: {style: rule, ground_truth: {target: golden answers}}``,
   ``extra_info`` (our id, the split) and ``agent_name`` (``advrag_search_r1``).
2. **Config** (``override_values``, ``compose``): our config's values as Hydra overrides of verl's
   ``ppo_trainer`` — the plugin's estimator and loss, the learning rate, clip and KL settings,
   LoRA, the group size, the batch, the turn and token budgets, the reward function, the agent
   loop (a file written beside the data, naming the retrieval server), the steps and
   checkpoints — composed against verl's own config files, so a key verl does not have
   fails here, naming it.
3. **Launch**: ``python -m verl.trainer.main_ppo <overrides>`` with the plugin named in
   ``VERL_USE_EXTERNAL_MODULES``; ``--dry-run`` prints the command and the composed config.
4. **Back** (the flow ``rl-verl``, ``advrag.flows.verl``): verl's metrics go to the run's
   MLflow run, and its newest checkpoint is merged, registered and benchmarked.

UR² is two verl runs, one per stage (``prepare_ur2_stage``: the stage's pool with task mixing's
rows, UR²'s reward of the stage, its steps and checkpoint directory). REX-RAG (``exploration``)
runs its own agent loop on the training rows and its own trainer (``rex_values``,
``rex_trainer``). What does not map: the local engine's SFT warm-up (verl starts from ``model``,
so point it at a warmed-up model); two-policy recipes (ARR, GAR) stay local.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from advrag.agents.prompts import direct_reasoning_prompt, search_r1_prompt
from advrag.datasets.records import QARecord

AGENT_NAME = "advrag_search_r1"
DIRECT_AGENT_NAME = "advrag_direct"
REX_AGENT_NAME = "advrag_rex_rag"
"""verl's ``agent_name`` of a row that searches, of one answered directly (UR²'s task
mixing; ``agent_loop.DirectAnswerAgentLoop``) and of one that searches and may be probed
(REX-RAG; ``agent_loop.RexSearchAgentLoop``)."""
CHECKPOINTS = "verl"
"""verl's ``trainer.default_local_dir``, under the config's ``checkpoint_dir``."""
REWARD_PATH = "pkg://advrag.engines.verl.rewards"
DEFAULT_PROMPT_TOKENS = 512
"""The prompt budget when the model's tokenizer is not at hand (``prompt_budget``)."""
MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"
PLUGIN = "advrag.engines.verl"
REX_TRAINER_MODE = "advrag_rex_rag"
REX_MODULES = f"{PLUGIN},{PLUGIN}.rex_trainer"
"""verl's ``trainer.v1.trainer_mode`` of REX-RAG's trainer, and the modules that register it."""
KL_TYPES = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}
"""Our KL estimators by verl's names (``core_algos.kl_penalty``)."""


def verl_config_dir() -> Path:
    """verl's own Hydra config files (``verl/trainer/config``)."""
    import verl

    return Path(verl.__file__).parent / "trainer" / "config"


def dataset_rows(records: Sequence[QARecord], split: str,
                 retrieval: Sequence[bool] | None = None,
                 search_prompt: Callable[[str], str] = search_r1_prompt,
                 search_agent: str = AGENT_NAME) -> list[dict[str, Any]]:
    """verl's RLHF rows for ``records`` (module docstring, step 1). ``retrieval``: per record,
    whether it searches (``search_prompt``, the ``search_agent`` loop: REX-RAG's with
    exploration) or, under UR²'s task mixing, answers directly (the direct-reasoning prompt and
    loop, and ``extra_info.retrieval_expected: false`` for ``rewards.ur2_score``); default:
    all search."""
    retrieval = [True] * len(records) if retrieval is None else list(retrieval)
    if len(retrieval) != len(records):
        raise ValueError(f"{len(retrieval)} retrieval flags for {len(records)} records")
    return [{"data_source": "advrag", "ability": "qa",
             "agent_name": search_agent if searches else DIRECT_AGENT_NAME,
             "prompt": [{"role": "user", "content": (search_prompt if searches
                                                     else direct_reasoning_prompt)(r.question)}],
             "reward_model": {"style": "rule", "ground_truth": {"target": list(r.golden_answers)}},
             "extra_info": {"id": r.id, "split": split, "index": i,
                            "retrieval_expected": searches}}
            for i, (r, searches) in enumerate(zip(records, retrieval))]


def export_parquet(records: Sequence[QARecord], path: Path, split: str,
                   **rows: Any) -> Path:
    """Write ``records`` as verl's parquet at ``path`` (replaced whole); ``rows``: how
    ``dataset_rows`` prompts them."""
    import pandas as pd

    from advrag.common.fileio import atomic_file

    if not records:
        raise ValueError(f"no {split} questions to export for verl")
    with atomic_file(path) as tmp:
        pd.DataFrame(dataset_rows(records, split, **rows)).to_parquet(tmp, index=False)
    return path


def agent_loop_file(path: Path, config: Any, retriever_url: str,
                    reward: tuple[str, dict[str, Any]]) -> Path:
    """The agent loop config verl reads (``rollout.agent.agent_loop_config_path``); with
    ``exploration``, REX-RAG's loop too, scoring with ``reward`` (its name and settings)."""
    search = {"retriever_url": retriever_url, "max_turns": config.max_turns,
              "topk": config.topk}
    entries = [{"name": AGENT_NAME,
                "_target_": "advrag.engines.verl.agent_loop.SearchR1AgentLoop", **search},
               {"name": DIRECT_AGENT_NAME,
                "_target_": "advrag.engines.verl.agent_loop.DirectAnswerAgentLoop"}]
    exploration = getattr(config, "exploration", None)
    if exploration is not None:
        name, settings = reward
        entries.append({"name": REX_AGENT_NAME,
                        "_target_": "advrag.engines.verl.agent_loop.RexSearchAgentLoop",
                        **search, "probe_prob": exploration.probe_prob,
                        "pool_size": exploration.pool_size, "reward": name,
                        "reward_kwargs": settings, "seed": config.optim.seed})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=2) + "\n")  # JSON is YAML: OmegaConf reads it
    return path


def refuse_unmapped(config: Any) -> None:
    """A config whose training the verl path would change is refused, naming what to drop."""
    if config.recipe not in ("grpo", "ur2"):
        raise ValueError(f"--engine verl runs recipes grpo and ur2 for now; {config.recipe!r} "
                         "trains with steps the verl path does not have yet (docs/verl.md): "
                         "run it locally")


def search_r1_reward(config: Any) -> tuple[str, dict[str, Any]]:
    """verl's reward function for a GRPO config, and its settings."""
    return "search_r1_score", {"metric": config.reward_metric,
                               "format_penalty": config.format_penalty}


def ur2_reward(config: Any, stage: int) -> tuple[str, dict[str, Any]]:
    """verl's reward function for a UR² stage, and its settings."""
    return "ur2_score", {"stage": stage, "metric": config.reward_metric,
                         "fallback_penalty": config.fallback_penalty}


def search_agent(config: Any) -> str:
    """The agent loop of the rows that search: REX-RAG's with ``exploration``."""
    return AGENT_NAME if getattr(config, "exploration", None) is None else REX_AGENT_NAME


def ur2_stage_steps(config: Any) -> dict[int, int]:
    """UR²'s stages on verl, each its own verl run: stage → its updates (none: left out)."""
    first = min(config.stage1_steps, config.steps)
    return {stage: steps for stage, steps in ((1, first), (2, config.steps - first)) if steps}


def stage_root(config: Any, stage: int | None = None) -> Path:
    """verl's ``default_local_dir`` of a run (of a UR² ``stage``)."""
    root = Path(config.checkpoint_dir) / CHECKPOINTS
    return root if stage is None else root / f"stage-{stage}"


def require_summaries(config: Any, retriever_url: str) -> None:
    """UR² with ``summary.summarise`` reads summaries from the retrieval server: refuse one
    that does not summarise (its ``/health`` has no summariser counts)."""
    import httpx

    if not getattr(getattr(config, "summary", None), "summarise", False):
        return
    try:
        health = httpx.get(f"{retriever_url.rstrip('/')}/health", timeout=30).json()
    except (httpx.HTTPError, ValueError) as error:
        raise ValueError(f"UR² summaries: the retrieval server at {retriever_url} did not "
                         f"answer /health ({error})") from None
    if "summaries" not in health:
        raise ValueError(f"UR² summaries: the retrieval server at {retriever_url} serves raw "
                         "documents; start it with `advrag serve-retriever --summarise`, or "
                         "set summary.summarise: false")


def prepare_ur2_stage(config: Any, out_dir: Path, *, stage: int, records: Sequence[QARecord],
                      retrieval: Sequence[bool], search_prompt: Callable[[str], str],
                      model_path: str, retriever_url: str, gpus: int,
                      nodes: int) -> tuple[list[str], Any]:
    """One UR² stage as a verl run under ``out_dir/stage-<n>``: its questions prompted by task
    mixing (``retrieval``), UR²'s reward of the stage (its metric and fallback penalty), its
    updates and its own checkpoint directory; the overrides and the composed config."""
    from advrag.datasets.loaders import load_qa

    require_divisible(config, gpus * nodes)
    require_summaries(config, retriever_url)
    stage_dir = out_dir / f"stage-{stage}"
    reward = ur2_reward(config, stage)
    files = {"train": export_parquet(records, stage_dir / "train.parquet", "train",
                                     retrieval=retrieval, search_prompt=search_prompt,
                                     search_agent=search_agent(config)),
             "dev": export_parquet(load_qa(Path(config.world_dir) / "dev.jsonl"),
                                   stage_dir / "dev.parquet", "dev", search_prompt=search_prompt),
             "agent_loop": agent_loop_file(stage_dir / "agent_loops.yaml", config, retriever_url,
                                           reward)}
    values = override_values(config, model_path, files, gpus=gpus, nodes=nodes, reward=reward)
    values |= {"trainer.total_training_steps": ur2_stage_steps(config)[stage],
               "trainer.default_local_dir": str(stage_root(config, stage)),
               "trainer.experiment_name": f"ur2-stage-{stage}"}
    hydra_overrides = as_overrides(values)
    return hydra_overrides, compose(hydra_overrides)


def as_overrides(values: dict[str, Any]) -> list[str]:
    """``key=value`` in Hydra's override grammar."""
    return [f"{key}={_hydra_value(value)}" for key, value in values.items()]


def override_values(config: Any, model_path: str, files: dict[str, Path], *, gpus: int,
                    nodes: int, reward: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """Hydra overrides of verl's ``ppo_trainer`` carrying ``config`` (module docstring, step
    2) as a mapping, with ``reward`` (verl's reward function and its settings)
    and, with ``exploration``, REX-RAG's loop and trainer (``rex_values``)."""
    optim, lora = config.optim, config.lora
    prompt_tokens = prompt_budget([files["train"], files["dev"]], model_path)
    if prompt_tokens >= optim.max_seq_len:
        raise ValueError(f"the longest exported prompt takes {prompt_tokens} tokens, all of "
                         f"optim.max_seq_len ({optim.max_seq_len}): raise optim.max_seq_len")
    values: dict[str, Any] = {
        "algorithm.adv_estimator": f"advrag_{optim.advantage}",
        "algorithm.use_kl_in_reward": False,
        "actor_rollout_ref.actor.policy_loss.loss_mode": "advrag_ppo",
        "actor_rollout_ref.actor.optim.lr": optim.lr,
        "actor_rollout_ref.actor.clip_ratio_low": optim.clip_low,
        "actor_rollout_ref.actor.clip_ratio_high": optim.clip_high,
        "actor_rollout_ref.actor.clip_ratio_c": optim.dual_clip or 3.0,
        "actor_rollout_ref.actor.loss_agg_mode": optim.loss_agg,
        "actor_rollout_ref.actor.use_kl_loss": optim.kl_coef > 0,
        "actor_rollout_ref.actor.kl_loss_coef": optim.kl_coef,
        "actor_rollout_ref.actor.kl_loss_type": KL_TYPES[optim.kl_kind],
        "actor_rollout_ref.actor.ppo_epochs": optim.ppo_epochs,
        "actor_rollout_ref.actor.ppo_mini_batch_size": config.questions_per_step,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": optim.micro_batch_size,
        # verl's validate_config needs the old (rollout) and reference log-prob passes' sizes
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": optim.micro_batch_size,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": optim.micro_batch_size,
        "actor_rollout_ref.actor.grad_clip": optim.grad_clip,
        "actor_rollout_ref.model.path": model_path,
        "actor_rollout_ref.model.lora_rank": lora.r if lora else 0,
        "actor_rollout_ref.model.lora_alpha": lora.alpha if lora else 16,
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.n": config.group_size,
        "actor_rollout_ref.rollout.temperature": config.temperature,
        "actor_rollout_ref.rollout.multi_turn.enable": True,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(files["agent_loop"]),
        "actor_rollout_ref.rollout.agent.default_agent_loop": search_agent(config),
        # the clipped ratio is taken against recomputed old log-probs, as the local engine
        # does; our agent loops return no rollout log-probs for verl to compare them with
        "actor_rollout_ref.rollout.calculate_log_probs": False,
        "data.train_files": str(files["train"]),
        "data.val_files": str(files["dev"]),
        "data.train_batch_size": config.questions_per_step,
        "data.max_prompt_length": prompt_tokens,
        "data.max_response_length": max(optim.max_seq_len - prompt_tokens, 1),
        "reward.custom_reward_function.path": REWARD_PATH,
        "reward.custom_reward_function.name": reward[0],
        **{f"+reward.custom_reward_function.reward_kwargs.{key}": value
           for key, value in reward[1].items()},
        "trainer.total_training_steps": config.steps,
        "trainer.save_freq": config.checkpoint_every,
        "trainer.default_local_dir": str(stage_root(config)),
        "trainer.project_name": config.experiment,
        "trainer.experiment_name": config.recipe,
        "trainer.logger": "[console,mlflow]",
        "trainer.n_gpus_per_node": gpus,
        "trainer.nnodes": nodes,
    }
    return values | rex_values(config)


def require_divisible(config: Any, gpus: int) -> None:
    """verl splits a step's rollouts evenly over every GPU (its ``validate_config``): refuse,
    before anything is written, a step whose rollouts do not split."""
    rollouts = config.questions_per_step * config.group_size
    if rollouts % gpus:
        raise ValueError(f"verl splits a step's {rollouts} rollouts (questions_per_step "
                         f"{config.questions_per_step} × group_size {config.group_size}) over "
                         f"{gpus} GPUs evenly: make that product a multiple of {gpus}, or run on "
                         "fewer GPUs")


def prompt_budget(parquets: Sequence[Path], model_path: str) -> int:
    """verl's ``data.max_prompt_length``: the longest exported prompt in the model's tokens,
    counted as verl's dataset counts them (its chat template, the generation prompt), so verl
    drops none; the rest of ``max_seq_len`` is the episode's. A model that is not a local
    directory (a hub id, resolved on the GPU machine) gets ``DEFAULT_PROMPT_TOKENS``."""
    if not (Path(model_path) / "tokenizer_config.json").is_file():
        return DEFAULT_PROMPT_TOKENS
    import pandas as pd
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    prompts = [list(p) for path in parquets for p in pd.read_parquet(path)["prompt"]]
    return max(len(tokenizer(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                           tokenize=False),
                             add_special_tokens=False)["input_ids"]) for messages in prompts)


def rex_values(config: Any) -> dict[str, Any]:
    """REX-RAG's trainer (``rex_trainer``: verl's sync trainer with the filter and the
    correction), its settings, and the plugin module that registers it, named in every Ray
    process's environment (none without ``exploration``)."""
    exploration = getattr(config, "exploration", None)
    if exploration is None:
        return {}
    settings = {key: getattr(exploration, key) for key in (
        "pool_size", "keep_ratio", "keep_ratio_weight", "trajectory_filter", "correction")}
    return {"trainer.v1.trainer_mode": REX_TRAINER_MODE,
            **{f"+advrag_rex.{key}": value for key, value in settings.items()},
            f"+ray_kwargs.ray_init.runtime_env.env_vars.{MODULES_ENV}": REX_MODULES}


def _hydra_value(value: Any) -> str:
    """A value as Hydra's override grammar reads it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.startswith("["):
        return value
    if isinstance(value, str):
        return json.dumps(value) if any(c in value for c in " ,:=[]{}'\"") else value
    return str(value)


def compose(hydra_overrides: Sequence[str]):
    """verl's ``ppo_trainer`` config with ``hydra_overrides``: an unknown key or a bad value
    raises ``ValueError`` naming it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import ConfigCompositionException

    try:
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            return hydra_compose(config_name="ppo_trainer", overrides=list(hydra_overrides))
    except ConfigCompositionException as error:
        raise ValueError(f"verl's ppo_trainer config refused the overrides: {error}") from error


def command(hydra_overrides: Sequence[str]) -> list[str]:
    """The launch command (run with ``VERL_USE_EXTERNAL_MODULES=advrag.engines.verl``)."""
    return [sys.executable, "-m", "verl.trainer.main_ppo", *hydra_overrides]


def prepare(config: Any, out_dir: Path, *, model_path: str, retriever_url: str, gpus: int,
            nodes: int) -> tuple[list[str], Any]:
    """Data, agent loop file and composed config under ``out_dir``; the overrides and config."""
    from advrag.datasets.loaders import load_qa

    refuse_unmapped(config)
    require_divisible(config, gpus * nodes)
    if config.recipe == "ur2":
        raise ValueError("UR² runs as two verl runs, one per stage: prepare_ur2_stage")
    agents = {"train": search_agent(config), "dev": AGENT_NAME}
    files = {split: export_parquet(load_qa(Path(config.world_dir) / f"{split}.jsonl"),
                                   out_dir / f"{split}.parquet", split, search_agent=agent)
             for split, agent in agents.items()}
    reward = search_r1_reward(config)
    files["agent_loop"] = agent_loop_file(out_dir / "agent_loops.yaml", config, retriever_url,
                                          reward)
    hydra_overrides = as_overrides(override_values(config, model_path, files, gpus=gpus,
                                                   nodes=nodes, reward=reward))
    return hydra_overrides, compose(hydra_overrides)


def require_gpu() -> None:
    """Refuse before anything starts when torch sees no GPU (verl's trainer needs one)."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("verl's trainer runs on GPUs and torch sees none here: run with "
                           "--dry-run to check the data and config, and launch on a GPU machine")


def launch(hydra_overrides: Sequence[str], run_id: str | None = None) -> int:
    """Run verl's trainer (it needs GPUs: refused here without one); its exit status. With
    ``run_id``, verl's MLflow logger writes its metrics into that run (``MLFLOW_RUN_ID``)."""
    import subprocess

    require_gpu()
    env = os.environ | {MODULES_ENV: plugin_modules(hydra_overrides)}
    if run_id is not None:
        env |= {"MLFLOW_RUN_ID": run_id}
    return subprocess.run(command(hydra_overrides), env=env, check=False).returncode


def shown(hydra_overrides: Sequence[str]) -> str:
    """The launch command as a shell line."""
    return (f"{MODULES_ENV}={plugin_modules(hydra_overrides)} "
            + " ".join(shlex.quote(part) for part in command(hydra_overrides)))


def plugin_modules(hydra_overrides: Sequence[str]) -> str:
    """The modules verl imports at start-up: the plugin, and REX-RAG's trainer for a run
    that selects it."""
    rex = f"trainer.v1.trainer_mode={REX_TRAINER_MODE}" in hydra_overrides
    return REX_MODULES if rex else PLUGIN
