"""The SFT warm-up on a tiny random model: targets, micro-batch equivalence, learning, order."""

from __future__ import annotations

import pytest
import torch

from advrag.agents.types import Trajectory
from advrag.common import console
from advrag.engines.local.policy import TrainablePolicy
from advrag.engines.local.sft import (
    EarlyStopping,
    SFTConfig,
    batches_of,
    early_stopped_finetune,
    nll_loss,
    sft_step,
    supervised_finetune,
)
from advrag.engines.local.tokenize import encode_trajectories
from advrag.models.loading import load_policy


def _demos() -> list[Trajectory]:
    demos = []
    for name, answer in [("Ada", "Tarn"), ("Bo", "Ost"), ("Cy", "Vell"), ("Di", "Rask")]:
        traj = Trajectory()
        traj.add(f"Question: where was {name} born?\n", "prompt")
        traj.add(f"<search> {name} born in </search>", "policy")
        traj.add(f"<information>{name} was born in {answer}.</information>", "env")
        traj.add(f"<answer> {answer} </answer>", "policy")
        demos.append(traj)
    return demos


def _policy(model_dir) -> tuple[TrainablePolicy, object]:
    torch.manual_seed(0)
    loaded = load_policy(str(model_dir))
    return TrainablePolicy(loaded.model, keep_reference=False), loaded.tokenizer


def test_nll_counts_only_masked_tokens():
    logprobs = torch.tensor([[0.0, -1.0, -2.0], [0.0, -0.5, -4.0]])
    mask = torch.tensor([[False, True, False], [False, True, True]])
    assert float(nll_loss(logprobs, mask)) == pytest.approx(1.0 + 0.5 + 4.0)


def test_step_learns_only_policy_tokens_and_micro_batches_do_not_change_it(tiny_policy_dir):
    grads, losses = [], []
    for micro in (1, 4):
        policy, tokenizer = _policy(tiny_policy_dir)
        batch = encode_trajectories(_demos(), tokenizer, max_len=256)
        optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=0.0)
        metrics = sft_step(policy, optimizer, batch, SFTConfig(micro_batch_size=micro))
        policy_tokens = sum(len(tokenizer(s.text, add_special_tokens=False)["input_ids"])
                            for d in _demos() for s in d.segments if s.source == "policy")
        assert metrics["tokens"] == policy_tokens
        losses.append(metrics["loss"])
        grads.append(torch.cat([p.grad.flatten() for p in policy.trainable_parameters()]))
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_repeated_epochs_lower_the_loss(tiny_policy_dir):
    policy, tokenizer = _policy(tiny_policy_dir)
    seen = []
    history = supervised_finetune(
        policy, tokenizer, _demos(), SFTConfig(lr=1e-2, epochs=6, batch_size=4),
        on_step=lambda step, metrics: seen.append(step),
    )
    assert seen == list(range(6))
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]


def test_batches_walk_one_permutation_per_epoch():
    steps = batches_of(5, SFTConfig(batch_size=2, epochs=2, seed=3))
    flat = [i for rows in steps for i in rows]
    assert [len(rows) for rows in steps] == [2, 2, 2, 2, 2]  # 10 rows, epochs run together
    assert sorted(flat[:5]) == sorted(flat[5:]) == [0, 1, 2, 3, 4]
    assert steps == batches_of(5, SFTConfig(batch_size=2, epochs=2, seed=3))


def test_early_stopping_keeps_the_best_epoch_and_ends_after_its_patience(tiny_policy_dir):
    policy, tokenizer = _policy(tiny_policy_dir)
    scores, calls = iter([0.5, 0.7, 0.6, 0.65, 0.9]), []
    stopping = EarlyStopping(
        measure=lambda: {"auroc": next(scores), "loss": 1.0}, key="auroc", patience=2,
        save=lambda: calls.append("save"), restore=lambda: calls.append("restore"),
        on_epoch=lambda epoch, s: calls.append(epoch))
    steps = []
    result = early_stopped_finetune(policy, tokenizer, _demos(),
                                    SFTConfig(lr=1e-2, epochs=5, batch_size=2), stopping,
                                    on_step=lambda step, m: steps.append(step))
    # 0.5 (best), 0.7 (best), 0.6 and 0.65 (two without a higher one: patience 2) → stop
    assert calls == [0, "save", 1, "save", 2, 3, "restore"]
    assert result == {"best_epoch": 2.0, "epochs_run": 4.0, "dev_auroc": 0.7,
                      "dev_loss": 1.0}
    assert steps == list(range(8))  # 2 steps an epoch, counted across epochs
    with pytest.raises(ValueError, match="no judge examples"):
        early_stopped_finetune(policy, tokenizer, [], SFTConfig(), stopping, what="judge examples")


