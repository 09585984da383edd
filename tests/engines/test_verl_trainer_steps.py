"""Our rows through verl's V1 trainer steps on a real TransferQueue (a local Ray), with a
stand-in for the actor workers' log-prob pass: a GRPO batch through verl's own sync trainer, and
REX-RAG's filter and correction by hand-worked numbers, on rows in memory (``rewrite``) and in
its trainer between verl's old-log-prob and advantage steps.

The batch: one question, four policy rows (one right) and two probes. Probe A inserted pool
prompt 0 and answered right; probe B inserted prompt 1, which the old policy finds unlikely.
Keep ratio 0.25 of 4 policy rows keeps one probe: A. Then a = 1/5, z = 1 − 1/4 = 0.75, and on
A (fine correction, pool [[5, 6], [5, 7]]: μ on prompt 0's tokens = [1, ½]):
- prefix (j = 2): μ = 0.5 / 0.75^½ = 0.57735, μ_mix = 0.8·0.5 + 0.2·0.57735 = 0.51547;
- prompt: μ_mix = 0.8·0.25 + 0.2·1 = 0.4 and 0.8·0.5 + 0.2·½ = 0.5;
- continuation: μ = π_old, so μ_mix = π_old = 0.4; the masked document token is untouched;
- policy rows: μ = 0, μ_mix = 0.8·0.5 = 0.4.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("transfer_queue", reason="verl's V1 trainer is not installed: `make verl`")

from verl_stand_in import prepare  # noqa: E402

from advrag.core.advantages import ADVANTAGE_ESTIMATORS  # noqa: E402
from advrag.engines.verl.launch import compose  # noqa: E402
from advrag.engines.verl.rex_trainer import (  # noqa: E402
    STATE_FILE,
    RexRagTrainer,
    Rows,
    rewrite,
)
from advrag.engines.verl.runs import REX_TRAINER_MODE  # noqa: E402
from advrag.recipes import recipe_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
POOL_IDS = [[5, 6], [5, 7]]
SETTINGS = SimpleNamespace(keep_ratio=0.3, keep_ratio_weight=0.1, trajectory_filter=True,
                           correction="fine", pool_size=2)
PROBE_MASK = [1, 1, 1, 1, 0, 1]  # prefix ×2 | prompt ×2 | document | continuation
PROBE_A = [0.5, 0.5, 0.25, 0.5, 0.9, 0.4]
PROBE_B = [0.5, 0.5, 0.1, 0.1, 0.9, 0.4]
A_CORRECTED = [0.51547, 0.51547, 0.4, 0.5, 0.9, 0.4]


def rows() -> Rows:
    probes = [{"prompt": 0, "start": 2, "tokens": 2}, {"prompt": 1, "start": 2, "tokens": 2}]
    return Rows(uids=["q"] * 6,
                response_mask=[torch.ones(3, dtype=torch.int64)] * 4
                + [torch.tensor(PROBE_MASK)] * 2,
                old_log_probs=[torch.log(torch.full((3,), 0.5))] * 4
                + [torch.log(torch.tensor(PROBE_A)), torch.log(torch.tensor(PROBE_B))],
                rm_scores=[torch.zeros(3)] * 4 + [torch.zeros(6)] * 2,
                scores=[0.0, 0.0, 1.0, 0.0, 1.0, 0.0],
                correct=[False, False, True, False, True, False],
                probes=[None] * 4 + probes, padding=[False] * 6)


def test_the_filter_keeps_the_likeliest_probe_and_corrects_by_hand():
    result = rewrite(rows(), POOL_IDS, keep_ratio=0.25, settings=SETTINGS)
    assert result.left_out == [5]
    probs = [t.exp().tolist() for t in result.rows.old_log_probs]
    assert probs[0] == pytest.approx([0.4] * 3)
    assert probs[4] == pytest.approx(A_CORRECTED, abs=1e-5)
    assert result.rows.response_mask[5].tolist() == [0] * 6
    assert result.rows.uids[:5] == ["q"] * 5 and result.rows.uids[5] != "q"
    assert [s.tolist() for s in result.rm_scores] == [[0, 0, 0], [0, 0, 0], [0, 0, 1.0],
                                                      [0, 0, 0], [0, 0, 0, 0, 0, 1.0], [0] * 6]
    assert result.metrics == pytest.approx({
        "rex/probes_opened": 2, "rex/probes_kept": 1, "rex/keep_ratio": 0.25,
        "rex/probe_share": 0.2, "rex/policy_accuracy": 0.25, "rex/probe_accuracy": 0.5,
        "rex/ratio_policy": 1.25, "rex/ratio_prefix": 0.5 / 0.51547,
        "rex/ratio_prompt": (0.25 / 0.4 + 1.0) / 2, "rex/ratio_continuation": 1.0}, rel=1e-4)
    assert result.keep_ratio == pytest.approx(0.9 * 0.25 + 0.1 * 0.5)  # below 0.3: kept


@pytest.mark.parametrize("change", ["no filter", "no correction", "prompt cut", "ratio cap"])
def test_each_setting_changes_only_its_part(change):
    settings = SimpleNamespace(**vars(SETTINGS))
    batch = rows()
    if change == "no filter":
        settings.trajectory_filter = False
    if change == "no correction":
        settings.correction = "none"
    if change == "prompt cut":  # A's prompt lost a token to the budget: only B can be ranked
        batch.probes[4] = {"prompt": 0, "start": 2, "tokens": 1}
    if change == "ratio cap":
        settings.keep_ratio = 0.25
    result = rewrite(batch, POOL_IDS, keep_ratio=0.25, settings=settings)
    untouched = rows().old_log_probs
    if change == "no filter":  # both kept: a = 2/6, nothing left out
        assert result.left_out == [] and result.metrics["rex/probe_share"] == pytest.approx(1 / 3)
        assert result.rows.old_log_probs[0].exp().tolist() == pytest.approx([2 / 3 * 0.5] * 3)
    elif change == "no correction":
        assert result.left_out == [5] and "rex/ratio_policy" not in result.metrics
        assert all(torch.equal(a, b) for a, b in zip(result.rows.old_log_probs, untouched))
    elif change == "prompt cut":
        assert result.left_out == [4]
    else:
        assert result.keep_ratio == 0.25  # the configured ratio is the most ever kept


def test_a_row_another_loop_answered_keeps_verls_reward_and_counts_in_the_share():
    """A UR² direct item (the direct loop, never probed) beside the REX-RAG rows: it keeps
    the reward verl gave it and stays out of z (still 0.75), but is one of the rows the kept
    probe shares the batch with: a = 1/6, so its μ_mix = (5/6)·0.5."""
    batch = rows()
    batch.uids.append("q")
    batch.response_mask.append(torch.ones(3, dtype=torch.int64))
    batch.old_log_probs.append(torch.log(torch.full((3,), 0.5)))
    batch.rm_scores.append(torch.tensor([0.0, 0.0, 0.7]))
    for field, value in (("scores", None), ("correct", None), ("probes", None),
                         ("padding", False)):
        getattr(batch, field).append(value)
    result = rewrite(batch, POOL_IDS, keep_ratio=0.25, settings=SETTINGS)
    assert result.left_out == [5] and result.metrics["rex/policy_accuracy"] == 0.25
    assert result.metrics["rex/probe_share"] == pytest.approx(1 / 6)
    assert result.rm_scores[6].tolist() == pytest.approx([0.0, 0.0, 0.7])
    assert result.rows.old_log_probs[6].exp().tolist() == pytest.approx([5 / 12] * 3)


def test_a_batch_without_policy_rows_is_refused():
    batch = rows()
    batch.padding = [True] * 4 + [False] * 2
    with pytest.raises(ValueError, match="without policy rows.*RexSearchAgentLoop"):
        rewrite(batch, POOL_IDS, keep_ratio=0.25, settings=SETTINGS)


@pytest.fixture(scope="module")
def transfer_queue():
    """A local Ray with verl's TransferQueue (controller and storage units as Ray actors)."""
    import ray
    import transfer_queue as tq

    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    tq.init()
    yield tq
    tq.close()
    ray.shutdown()


