"""REX-RAG's trajectory filter and policy correction inside verl's V1 trainer.

Selected with ``trainer.v1.trainer_mode=advrag_rex_rag`` and loaded with
``VERL_USE_EXTERNAL_MODULES=advrag.engines.verl,advrag.engines.verl.rex_trainer``
(``launch`` sets both for a run whose recipe brings this trainer: ``recipes.rex_rag.verl``);
its settings are the config's ``advrag_rex`` section, read whole as ``runs.RexTrainerSettings``
(``pool_size``, ``keep_ratio``, ``keep_ratio_weight``, ``trajectory_filter``, ``correction``).

The agent loop (``agent_loop.RexSearchAgentLoop``) returns each training episode and, when
one opened, its probe as rows of the prompt's group, each with its own score, whether it
earned full marks and, on a probe, where its inserted prompt lies. Once verl has the batch's
old log-probs, ``RexRagTrainer`` rewrites the batch in verl's TransferQueue (``rewrite``), as
the local update does (``recipes.rex_rag.step``):

1. every row the loop scored gets its own reward (verl copies a session's last score onto its
   other outputs); a row another loop answered (UR²'s direct items) keeps verl's;
2. the trajectory filter keeps the ``probes_to_keep(keep_ratio, policy rows)`` probes whose
   inserted prompt has the highest mean old log-prob (all of them with
   ``trajectory_filter: false``); a probe whose prompt the response budget cut is not ranked.
   A probe left out becomes a no-op row, as verl's own padding rows are: mask 0, reward 0, a
   group of its own, tagged ``is_padding``;
3. with ``correction`` ``fine`` or ``coarse``, the kept rows' old log-probs become the
   mixture behaviour's (``core.rex_rag.corrected_log_probs``; ``a`` = the kept probes' share
   of the rows, ``z`` = 1 − the accuracy of the policy rows the loop scored, the rows that
   could be probed), so ``advrag_ppo``'s clipped ratio is
   REX-RAG's corrected one;
4. the keep ratio moves towards this step's probe accuracy, never above the configured one,
   and is saved with each checkpoint; the step's ``rex/*`` metrics join verl's;
5. the actor update takes the whole batch as one mini-batch (one optimizer step, as locally).

Everything else is verl's synchronous trainer (``PPOTrainerSync``).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import transfer_queue as tq
from tensordict import NonTensorStack, TensorDict
from torch import Tensor
from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer

from advrag.agents.probes import pool_token_ids
from advrag.agents.prompts import exploration_pool
from advrag.core.rex_rag import (
    corrected_log_probs,
    probe_ranking,
    probes_to_keep,
    updated_keep_ratio,
)
from advrag.engines.verl.runs import REX_SECTION, REX_TRAINER_MODE, RexTrainerSettings

STATE_FILE = "advrag_rex.json"
"""The keep ratio a run had reached, beside each verl checkpoint step."""
READ = ["uid", "response_mask", "old_log_probs", "rm_scores", "extra_fields"]


@dataclass
class Rows:
    """What the rewrite reads of a batch, one entry per row (``response_mask``,
    ``old_log_probs`` and verl's ``rm_scores`` over each row's response tokens); ``scores`` and
    ``correct`` are None on a row REX-RAG's loop did not score."""

    uids: list[str]
    response_mask: list[Tensor]
    old_log_probs: list[Tensor]
    rm_scores: list[Tensor]
    scores: list[float | None]
    correct: list[bool | None]
    probes: list[dict | None]
    padding: list[bool]


@dataclass
class Rewritten:
    """The rows after the rewrite, which rows were left out, the metrics and the next keep
    ratio."""

    rows: Rows
    rm_scores: list[Tensor]
    left_out: list[int]
    metrics: dict[str, float]
    keep_ratio: float


