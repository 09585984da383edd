"""The local trainer on a tiny random model: updates, LoRA reference, masked gradients, schedule."""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import nullcontext

import pytest
import torch

from advrag.agents.types import Trajectory
from advrag.common.types import Passage
from advrag.datasets.records import QARecord
from advrag.engines.local.policy import LoraSettings, TrainablePolicy
from advrag.engines.local.trainer import LocalTrainer, TrainConfig, UpdateInputs, lr_multiplier
from advrag.models.loading import load_policy
from advrag.recipes.rollout import RolloutSettings
from advrag.recipes.search_agent.step import grpo_step

CONFIG = {
    "lr": 1e-2,
    "weight_decay": 0.0,
    "micro_batch_size": 2,
    "max_seq_len": 128,
    "kl_coef": 0.05,
    "seed": 0,
}
SCORES = [1.0, 0.0, 0.5, 0.0]
GROUPS = ["a", "a", "b", "b"]
METRICS = {
    "loss",
    "pg_loss",
    "kl",
    "clip_fraction",
    "entropy",
    "grad_norm",
    "lr",
    "tokens",
    "tokens_per_s",
    "response_length",
}


def _trajectories() -> list[Trajectory]:
    """Four short episodes: prompt, policy search, env passage, policy answer."""
    answers = ["Ada Lind", "Zorvath", "the river", "1990"]
    trajs = []
    for answer in answers:
        traj = Trajectory()
        traj.add("<|im_start|>user\nWho founded it?<|im_end|>\n<|im_start|>assistant\n", "prompt")
        traj.add("<search> founder </search>", "policy")
        traj.add("<information>Doc 1 founded by Ada</information>", "env")
        traj.add(f"<answer> {answer} </answer>", "policy")
        trajs.append(traj)
    return trajs


def _trainer(model_dir, *, lora: bool = False, **overrides) -> LocalTrainer:
    loaded = load_policy(str(model_dir))
    policy = TrainablePolicy(loaded.model, lora=LoraSettings(r=4) if lora else None)
    return LocalTrainer(policy, loaded.tokenizer, TrainConfig(**(CONFIG | overrides)))


def _params(trainer: LocalTrainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}


def _grads(trainer: LocalTrainer, inputs: UpdateInputs) -> dict[str, torch.Tensor]:
    """Gradients of one full-batch loss, accumulated over micro-batches (no optimizer step)."""
    with trainer.policy.training():
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.accumulate_gradients(inputs, measure_entropy=False)
    return {
        n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p))
        for n, p in trainer.policy.model.named_parameters()
        if p.requires_grad
    }


def test_full_fine_tune_changes_every_weight_and_keeps_the_reference(tiny_policy_dir):
    trainer = _trainer(tiny_policy_dir)
    batch = trainer.encode(_trajectories())
    before_logprobs, _ = trainer.policy.logprobs(batch, micro_batch_size=4)
    before = _params(trainer)
    metrics = [trainer.update(_trajectories(), SCORES, GROUPS).metrics for _ in range(2)]
    after = _params(trainer)
    assert all(not torch.equal(before[n], after[n]) for n in before)
    assert torch.equal(
        trainer.policy.reference_logprobs(batch, micro_batch_size=4), before_logprobs
    )
    assert not torch.equal(trainer.policy.logprobs(batch, micro_batch_size=4)[0], before_logprobs)
    for step in metrics:
        assert METRICS <= step.keys() and all(math.isfinite(v) for v in step.values())
    assert metrics[1]["kl"] > 0 and metrics[0]["lr"] == pytest.approx(1e-2)
    assert metrics[0]["tokens"] == float(batch.attention_mask.sum())
    assert metrics[0]["response_length"] == float(batch.loss_mask.sum()) / 4
    assert trainer.step == 2 and not trainer.policy.model.training


