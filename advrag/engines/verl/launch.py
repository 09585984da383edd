"""``advrag rl --engine verl``: a recipe's verl runs (``Recipe.verl_runs``, ``runs.VerlRun``) as
runs of verl's ``main_ppo`` on Ray.

Three steps, each checkable on a CPU:

1. **Data** (``export_parquet``): the training and dev questions in verl's RLHF parquet
   schema — ``data_source``, ``prompt`` (the chat messages: the recipe's search prompt),
   ``ability``, ``reward_model: {style: rule, ground_truth: {target: golden answers}}``,
   ``extra_info`` (our id, the split) and ``agent_name`` (``advrag_search_r1``).
2. **Config** (``override_values``, ``compose``): our config's values as Hydra overrides of verl's
   ``ppo_trainer`` — the plugin's estimator and loss, the learning rate, clip and KL settings,
   LoRA, the group size, the batch, the turn and token budgets, the reward function, the agent
   loop (a file written beside the data, naming the retrieval server), the steps and
   checkpoints, and a trainer the run brings (its mode and typed section) — composed against verl's own config files, so a key verl does not have
   fails here, naming it.
3. **Launch**: ``python -m verl.trainer.main_ppo <overrides>`` with the plugin named in
   ``VERL_USE_EXTERNAL_MODULES``; ``--dry-run`` prints the command and the composed config.
4. **Back** (the flow ``rl-verl``, ``advrag.flows.verl``): verl's metrics go to the run's
   MLflow run, and its newest checkpoint is merged, registered and benchmarked.

What a run holds comes from its recipe: GRPO is one run; UR² two, one per stage
(``recipes.ur2.verl``); REX-RAG's exploration brings its agent loop and its trainer
(``recipes.rex_rag.verl``). What does not map: the local engine's SFT warm-up (verl starts from
``model``, so point it at a warmed-up model); a recipe without verl runs (ARR and GAR, two
policies a step) is refused by ``Recipe.refuse_verl``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from advrag.agents.prompts import direct_reasoning_prompt, search_r1_prompt
from advrag.datasets.records import QARecord
from advrag.engines.verl.runs import PLUGIN, AgentLoop, TrainerMode, VerlRun

AGENT_NAME = "advrag_search_r1"
DIRECT_AGENT_NAME = "advrag_direct"
"""verl's ``agent_name`` of a row that searches and of one answered directly (UR²'s task
mixing; ``agent_loop.DirectAnswerAgentLoop``); a run may bring another for the rows that
search (``VerlRun.search_loop``: REX-RAG's, which probes)."""
CHECKPOINTS = "verl"
EXPORTS = "verl-export"
"""verl's ``trainer.default_local_dir`` and the merged models, under ``checkpoint_dir``."""
REWARD_PATH = "pkg://advrag.engines.verl.rewards"
DEFAULT_PROMPT_TOKENS = 512
"""The prompt budget when the model's tokenizer is not at hand (``prompt_budget``)."""
MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"
MODULES_OVERRIDE = f"+ray_kwargs.ray_init.runtime_env.env_vars.{MODULES_ENV}"
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
                    search_loop: AgentLoop | None = None) -> Path:
    """The agent loop config verl reads (``rollout.agent.agent_loop_config_path``): Search-R1's
    and the direct answer's, and the run's own ``search_loop`` if it brings one."""
    search = {"retriever_url": retriever_url, "max_turns": config.max_turns,
              "topk": config.topk}
    entries = [{"name": AGENT_NAME, "_target_": f"{PLUGIN}.agent_loop.SearchR1AgentLoop",
                **search},
               {"name": DIRECT_AGENT_NAME,
                "_target_": f"{PLUGIN}.agent_loop.DirectAnswerAgentLoop"}]
    if search_loop is not None:
        entries.append({"name": search_loop.name, "_target_": search_loop.target, **search,
                        **search_loop.settings})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=2) + "\n")  # JSON is YAML: OmegaConf reads it
    return path


def run_root(config: Any, run: VerlRun) -> Path:
    """verl's ``default_local_dir`` of ``run``: ``checkpoint_dir/verl[/<part>]``."""
    return run.under(Path(config.checkpoint_dir) / CHECKPOINTS)


def export_root(config: Any, run: VerlRun) -> Path:
    """Where ``run``'s newest checkpoint is merged: ``checkpoint_dir/verl-export[/<part>]``."""
    return run.under(Path(config.checkpoint_dir) / EXPORTS)