def rewrite(rows: Rows, pool_ids: Sequence[Sequence[int]], *, keep_ratio: float,
            settings: RexTrainerSettings) -> Rewritten:
    """Steps 1–4 of the module docstring on ``rows``."""
    policy = [i for i, p in enumerate(rows.probes) if p is None and not rows.padding[i]]
    probes = [i for i, p in enumerate(rows.probes) if p is not None and not rows.padding[i]]
    if not policy:
        raise ValueError("a REX-RAG batch without policy rows: is the agent loop "
                         f"{REX_TRAINER_MODE!r}'s (agent_loop.RexSearchAgentLoop)?")
    kept = kept_probes(rows, probes, pool_ids, wanted=(
        probes_to_keep(keep_ratio, 1, len(policy)) if settings.trajectory_filter else None))
    left_out = sorted(set(probes) - set(kept))
    share = len(kept) / (len(policy) + len(kept))
    scored = [i for i in policy if rows.correct[i] is not None]
    failure_rate = 1.0 - sum(rows.correct[i] for i in scored) / len(scored) if scored else 1.0
    ratios: dict[str, float] = {}
    if kept and settings.correction != "none":
        ratios = correct_rows(rows, policy + kept, pool_ids, probe_share=share,
                              failure_rate=failure_rate, correction=settings.correction)
    for i in left_out:
        rows.response_mask[i] = torch.zeros_like(rows.response_mask[i])
        rows.uids[i] = f"rex-left-out-{uuid.uuid4().hex}"
    rm_scores = [own_reward(rows, i, left_out) for i in range(len(rows.uids))]
    probe_accuracy = sum(rows.correct[i] for i in probes) / len(probes) if probes else 0.0
    metrics = {"rex/probes_opened": float(len(probes)), "rex/probes_kept": float(len(kept)),
               "rex/keep_ratio": keep_ratio, "rex/probe_share": share,
               "rex/policy_accuracy": 1.0 - failure_rate, "rex/probe_accuracy": probe_accuracy}
    metrics |= {f"rex/ratio_{role}": value for role, value in ratios.items()}
    if probes:
        keep_ratio = updated_keep_ratio(keep_ratio, probe_accuracy, settings.keep_ratio_weight,
                                        cap=settings.keep_ratio)
    return Rewritten(rows, rm_scores, left_out, metrics, keep_ratio)


def kept_probes(rows: Rows, probes: Sequence[int], pool_ids: Sequence[Sequence[int]], *,
                wanted: int | None) -> list[int]:
    """The probes the update keeps: all (``wanted`` None), or the ``wanted`` whose whole
    inserted prompt is likeliest under the old policy (``core.rex_rag.probe_ranking``)."""
    if wanted is None:
        return list(probes)
    whole = [i for i in probes
             if rows.probes[i]["tokens"] == len(pool_ids[rows.probes[i]["prompt"]])]
    ranked = probe_ranking([prompt_slice(rows, i) for i in whole])
    return sorted(whole[j] for j in ranked[:wanted])


def prompt_slice(rows: Rows, row: int) -> Tensor:
    """The old log-probs of probe ``row``'s inserted prompt tokens."""
    probe = rows.probes[row]
    return rows.old_log_probs[row][probe["start"]:probe["start"] + probe["tokens"]]


def correct_rows(rows: Rows, kept: Sequence[int], pool_ids: Sequence[Sequence[int]], *,
                 probe_share: float, failure_rate: float, correction: str) -> dict[str, float]:
    """Replace the ``kept`` rows' old log-probs on their mask by the mixture's; the mean ratio
    π_old/μ_mix per role."""
    width = max(len(rows.old_log_probs[i]) for i in kept)
    old = torch.zeros(len(kept), width)
    mask = torch.zeros(len(kept), width, dtype=torch.bool)
    prompt = torch.zeros(len(kept), width, dtype=torch.bool)
    probe_row = torch.zeros(len(kept), 1, dtype=torch.bool)
    for r, i in enumerate(kept):
        n = len(rows.old_log_probs[i])
        old[r, :n] = rows.old_log_probs[i].float()
        mask[r, :n] = rows.response_mask[i].bool()
        if rows.probes[i] is not None:
            start, tokens = rows.probes[i]["start"], rows.probes[i]["tokens"]
            prompt[r, start:start + tokens] = True
            probe_row[r] = True
    position = torch.arange(width)[None, :]
    first_after = torch.tensor([rows.probes[i]["start"] + rows.probes[i]["tokens"]
                                if rows.probes[i] else 0 for i in kept])[:, None]
    learned = mask & ~prompt
    roles = {"policy": learned & ~probe_row,
             "prefix": learned & probe_row & (position < first_after),
             "prompt": prompt,
             "continuation": learned & probe_row & (position >= first_after)}
    prompts = [None if rows.probes[i] is None else rows.probes[i]["prompt"] for i in kept]
    behaviour, ratios = corrected_log_probs(old, roles, prompts, pool_ids,
                                            probe_share=probe_share, failure_rate=failure_rate,
                                            correction=correction)
    for r, i in enumerate(kept):
        n = len(rows.old_log_probs[i])
        corrected = torch.where(mask[r, :n], behaviour[r, :n], old[r, :n])
        rows.old_log_probs[i] = corrected.to(rows.old_log_probs[i].dtype)
    return ratios


def own_reward(rows: Rows, row: int, left_out: Sequence[int]) -> Tensor:
    """verl's ``rm_scores`` of ``row``: its own score on its last response token (0 when left
    out); a row the loop did not score, and a padding row, keep verl's."""
    if rows.scores[row] is None or rows.padding[row]:
        return rows.rm_scores[row]
    scores = torch.zeros(len(rows.response_mask[row]), dtype=torch.float32)
    if len(scores) and row not in left_out:
        scores[-1] = rows.scores[row]
    return scores