def test_lora_trains_only_the_adapter_and_its_reference_is_the_base(tiny_policy_dir):
    base = load_policy(str(tiny_policy_dir))
    trainer = _trainer(tiny_policy_dir, lora=True)
    batch = trainer.encode(_trajectories())
    base_logprobs, _ = TrainablePolicy(base.model).logprobs(batch, micro_batch_size=4)
    before = _params(trainer)
    for _ in range(2):
        trainer.update(_trajectories(), SCORES, GROUPS)
    after = _params(trainer)
    adapter = {n for n, p in trainer.policy.model.named_parameters() if p.requires_grad}
    assert adapter and all("lora_" in n for n in adapter)
    assert all(torch.equal(before[n], after[n]) for n in before if n not in adapter)
    assert all(not torch.equal(before[n], after[n]) for n in adapter if "lora_B" in n)
    reference = trainer.policy.reference_logprobs(batch, micro_batch_size=4)
    assert torch.equal(reference, base_logprobs)
    assert not torch.equal(trainer.policy.logprobs(batch, micro_batch_size=4)[0], base_logprobs)


def test_masked_tokens_contribute_exactly_zero_gradient(tiny_policy_dir):
    trainer = _trainer(tiny_policy_dir)
    inputs = trainer.prepare(_trajectories(), SCORES, GROUPS, entropy_first=True)
    masked = ~inputs.batch.loss_mask
    generator = torch.Generator().manual_seed(0)

    def scramble(values: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        noise = 1e3 * torch.randn(values.shape, generator=generator)
        return torch.where(where, noise, values)

    clean = _grads(trainer, inputs)
    noisy = UpdateInputs(
        inputs.batch,
        scramble(inputs.old_logprobs, masked),
        scramble(inputs.ref_logprobs, masked),
        scramble(inputs.advantages, masked),
        inputs.entropy,
    )
    assert all(torch.equal(clean[n], g) for n, g in _grads(trainer, noisy).items())
    first_policy_token = inputs.batch.loss_mask.nonzero()[0]
    one_more = torch.zeros_like(masked)
    one_more[tuple(first_policy_token)] = True
    changed = UpdateInputs(
        inputs.batch,
        inputs.old_logprobs,
        inputs.ref_logprobs,
        scramble(inputs.advantages, one_more),
        inputs.entropy,
    )
    assert any(not torch.equal(clean[n], g) for n, g in _grads(trainer, changed).items())


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batches_accumulate_to_the_full_batch_gradient(tiny_policy_dir, agg):
    trainer = _trainer(tiny_policy_dir, loss_agg=agg, advantage="reinforce_pp")
    # uneven response lengths and a row without policy tokens (which the seq-mean
    # modes leave out), so the three aggregations weigh micro-batches differently
    trajs = _trajectories()
    trajs[0].add(" and a much longer closing remark from the policy", "policy")
    trajs[3].segments = trajs[3].segments[:1]
    inputs = trainer.prepare(trajs, SCORES, GROUPS)
    trainer.config = trainer.config.model_copy(update={"micro_batch_size": 4})
    whole = _grads(trainer, inputs)
    trainer.config = trainer.config.model_copy(update={"micro_batch_size": 1})
    assert not inputs.batch.truncated_mask.any()
    for name, grad in _grads(trainer, inputs).items():
        assert torch.linalg.vector_norm(grad - whole[name]) <= 1e-5 * torch.linalg.vector_norm(
            whole[name]
        )


def test_one_epoch_skips_the_old_logprob_pass_and_takes_the_same_step(tiny_policy_dir):
    # kl_coef 0: no reference pass, so every forward counted is the policy's own
    one_pass, two_pass = (_trainer(tiny_policy_dir, kl_coef=0.0) for _ in range(2))
    forwards = {"one": 0, "two": 0}
    for name, trainer in (("one", one_pass), ("two", two_pass)):
        def count(*_, name=name):
            forwards[name] += 1
        trainer.policy.model.get_decoder().register_forward_hook(count)
    on_policy = one_pass.prepare(_trajectories(), SCORES, GROUPS)
    measured = two_pass.prepare(_trajectories(), SCORES, GROUPS, entropy_first=True)
    assert on_policy.old_logprobs is None and on_policy.entropy is None
    assert forwards == {"one": 0, "two": 2}  # 4 rows in micro-batches of 2
    one, two = one_pass.learn(on_policy), two_pass.learn(measured)
    assert forwards == {"one": 2, "two": 4}
    mask = one.batch.loss_mask
    torch.testing.assert_close(one.entropy, two.entropy)
    assert one.entropy[mask].min() > 0
    assert one.metrics["entropy"] == pytest.approx(two.metrics["entropy"], rel=1e-5)
    assert one.metrics["clip_fraction"] == two.metrics["clip_fraction"] == 0.0
    for (name, after), before in zip(_params(one_pass).items(), _params(two_pass).values()):
        torch.testing.assert_close(after, before, atol=1e-6, rtol=1e-5, msg=name)


def test_gradient_checkpointing_gives_the_same_gradients(tiny_policy_dir):
    plain = _trainer(tiny_policy_dir)
    loaded = load_policy(str(tiny_policy_dir))
    policy = TrainablePolicy(loaded.model, gradient_checkpointing=True)
    checkpointed = LocalTrainer(policy, loaded.tokenizer, TrainConfig(**CONFIG))
    assert checkpointed.policy.model.is_activation_checkpointing
    inputs = plain.prepare(_trajectories(), SCORES, GROUPS)
    want = _grads(plain, inputs)
    for name, grad in _grads(checkpointed, inputs).items():
        torch.testing.assert_close(grad, want[name], atol=1e-7, rtol=1e-5)


def test_behaviour_log_prob_hook_is_what_the_ratio_divides_by(tiny_policy_dir):
    # a behaviour policy 1.1 times as likely as π_old on every token: the ratio is
    # π/(1.1·π_old) = 1/1.1 ≈ 0.909 at the first step, inside the clip range [0.8, 1.2],
    # so every token's gradient −A·∇r is the plain one divided by 1.1
    trainer = _trainer(tiny_policy_dir, kl_coef=0.0)
    seen = {}

    def more_likely(batch, old_logprobs: torch.Tensor) -> torch.Tensor:
        seen["shapes"] = (tuple(batch.input_ids.shape), tuple(old_logprobs.shape))
        return old_logprobs + math.log(1.1)

    shifted = trainer.prepare(_trajectories(), SCORES, GROUPS, more_likely)
    assert seen["shapes"][0] == seen["shapes"][1] == tuple(shifted.batch.input_ids.shape)
    plain = trainer.prepare(_trajectories(), SCORES, GROUPS, entropy_first=True)
    want = {name: grad / 1.1 for name, grad in _grads(trainer, plain).items()}
    assert any(torch.count_nonzero(g) > 0 for g in want.values())
    for name, grad in _grads(trainer, shifted).items():
        torch.testing.assert_close(grad, want[name], atol=1e-7, rtol=1e-4)


def test_lr_schedule_hand_values():
    # warm-up 2 of 6 updates: (s+1)/2 → 0.5, 1.0; then progress (s−2)/4
    cosine = [lr_multiplier(s, warmup=2, total=6, decay="cosine") for s in range(7)]
    # cosine at progress 1/4: 0.5·(1 + cos(π/4)) = 0.853553…; at 1/2: 0.5; at 3/4: 0.146447…
    assert cosine == pytest.approx([0.5, 1.0, 1.0, 0.8535534, 0.5, 0.1464466, 0.0])
    linear = [lr_multiplier(s, warmup=0, total=4, decay="linear") for s in range(5)]
    assert linear == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])
    assert lr_multiplier(99, warmup=0, total=4, decay="constant") == 1.0