class Killed(Exception):
    """Stands in for the process dying mid-run."""


def _stopping(scores, calls, progress_dir) -> EarlyStopping:
    def measure():
        score = next(scores)
        if score is None:
            raise Killed
        return {"auroc": score, "loss": 1.0}
    return EarlyStopping(measure=measure, key="auroc", patience=2,
                         save=lambda: calls.append("save"), restore=lambda: calls.append("restore"),
                         on_epoch=lambda epoch, s: calls.append((epoch, s["auroc"])),
                         progress_dir=progress_dir)


def test_a_killed_run_resumes_after_its_last_finished_epoch(tiny_policy_dir, tmp_path):
    config = SFTConfig(lr=1e-2, epochs=4, batch_size=2)
    whole, tokenizer = _policy(tiny_policy_dir)  # the run that is never killed
    early_stopped_finetune(whole, tokenizer, _demos(), config,
                           _stopping(iter([0.5, 0.7, 0.8, 0.9]), [], None))

    progress = tmp_path / "progress"
    killed, _ = _policy(tiny_policy_dir)
    with pytest.raises(Killed):  # dies measuring epoch 3, after epochs 1 and 2 were kept
        early_stopped_finetune(killed, tokenizer, _demos(), config,
                               _stopping(iter([0.5, 0.7, None]), [], progress))
    resumed, _ = _policy(tiny_policy_dir)  # a fresh process: the start's weights again
    calls, steps = [], []
    result = early_stopped_finetune(resumed, tokenizer, _demos(), config,
                                    _stopping(iter([0.8, 0.9]), calls, progress),
                                    on_step=lambda step, m: steps.append(step))
    # the kept epochs are logged again, then epochs 3 and 4 train (steps 4–7) and improve
    assert calls == [(0, 0.5), (1, 0.7), (2, 0.8), "save", (3, 0.9), "save", "restore"]
    assert steps == [4, 5, 6, 7]
    assert result["best_epoch"] == 4.0 and result["epochs_run"] == 4.0
    for a, b in zip(whole.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)  # as if never killed: weights and optimizer state put back


def test_progress_of_other_examples_is_refused(tiny_policy_dir, tmp_path):
    config, progress = SFTConfig(lr=1e-2, epochs=2, batch_size=2), tmp_path / "progress"
    policy, tokenizer = _policy(tiny_policy_dir)
    with pytest.raises(Killed):
        early_stopped_finetune(policy, tokenizer, _demos(), config,
                               _stopping(iter([0.5, None]), [], progress))
    with pytest.raises(ValueError, match="progress of another run"):
        early_stopped_finetune(policy, tokenizer, _demos()[:3], config,
                               _stopping(iter([0.5]), [], progress))


def test_no_demonstrations_is_a_clear_error(tiny_policy_dir):
    policy, tokenizer = _policy(tiny_policy_dir)
    with pytest.raises(ValueError, match="no demonstrations"):
        supervised_finetune(policy, tokenizer, [], SFTConfig())


def test_the_warm_up_bar_counts_demonstrations_over_the_epochs(tiny_policy_dir, tmp_path, capfd):
    """4 demonstrations, 2 epochs, batches of 3: 8 rows cut 3 + 3 + 2, three updates, and the
    bar ends at 8 of 8 demonstrations."""
    policy, tokenizer = _policy(tiny_policy_dir)
    capfd.readouterr()  # the model's loading, before the session
    with console.session("sft", log_dir=tmp_path):
        history = supervised_finetune(policy, tokenizer, _demos(), SFTConfig(epochs=2, batch_size=3))
    assert len(history) == 3
    drawn = capfd.readouterr().err.splitlines()  # not a terminal: a line a redraw
    assert [line.split()[0] for line in drawn] == ["warm-up", "warm-up"]  # start, end
    assert " 0/8 demonstrations [" in drawn[0] and " 8/8 demonstrations [" in drawn[1]