def read_rows(data: TensorDict, tags: Sequence[dict]) -> Rows:
    """``Rows`` from the TransferQueue fields ``READ`` and the batch's tags."""
    extra = [dict(e or {}) for e in data["extra_fields"]]
    padding = [bool(tag.get("is_padding", False)) for tag in tags]
    return Rows(uids=[str(u) for u in data["uid"]],
                response_mask=list(data["response_mask"].unbind()),
                old_log_probs=list(data["old_log_probs"].unbind()),
                rm_scores=list(data["rm_scores"].unbind()),
                scores=[None if "advrag_score" not in e else float(e["advrag_score"])
                        for e in extra],
                correct=[None if "advrag_correct" not in e else bool(e["advrag_correct"])
                         for e in extra],
                probes=[e.get("rex_probe") for e in extra], padding=padding)


def rewrite_batch(batch: Any, pool_ids: Sequence[Sequence[int]], *, keep_ratio: float,
                  settings: RexTrainerSettings) -> Rewritten:
    """``rewrite`` on a batch held in verl's TransferQueue (a ``KVBatchMeta``): read, rewrite,
    write back the old log-probs, masks, rewards and groups; left-out rows tagged padding."""
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=READ)
    result = rewrite(read_rows(data, batch.tags), pool_ids, keep_ratio=keep_ratio,
                     settings=settings)
    for i in result.left_out:
        batch.tags[i]["is_padding"] = True
    mask = _nested(result.rows.response_mask)
    fields = TensorDict({"old_log_probs": _nested(result.rows.old_log_probs),
                         "response_mask": mask, "loss_mask": mask,
                         "rm_scores": _nested(result.rm_scores),
                         "uid": NonTensorStack(*result.rows.uids)}, batch_size=len(batch.keys))
    tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields,
                    tags=batch.tags)
    return result


def _nested(tensors: Sequence[Tensor]) -> Tensor:
    """Per-row tensors as verl stores them (a jagged nested tensor)."""
    return torch.nested.as_nested_tensor(list(tensors), layout=torch.jagged)


@register_trainer(REX_TRAINER_MODE)
class RexRagTrainer(PPOTrainerSync):
    """verl's synchronous trainer with REX-RAG's rewrite after the old log-probs (module
    docstring)."""

    def _build_replay_buffer(self):
        """verl's sync replay buffer: every choice verl makes by trainer mode is the sync one."""
        self.trainer_mode = "sync"
        return super()._build_replay_buffer()

    def _compute_old_log_prob(self, batch: Any, metrics: dict) -> Any:
        """verl's old log-probs, then the filter and the correction (``rewrite_batch``)."""
        batch = super()._compute_old_log_prob(batch, metrics)
        settings = RexTrainerSettings.read(self.config[REX_SECTION])
        if not hasattr(self, "keep_ratio"):
            self.keep_ratio = float(settings.keep_ratio)
        if not hasattr(self, "pool_ids"):
            self.pool_ids = pool_token_ids(exploration_pool(settings.pool_size), self.tokenizer)
        result = rewrite_batch(batch, self.pool_ids, keep_ratio=self.keep_ratio,
                               settings=settings)
        self.keep_ratio = result.keep_ratio
        metrics.update(result.metrics)
        return batch

    def _update_actor(self, batch: Any, metrics: dict) -> Any:
        """verl's actor update in one mini-batch over the whole batch, probes included, as the
        local update takes it: verl counts a mini-batch in prompts × ``rollout.n`` rows, so a
        batch that probes made larger would otherwise take several optimizer steps."""
        actor = self.config.actor_rollout_ref.actor
        configured = actor.ppo_mini_batch_size
        actor.ppo_mini_batch_size = len(batch.keys) // self.config.actor_rollout_ref.rollout.n
        try:
            return super()._update_actor(batch, metrics)
        finally:
            actor.ppo_mini_batch_size = configured

    def _save_checkpoint(self):
        """verl's checkpoint, and the keep ratio beside it."""
        super()._save_checkpoint()
        step = os.path.join(self.config.trainer.default_local_dir,
                            f"global_step_{self.global_steps}")
        if hasattr(self, "keep_ratio"):
            with open(os.path.join(step, STATE_FILE), "w") as out:
                json.dump({"keep_ratio": self.keep_ratio}, out)

    def _load_checkpoint(self):
        """verl's resume, and the keep ratio the resumed step had reached."""
        super()._load_checkpoint()
        if self.global_steps == 0:
            return
        trainer = self.config.trainer
        step = (trainer.resume_from_path if trainer.resume_mode == "resume_path" else
                os.path.join(trainer.default_local_dir, f"global_step_{self.global_steps}"))
        path = os.path.join(step, STATE_FILE)
        if os.path.exists(path):
            with open(path) as state:
                self.keep_ratio = float(json.load(state)["keep_ratio"])