def as_overrides(values: dict[str, Any]) -> list[str]:
    """``key=value`` in Hydra's override grammar."""
    return [f"{key}={_hydra_value(value)}" for key, value in values.items()]


def override_values(config: Any, run: VerlRun, model_path: str, files: dict[str, Path], *,
                    gpus: int, nodes: int) -> dict[str, Any]:
    """Hydra overrides of verl's ``ppo_trainer`` carrying ``config`` and ``run`` (module
    docstring, step 2) as a mapping: its reward function and settings, its steps and
    checkpoints, and the agent loop and trainer it brings (``trainer_values``)."""
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
        "actor_rollout_ref.rollout.agent.default_agent_loop": search_agent(run),
        # the clipped ratio is taken against recomputed old log-probs, as the local engine
        # does; our agent loops return no rollout log-probs for verl to compare them with
        "actor_rollout_ref.rollout.calculate_log_probs": False,
        "data.train_files": str(files["train"]),
        "data.val_files": str(files["dev"]),
        "data.train_batch_size": config.questions_per_step,
        "data.max_prompt_length": prompt_tokens,
        "data.max_response_length": max(optim.max_seq_len - prompt_tokens, 1),
        "reward.custom_reward_function.path": REWARD_PATH,
        "reward.custom_reward_function.name": run.reward[0],
        **{f"+reward.custom_reward_function.reward_kwargs.{key}": value
           for key, value in run.reward[1].items()},
        "trainer.total_training_steps": run.steps,
        "trainer.save_freq": config.checkpoint_every,
        "trainer.default_local_dir": str(run_root(config, run)),
        "trainer.project_name": config.experiment,
        "trainer.experiment_name": run.experiment,
        "trainer.logger": "[console,mlflow]",
        "trainer.n_gpus_per_node": gpus,
        "trainer.nnodes": nodes,
    }
    return values | trainer_values(run.trainer)


def search_agent(run: VerlRun) -> str:
    """The agent loop of the rows that search: the run's own, else Search-R1's."""
    return AGENT_NAME if run.search_loop is None else run.search_loop.name


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


def trainer_values(trainer: TrainerMode | None) -> dict[str, Any]:
    """A trainer the run brings: its mode, its settings as the config section it reads, and
    the modules that register it, named in every Ray process's environment (none: verl's)."""
    if trainer is None:
        return {}
    return {"trainer.v1.trainer_mode": trainer.mode,
            f"+{trainer.section}": dataclasses.asdict(trainer.settings),
            MODULES_OVERRIDE: ",".join(trainer.modules)}


def _hydra_value(value: Any) -> str:
    """A value as Hydra's override grammar reads it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{_hydra_value(item)}" for key, item in value.items()) + "}"
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


def prepare(config: Any, run: VerlRun, out_dir: Path, *, model_path: str, retriever_url: str,
            gpus: int, nodes: int) -> tuple[list[str], Any]:
    """``run``'s data, agent loop file and composed config under ``out_dir[/<part>]``: its
    training questions (the world's training split when it names none) prompted as it says,
    the world's dev questions under its search prompt; the overrides and the composed config."""
    from advrag.datasets.loaders import load_qa

    require_divisible(config, gpus * nodes)
    if run.check_server is not None:
        run.check_server(retriever_url)
    run_dir = run.under(out_dir)
    world = Path(config.world_dir)
    records = load_qa(world / "train.jsonl") if run.records is None else run.records
    files = {"train": export_parquet(records, run_dir / "train.parquet", "train",
                                     retrieval=run.retrieval, search_prompt=run.search_prompt,
                                     search_agent=search_agent(run)),
             "dev": export_parquet(load_qa(world / "dev.jsonl"), run_dir / "dev.parquet", "dev",
                                   search_prompt=run.search_prompt),
             "agent_loop": agent_loop_file(run_dir / "agent_loops.yaml", config, retriever_url,
                                           run.search_loop)}
    hydra_overrides = as_overrides(override_values(config, run, model_path, files, gpus=gpus,
                                                   nodes=nodes))
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
    """The modules verl imports at start-up: the plugin, or those a run's trainer names
    (``trainer_values``)."""
    named = [o.split("=", 1)[1] for o in hydra_overrides if o.startswith(f"{MODULES_OVERRIDE}=")]
    if not named:
        return PLUGIN
    return json.loads(named[-1]) if named[-1].startswith('"') else named[-1]