class StandInActor:
    """verl's actor workers' ``compute_log_prob``: log-probs and entropy over each row's whole
    sequence, written into TransferQueue as the workers write them (position t scores token
    t + 1, so a response's log-probs start one before it)."""

    def __init__(self, tq, response_probs: dict[str, list[float]], prompt_len: int):
        self.tq, self.response_probs, self.prompt_len = tq, response_probs, prompt_len

    def compute_log_prob(self, batch):
        from tensordict import TensorDict

        log_probs = [torch.tensor([0.0] * (self.prompt_len - 1)
                                  + [math.log(p) for p in self.response_probs[key]] + [0.0])
                     for key in batch.keys]
        nested = torch.nested.as_nested_tensor(log_probs, layout=torch.jagged)
        self.tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                             fields=TensorDict({"log_probs": nested, "entropy": nested},
                                               batch_size=len(batch.keys)))
        return batch


def put_rows(tq, keys):
    """The rows as verl's agent loop workers put them (verl copied the probe's score, the
    session's last output, onto the policy row before it: the rewrite must undo that)."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    batch, fields = rows(), []
    session_last_score = {"0": 0.0, "1": 0.0, "2": 1.0, "3": 1.0}  # session 3: A is last
    for i, key in enumerate(keys):
        n = len(batch.response_mask[i])
        rm = torch.zeros(n)
        rm[-1] = session_last_score[key.split("_")[1]]
        fields.append({"uid": "q", "prompts": torch.tensor([1, 2, 3]),
                       "responses": torch.arange(n) + 10, "response_mask": batch.response_mask[i],
                       "rm_scores": rm,
                       "extra_fields": {"advrag_score": batch.scores[i],
                                        "advrag_correct": batch.correct[i],
                                        "rex_probe": batch.probes[i]}})
    return tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(
        fields), tags=[{"status": "success"} for _ in keys])


def test_the_trainer_rewrites_verls_batch_and_verls_advantages_follow(transfer_queue, tmp_path,
                                                                      small_world_dir):
    """verl's own old-log-prob step, then ours on its TransferQueue; verl's advantage step
    with ``advrag_grpo`` then groups A with the policy rows and gives B nothing."""
    import advrag.engines.verl  # noqa: F401  (the plugin: advrag_grpo in verl's registry)

    tq = transfer_queue
    keys = ["q_0_0", "q_1_0", "q_2_0", "q_3_0", "q_3_1", "q_1_1"]  # A: session 3's probe
    batch = put_rows(tq, keys)
    batch.tags[:] = [{"status": "success"} for _ in keys]
    rex = recipe_for(ROOT / "configs" / "rex-rag.yaml", {
        "world_dir": str(small_world_dir),
        "exploration": {"kind": "rex", "pool_size": 2, "keep_ratio": 0.3}}).config
    _, config = prepare(rex, tmp_path, model_path="m", retriever_url="http://127.0.0.1:8000",
                        gpus=1, nodes=1)  # as advrag rl --engine verl composes it
    trainer = RexRagTrainer(config)
    trainer.keep_ratio, trainer.pool_ids = 0.25, POOL_IDS
    source = rows()
    trainer.actor_rollout_wg = StandInActor(tq, {
        key: source.old_log_probs[i].exp().tolist() for i, key in enumerate(keys)}, 3)
    metrics: dict = {}
    batch = trainer._compute_old_log_prob(batch, metrics)
    assert metrics["rex/probes_kept"] == 1 and trainer.keep_ratio == pytest.approx(0.275)
    assert batch.tags[5].get("is_padding") and not batch.tags[4].get("is_padding")
    data = tq.kv_batch_get(keys=keys, partition_id="train",
                           select_fields=["old_log_probs", "rm_scores", "response_mask"])
    assert data["old_log_probs"].unbind()[4].exp().tolist() == pytest.approx(A_CORRECTED,
                                                                              abs=1e-5)
    assert [float(r.sum()) for r in data["rm_scores"].unbind()] == [0, 0, 1, 0, 1, 0]

    batch = trainer._compute_advantage(batch, metrics)
    advantages = tq.kv_batch_get(keys=keys, partition_id="train",
                                 select_fields=["advantages"])["advantages"].unbind()
    scores = torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0])  # the group: four policy rows and A
    expected = ADVANTAGE_ESTIMATORS["grpo"](scores, ["q"] * 5, torch.ones(5, 1))
    for row in range(5):
        mask = rows().response_mask[row].bool()
        assert advantages[row][mask].tolist() == pytest.approx(
            [float(expected[row].flatten()[0])] * int(mask.sum()))
    assert advantages[5].abs().sum() == 0  # B: left out


def test_a_batch_probes_made_larger_is_one_optimizer_step(small_world_dir, tmp_path):
    """Two questions × 4 rollouts and 3 probes, padded by verl to 16 rows: verl's mini-batch
    (2 questions × 4 = 8 rows) would take two steps; the trainer sends all 16 as one."""
    rex = recipe_for(ROOT / "configs" / "rex-rag.yaml", {"world_dir": str(small_world_dir)}).config
    _, config = prepare(rex, tmp_path, model_path="m", retriever_url="http://127.0.0.1:8000",
                        gpus=1, nodes=1)
    trainer = RexRagTrainer(config)
    sent = {}

    class Actor:
        def update_actor(self, batch):
            sent.update(batch.extra_info)
            return {"metrics": {"mfu": [0.0], "pg_loss": [0.5]}}

    trainer.actor_rollout_wg = Actor()
    batch = SimpleNamespace(keys=[f"k{i}" for i in range(16)], extra_info={})
    metrics: dict = {}
    trainer._update_actor(batch, metrics)
    assert sent["mini_batch_size"] == sent["global_batch_size"] == 16
    assert metrics["actor/pg_loss"] == 0.5
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size == 2  # restored


def test_the_keep_ratio_is_saved_with_a_checkpoint_and_resumed(tmp_path, monkeypatch):
    from verl.trainer.ppo.v1 import PPOTrainerSync

    config = compose([f"trainer.v1.trainer_mode={REX_TRAINER_MODE}", "+advrag_rex.keep_ratio=0.12",
                      f"trainer.default_local_dir={tmp_path}"])
    monkeypatch.setattr(PPOTrainerSync, "_save_checkpoint", lambda self: (
        tmp_path / f"global_step_{self.global_steps}").mkdir())
    monkeypatch.setattr(PPOTrainerSync, "_load_checkpoint",
                        lambda self: setattr(self, "global_steps", 4))
    saved = RexRagTrainer(config)
    saved.global_steps, saved.keep_ratio = 4, 0.0731
    saved._save_checkpoint()
    assert (tmp_path / "global_step_4" / STATE_FILE).exists()
    resumed = RexRagTrainer(config)
    resumed._load_checkpoint()
    assert resumed.keep_ratio == 0.0731


def test_a_grpo_batch_passes_verls_own_steps(transfer_queue, tmp_path, small_world_dir):
    """configs/train.yaml as the launcher composes it, on verl's own sync trainer: our plain
    agent loop's rows (verl's reward in rm_scores, no rollout log-probs) go through verl's
    old-log-prob and advantage steps, and the advantages are advrag_grpo's."""
    from verl.trainer.ppo.v1 import PPOTrainerSync
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    import advrag.engines.verl  # noqa: F401  (the plugin: advrag_grpo in verl's registry)

    tq = transfer_queue
    grpo = recipe_for(ROOT / "configs" / "train.yaml", {"world_dir": str(small_world_dir)}).config
    _, config = prepare(grpo, tmp_path, model_path="m", retriever_url="http://127.0.0.1:8000",
                        gpus=1, nodes=1)
    keys, scores = [f"g_{session}_0" for session in range(4)], [0.0, 0.5, 1.0, 0.5]
    fields = []
    for score in scores:
        rm = torch.zeros(3)
        rm[-1] = score
        fields.append({"uid": "g", "prompts": torch.tensor([1, 2, 3]),
                       "responses": torch.tensor([10, 11, 12]),
                       "response_mask": torch.tensor([1, 0, 1]), "rm_scores": rm,
                       "extra_fields": {"searches": 1}})
    batch = tq.kv_batch_put(keys=keys, partition_id="train",
                            fields=list_of_dict_to_tensordict(fields),
                            tags=[{"status": "success"} for _ in keys])
    trainer = PPOTrainerSync(config)
    trainer.actor_rollout_wg = StandInActor(tq, {key: [0.5, 0.5, 0.5] for key in keys}, 3)
    metrics: dict = {}
    batch = trainer._compute_advantage(trainer._compute_old_log_prob(batch, metrics), metrics)
    data = tq.kv_batch_get(keys=keys, partition_id="train",
                           select_fields=["old_log_probs", "advantages"])
    assert [t.exp().tolist() for t in data["old_log_probs"].unbind()] == \
        [pytest.approx([0.5] * 3)] * 4
    expected = ADVANTAGE_ESTIMATORS["grpo"](torch.tensor(scores), ["g"] * 4, torch.ones(4, 1))
    for row, advantages in enumerate(data["advantages"].unbind()):
        assert advantages.tolist() == pytest.approx([float(expected[row].flatten()[0]), 0.0,
                                                     float(expected[row].flatten()[0])])


def test_verls_trainer_loads_the_exported_questions(tmp_path, small_world_dir, tiny_policy_dir):
    """verl's V1 trainer builds its tokenizer and dataloaders from the composed config: every
    training question survives its prompt-length filter, and a batch's rows name REX-RAG's
    loop and carry their golden answers."""
    from advrag.datasets.loaders import load_qa

    rex = recipe_for(ROOT / "configs" / "rex-rag.yaml", {"world_dir": str(small_world_dir)}).config
    _, config = prepare(rex, tmp_path, model_path=str(tiny_policy_dir),
                        retriever_url="http://127.0.0.1:8000", gpus=1, nodes=1)
    trainer = RexRagTrainer(config)
    trainer._init_tokenizer()
    trainer._init_dataloader()
    train = load_qa(small_world_dir / "train.jsonl")
    assert len(trainer.train_dataloader.dataset) == len(train)
    assert trainer.total_training_steps == rex.steps
    trainer.global_steps = 1
    batch = trainer._next_train_batch()
    assert list(batch["agent_name"]) == ["advrag_rex_rag"] * rex.questions_per_step
    golds = {tuple(r.golden_answers) for r in train}
    assert all(tuple(row["ground_truth"]["target"]) in golds for row in batch["reward_model"])