class _EchoGenerator:
    """Answers "Who is A?" correctly with A and everything else with "nobody"."""

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int, stop=()) -> list[str]:
        return [
            "<answer> A </answer>" if "Who is A?" in p else "<answer> nobody </answer>"
            for p in prompts
        ]


class _OnePassage:
    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return [[Passage("p1", "Title\ntext")] for _ in queries]


def test_grpo_step_groups_rollouts_by_record_and_scores_each(tiny_policy_dir):
    trainer = _trainer(tiny_policy_dir)
    records = [QARecord("q1", "Who is A?", ["A"]), QARecord("q2", "Who is B?", ["B"])]
    calls = []

    def reward(traj: Trajectory, record: QARecord) -> float:
        calls.append((record.id, record.question in traj.text))
        return float(traj.answer == record.golden_answers[0])

    metrics = grpo_step(
        trainer,
        _EchoGenerator(),
        _OnePassage(),
        records,
        group_size=3,
        reward_fn=reward,
        settings=RolloutSettings(max_turns=1),
    )
    assert calls == [("q1", True)] * 3 + [("q2", True)] * 3
    assert metrics["reward_mean"] == 0.5 and metrics["answered_fraction"] == 1.0
    assert metrics["pg_loss"] == 0.0  # equal rewards within each group: zero advantages
    assert trainer.step == 1 and not trainer.policy.model.training


def test_cpu_bf16_autocast_trains_and_stays_close_to_fp32(tiny_policy_dir):
    """Opt-in CPU bf16: active only on native-bf16 CPUs; log-probs near fp32, update finite."""
    from advrag.engines.local.policy import _native_cpu_bf16

    loaded = load_policy(str(tiny_policy_dir))
    policy = TrainablePolicy(loaded.model, cpu_bf16=True)
    assert policy.cpu_bf16 == _native_cpu_bf16()
    trainer = LocalTrainer(policy, loaded.tokenizer, TrainConfig(**CONFIG))
    batch = trainer.encode(_trajectories())
    mixed, _ = policy.logprobs(batch, micro_batch_size=4)
    policy.cpu_bf16 = False
    exact, _ = policy.logprobs(batch, micro_batch_size=4)
    assert mixed.dtype == torch.float32
    assert torch.allclose(mixed, exact, atol=0.1)  # bf16 keeps ~3 significant digits
    assert torch.equal(mixed, exact) != _native_cpu_bf16()  # autocast really ran (or not)
    policy.cpu_bf16 = _native_cpu_bf16()
    before = _params(trainer)
    metrics = trainer.update(_trajectories(), SCORES, GROUPS).metrics
    assert all(math.isfinite(v) for v in metrics.values())
    assert any(not torch.equal(before[n], p) for n, p in _params(trainer).items())


def test_lora_under_bf16_runs_frozen_weights_from_bf16_copies_bit_for_bit(tiny_policy_dir):
    """The bf16 copies of the frozen base change no log-prob or gradient, and follow the base."""
    from torch import nn

    from advrag.engines.local.policy import _BF16_COPIES

    trainer = _trainer(tiny_policy_dir, lora=True, kl_coef=0.0)
    policy = trainer.policy
    policy.cpu_bf16 = True  # emulated where the CPU lacks bf16: the same rounding either way
    for name, param in policy.model.named_parameters():
        if "lora_B" in name:  # peft starts B at 0: make the adapter matter
            nn.init.normal_(param, std=0.05)
    frozen = {m: m.weight for m in policy.model.modules()
              if isinstance(m, nn.Linear) and not m.weight.requires_grad}
    inputs = trainer.prepare(_trajectories(), SCORES, GROUPS)

    def measured() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return policy.logprobs(inputs.batch, micro_batch_size=2)[0], _grads(trainer, inputs)

    copies, copies_grads = measured()
    assert all(module in _BF16_COPIES for module in frozen) and frozen  # each ran from a copy
    assert all(module.weight is weight for module, weight in frozen.items())  # restored after
    policy.autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # autocast's own casts
    plain, plain_grads = measured()
    assert torch.equal(copies, plain)
    assert all(torch.equal(copies_grads[n], plain_grads[n]) for n in plain_grads)
    del policy.autocast
    base = next(iter(frozen.values()))
    with torch.no_grad():
        base.mul_(1.5)  # an in-place change of the base: the copy is remade
    changed = policy.logprobs(inputs.batch, micro_batch_size=2)[0]
    assert not torch.equal(changed, copies)
    policy.autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    assert torch.equal(changed, policy.logprobs(inputs.batch, micro_batch_size=2)[0])


@pytest.mark.parametrize(("checkpointing", "tied"), [(False, True), (True, True), (False, False)])
def test_full_fine_tune_under_bf16_copies_the_weights_once_bit_for_bit(
        tiny_policy_dir, monkeypatch, checkpointing, tied):
    """One bf16 copy per update gives autocast's own gradients (over several micro-batches,
    with activation recompute, with a tied LM head left to autocast) and hands the fp32
    parameters back afterwards."""
    from torch import nn

    from advrag.engines.local import policy as policy_module

    loaded = load_policy(str(tiny_policy_dir))
    head = loaded.model.lm_head
    assert head.weight is loaded.model.get_input_embeddings().weight  # tied, as in SmolLM2
    if not tied:
        head.weight = nn.Parameter(head.weight.detach().clone())
    policy = TrainablePolicy(loaded.model, gradient_checkpointing=checkpointing)
    policy.cpu_bf16 = True  # emulated where the CPU lacks bf16: the same rounding either way
    trainer = LocalTrainer(policy, loaded.tokenizer, TrainConfig(**(CONFIG | {"kl_coef": 0.0})))
    parameters = dict(policy.model.named_parameters())
    linears = {m: m.weight for m in policy.model.modules() if isinstance(m, nn.Linear)}
    inputs = trainer.prepare(_trajectories(), SCORES, GROUPS)
    with policy.training():
        inside = {m: m.weight.dtype for m in linears}
    assert inside.pop(head) == (torch.float32 if tied else torch.bfloat16)
    assert set(inside.values()) == {torch.bfloat16}  # the other linears run from their copies
    assert all(m.weight is w for m, w in linears.items())  # and the parameters return
    copied_once = _grads(trainer, inputs)
    monkeypatch.setattr(policy_module, "trainable_weights_in_bf16", lambda model: nullcontext())
    per_micro_batch = _grads(trainer, inputs)  # autocast casts again in each micro-batch
    assert set(copied_once) == set(parameters)
    assert all(torch.equal(copied_once[n], per_micro_batch[n]) for n in parameters)
    assert all(copied_once[n].abs().sum() > 0 for n in parameters if "proj" in n)


def test_update_returns_the_sampling_entropy_it_measured(tiny_policy_dir):
    trainer = _trainer(tiny_policy_dir)
    batch = trainer.encode(_trajectories())
    _, expected = trainer.policy.logprobs(batch, micro_batch_size=4, with_entropy=True)
    result = trainer.update(_trajectories(), SCORES, GROUPS)  # measured before the step
    assert torch.equal(result.batch.input_ids, batch.input_ids)
    assert torch.allclose(result.entropy, expected)
    mask = result.batch.loss_mask
    assert result.metrics["entropy"] == pytest.approx(float(result.entropy[mask].mean()), rel=1e-6)


def test_prepared_advantages_can_be_changed_before_learning(tiny_policy_dir):
    """A recipe adds its own term between prepare and learn (ARR's process advantage)."""
    plain, shifted = _trainer(tiny_policy_dir), _trainer(tiny_policy_dir)
    inputs = shifted.prepare(_trajectories(), SCORES, GROUPS)
    inputs.advantages = inputs.advantages + torch.where(inputs.batch.loss_mask, 1.0, 0.0)
    moved = shifted.learn(inputs).metrics["pg_loss"]
    # on the first step the ratio is 1, so the PPO loss is −(token mean of A): +1 on every
    # policy token lowers it by exactly 1
    base = plain.update(_trajectories(), SCORES, GROUPS).metrics["pg_loss"]
    assert moved == pytest.approx(base - 1.0, abs=1e-5)


def _lora_trainer(model_dir, **policy_options) -> LocalTrainer:
    """A LoRA trainer whose adapter starts from seeded, non-zero weights (B too)."""
    torch.manual_seed(0)
    loaded = load_policy(str(model_dir))
    policy = TrainablePolicy(loaded.model, lora=LoraSettings(r=4), **policy_options)
    for name, param in policy.model.named_parameters():
        if "lora_B" in name:  # peft starts B at 0: make the adapter matter
            torch.nn.init.normal_(param, std=0.05)
    return LocalTrainer(policy, loaded.tokenizer, TrainConfig(**CONFIG))


def test_a_compiled_update_takes_the_eager_step_and_compiles_the_update_alone(
        tiny_policy_dir, cxx_compiler):
    from torch._dynamo.eval_frame import OptimizedModule
    from torch._dynamo.utils import counters

    from advrag.engines.local.policy import decoder_layers

    eager = _lora_trainer(tiny_policy_dir)
    compiled = _lora_trainer(tiny_policy_dir, compile_update=True)
    inputs = eager.prepare(_trajectories(), SCORES, GROUPS)
    graphs_before = counters["stats"]["unique_graphs"]
    eager_grads, compiled_grads = _grads(eager, inputs), _grads(compiled, inputs)
    assert counters["stats"]["unique_graphs"] > graphs_before  # inductor compiled the layers
    assert eager_grads.keys() == compiled_grads.keys()
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, atol=1e-5, rtol=1e-4)
    layers = decoder_layers(compiled.policy.model)
    with compiled.policy.training():
        assert all(isinstance(layer, OptimizedModule) for layer in layers)
    assert not any(isinstance(layer, OptimizedModule) for layer in layers)  # eager outside
    for trainer in (eager, compiled):
        trainer.update(_trajectories(), SCORES, GROUPS)
    torch.testing.assert_close(compiled.policy.logprobs(inputs.batch, micro_batch_size=4)[0],
                               eager.policy.logprobs(inputs.batch, micro_batch_size=4)[0],
                               atol=1e-5, rtol=0)


def test_compile_update_refuses_a_model_without_a_layer_list_at_construction():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64))
    with pytest.raises(ValueError, match="no `layers` list.*compile_update: false"):
        TrainablePolicy(gpt2, compile_update=True)
    TrainablePolicy(gpt2)  # eager updates need no layer list


def test_compile_update_on_a_cpu_without_a_cxx_compiler_fails_at_construction(
        tiny_policy_dir, monkeypatch):
    from advrag.engines.local.dual import shared_lora_policies

    monkeypatch.setenv("CXX", "no-such-compiler-here")
    loaded = load_policy(str(tiny_policy_dir))
    with pytest.raises(ValueError, match="`no-such-compiler-here` is not on PATH.*apt-get install g"):
        TrainablePolicy(loaded.model, lora=LoraSettings(r=4), compile_update=True)
    with pytest.raises(ValueError, match="C\\+\\+ compiler"):
        shared_lora_policies(loaded.model, LoraSettings(r=4), compile_update=True)
    assert not any("lora_" in name for name, _ in loaded.model.named_modules())  # left as it was


def test_compile_update_auto_compiles_long_cpu_runs_only(tiny_policy_dir, cxx_compiler,
                                                         monkeypatch):
    from transformers import GPT2Config, GPT2LMHeadModel

    from advrag.engines.local.policy import AUTO_COMPILE_MIN_SEQUENCES, compile_for_run

    model = load_policy(str(tiny_policy_dir)).model
    enough = AUTO_COMPILE_MIN_SEQUENCES
    assert compile_for_run("auto", model, enough)
    assert not compile_for_run("auto", model, enough - 1)  # too short to pay back
    assert compile_for_run(True, model, 1)  # an explicit choice stands
    assert not compile_for_run(False, model, 10 * enough)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64))
    assert not compile_for_run("auto", gpt2, enough)  # no layer list: eager, no error
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    assert not compile_for_run("auto", model, enough)  # no C++ compiler: eager
