"""Two policies on the local engine: adapters on one base, joint ARR updates, exact resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from dual_resume_worker import (
    SETTINGS,
    build,
    load_records,
    run,
    trainable_state,
)

from advrag.engines.local.dual import (
    AgentTrainers,
    agent_generators,
    common_steps,
    export_policy,
    shared_lora_policies,
)
from advrag.engines.local.generation import HFGenerator, SnapshotGenerator, inference_copy
from advrag.engines.local.policy import LoraSettings
from advrag.engines.local.tokenize import encode_trajectories
from advrag.engines.local.trainer import TrainConfig
from advrag.models.loading import load_policy
from advrag.retrieval.retriever import load_retriever

WORKER = Path(__file__).with_name("dual_resume_worker.py")
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def one_thread():
    """Same thread count here and in the worker processes (reductions depend on it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def world(small_world_dir, small_index_dir, one_thread):
    return load_records(small_world_dir), load_retriever(small_index_dir)


@pytest.fixture(scope="module")
def uninterrupted(tiny_policy_dir, world):
    """Three joint updates without a break: metrics by step, trainable weights per step."""
    records, retriever = world
    dual, generators = build(tiny_policy_dir, records)
    base = {n: p.detach().clone() for n, p in dual["reasoner"].policy.model.named_parameters()
            if ".lora_" not in n}
    states = [trainable_state(dual)]
    metrics = {}
    for step in (1, 2, 3):
        metrics |= run(dual, generators, retriever, records, position=step - 1, until=step)
        states.append(trainable_state(dual))
    return metrics, states, base, dual


def _perturbed_shared(model_dir):
    """Adapters on a tiny base, the verifier's made non-zero (LoRA B starts at 0 = the base)."""
    loaded = load_policy(str(model_dir))
    policies = shared_lora_policies(loaded.model, LoraSettings(r=4))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in policies["verifier"].trainable_parameters():
            p.normal_(0, 0.5)
    return policies, loaded.tokenizer


def test_each_agent_owns_its_adapter_and_the_reference_is_the_base(tiny_policy_dir):
    policies, tokenizer = _perturbed_shared(tiny_policy_dir)
    reasoner, verifier = policies["reasoner"], policies["verifier"]
    r_params, v_params = reasoner.trainable_parameters(), verifier.trainable_parameters()
    assert r_params and len(r_params) == len(v_params)
    assert not {id(p) for p in r_params} & {id(p) for p in v_params}
    assert reasoner.model is verifier.model  # one base in memory

    from advrag.agents.types import Trajectory

    traj = Trajectory()
    traj.add("<|im_start|>user\nWho founded Zorvath?<|im_end|>\n", "prompt")
    traj.add("<think>the city</think><answer>Ada Lind</answer>", "policy")
    batch = encode_trajectories([traj], tokenizer, max_len=256)
    reference = reasoner.reference_logprobs(batch, micro_batch_size=1)
    assert torch.equal(verifier.reference_logprobs(batch, micro_batch_size=1), reference)
    assert torch.allclose(reasoner.logprobs(batch, micro_batch_size=1)[0], reference)
    assert not torch.allclose(verifier.logprobs(batch, micro_batch_size=1)[0], reference)


def test_each_agent_samples_from_an_fp32_copy_with_only_its_adapter_merged(tiny_policy_dir,
                                                                          tmp_path):
    policies, tokenizer = _perturbed_shared(tiny_policy_dir)
    generators = agent_generators(policies, dict.fromkeys(policies, tokenizer), temperature=0.0)
    assert all(isinstance(g, SnapshotGenerator) for g in generators.values())
    assert all(p.dtype == torch.float32 for g in generators.values() for p in g.model.parameters())
    assert not any("lora" in n for g in generators.values() for n, _ in g.model.named_parameters())
    prompts = [generators["reasoner"].chat_prompt("Who founded Zorvath?")]

    def greedy(model) -> list[str]:
        return HFGenerator(model, tokenizer).generate(prompts, max_new_tokens=12)

    verifier_out = generators["verifier"].generate(prompts, max_new_tokens=12)
    reasoner_out = generators["reasoner"].generate(prompts, max_new_tokens=12)
    merged = load_policy(str(export_policy(policies["verifier"], tokenizer, tmp_path / "v")))
    base = load_policy(str(tiny_policy_dir))
    assert verifier_out == greedy(merged.model)  # the verifier adapter, merged, samples the same
    assert reasoner_out == greedy(base.model)  # reasoner adapter still zero: the base
    assert verifier_out != reasoner_out


def test_bf16_sampling_uses_a_copy_per_agent_with_only_its_adapter_merged(tiny_policy_dir,
                                                                          tmp_path):
    policies, tokenizer = _perturbed_shared(tiny_policy_dir)
    for policy in policies.values():
        policy.cpu_bf16 = True  # bf16 autocast over fp32 weights (emulated where not native)
    generators = agent_generators(policies, dict.fromkeys(policies, tokenizer), temperature=0.0)
    assert all(isinstance(g, SnapshotGenerator) for g in generators.values())
    assert all(p.dtype == torch.bfloat16 for g in generators.values() for p in g.model.parameters())
    prompts = [generators["reasoner"].chat_prompt("Who founded Zorvath?")]

    def greedy(agent: str) -> list[str]:
        """The agent's adapter merged by export, cast to bf16, decoded greedily."""
        exported = export_policy(policies[agent], tokenizer, tmp_path / agent)
        model = load_policy(str(exported)).model.to(torch.bfloat16)
        return HFGenerator(model, tokenizer).generate(prompts, max_new_tokens=12)

    outputs = {a: g.generate(prompts, max_new_tokens=12) for a, g in generators.items()}
    assert outputs == {agent: greedy(agent) for agent in generators}
    assert outputs["reasoner"] != outputs["verifier"]
    with torch.no_grad():  # the reasoner's adapter becomes the verifier's
        for mine, theirs in zip(policies["reasoner"].trainable_parameters(),
                                policies["verifier"].trainable_parameters()):
            mine.copy_(theirs)
    assert generators["reasoner"].generate(prompts, max_new_tokens=12) == outputs["reasoner"]
    copy = generators["reasoner"].model
    generators["reasoner"].push_weights(policies["reasoner"].model)
    assert generators["reasoner"].model is copy  # overwritten in place, no new model
    fresh = inference_copy(policies["reasoner"].model, torch.bfloat16, "reasoner")
    pushed = dict(copy.named_parameters())
    assert all(torch.equal(pushed[n], p) for n, p in fresh.named_parameters())  # as merge_and_unload
    assert generators["reasoner"].generate(prompts, max_new_tokens=12) == outputs["verifier"]
    assert policies["reasoner"].model.peft_config.keys() == {"reasoner", "verifier"}


def test_two_joint_steps_update_both_adapters_and_leave_the_base(uninterrupted):
    metrics, states, base, dual = uninterrupted
    before, after_two = states[0], states[2]
    for agent in ("reasoner", "verifier"):
        changed = [k for k in before if k.startswith(agent) and not torch.equal(before[k], after_two[k])]
        assert len(changed) == sum(k.startswith(agent) for k in before)  # every adapter tensor
    now = {n: p for n, p in dual["reasoner"].policy.model.named_parameters() if ".lora_" not in n}
    assert now.keys() == base.keys() and all(torch.equal(now[n], base[n]) for n in base)
    # each agent's own optimizer and schedule (warm-up 1, then cosine vs linear decay)
    assert (metrics[1]["reasoner/lr"], metrics[1]["verifier/lr"]) == (1e-2, 5e-3)
    # update 3 is 1/3 into the decay: cosine 0.5·(1 + cos(π/3)) = 0.75, linear 1 − 1/3
    assert metrics[3]["reasoner/lr"] == pytest.approx(1e-2 * 0.75)
    assert metrics[3]["verifier/lr"] == pytest.approx(5e-3 * 2 / 3)
    for step in (1, 2):
        for agent in ("reasoner", "verifier"):
            assert metrics[step][f"{agent}/grad_norm"] > 0
            assert metrics[step][f"{agent}/response_length"] > 0
        assert metrics[step]["verifier/critique_actions"] == 3  # step verify, response, final verify


def test_process_advantage_switch_changes_only_the_verifier_update(tiny_policy_dir, world):
    records, retriever = world
    results = {}
    for enabled in (True, False):
        dual, generators = build(tiny_policy_dir, records)
        settings = SETTINGS.__class__(**{**SETTINGS.__dict__, "process_advantage": enabled})
        # record 1: the reasoner's F1 and the documents' gold make some A_proc non-zero
        results[enabled] = run(dual, generators, retriever, records, position=1, until=1,
                               settings=settings)[1]
    on, off = results[True], results[False]
    assert on["verifier/process_adv_mean"] == off["verifier/process_adv_mean"] != 0
    assert {k: v for k, v in on.items() if k.startswith("reasoner/")} == {
        k: v for k, v in off.items() if k.startswith("reasoner/")}
    assert on["verifier/pg_loss"] != off["verifier/pg_loss"]


@pytest.mark.slow
def test_a_killed_process_resumes_both_agents_exactly(
    tiny_policy_dir, small_world_dir, small_index_dir, tmp_path, uninterrupted
):
    checkpoints, out = tmp_path / "checkpoints", tmp_path / "out"
    args = [sys.executable, str(WORKER), str(tiny_policy_dir), str(small_world_dir),
            str(small_index_dir), str(checkpoints), str(out)]
    worker = subprocess.Popen([*args, "--until", "3", "--hang"], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
    try:
        lines = []
        for line in worker.stdout:  # ends early (EOF) only if the worker crashed
            lines.append(line)
            if line.startswith("checkpointed 2"):
                break
        os.kill(worker.pid, signal.SIGKILL)  # during step 3 or while it waits: step 3 is lost
    finally:
        worker.kill()
        worker.wait(timeout=30)
    assert lines and lines[-1].startswith("checkpointed 2"), lines
    assert common_steps(checkpoints)[-1] in (2, 3)
    shutil.rmtree(checkpoints / "reasoner" / "step-00000003", ignore_errors=True)
    shutil.rmtree(checkpoints / "verifier" / "step-00000003", ignore_errors=True)
    for agent in ("reasoner", "verifier"):
        saved = checkpoints / agent / "step-00000002"
        assert {"optimizer.pt", "scheduler.pt", "rng.pt", "state.json", "weights"} == {
            p.name for p in saved.iterdir()}
        assert {"adapter_model.safetensors", "adapter_config.json"} <= {
            p.name for p in (saved / "weights").iterdir()}

    subprocess.run([*args, "--until", "3", "--resume"], check=True, timeout=600, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    want_metrics, want_states, _, _ = uninterrupted
    got_metrics = {int(k): v for k, v in json.loads((out / "metrics.json").read_text()).items()}
    assert got_metrics == {3: want_metrics[3]}
    from safetensors.torch import load_file

    got = load_file(out / "params.safetensors")
    assert got.keys() == want_states[3].keys()
    assert all(torch.equal(got[k], want_states[3][k]) for k in got)


def test_resume_takes_the_newest_step_both_agents_saved(tiny_policy_dir, world, tmp_path):
    records, retriever = world
    dual, generators = build(tiny_policy_dir, records)
    run(dual, generators, retriever, records, position=0, until=2, checkpoint_root=tmp_path)
    # a kill between the two agents' saves: the verifier never wrote step 2
    shutil.rmtree(tmp_path / "verifier" / "step-00000002")
    assert common_steps(tmp_path) == [1]
    fresh, _ = build(tiny_policy_dir, records)
    state = fresh.resume(tmp_path)
    assert state["step"] == 1 and fresh.step == 1
    assert fresh["reasoner"].step == fresh["verifier"].step == 1
    assert common_steps(tmp_path / "nothing") == []
    with pytest.raises(ValueError, match="keep_last"):
        dual.save(tmp_path, data_position=2, keep_last=1)


def test_separate_models_train_independently(tiny_policy_dir, world, tmp_path):
    records, retriever = world
    dual, generators = build(tiny_policy_dir, records, shared=False)
    assert dual["reasoner"].policy.model is not dual["verifier"].policy.model
    assert all(isinstance(g, HFGenerator) for g in (g.inner for g in generators.values()))
    before = trainable_state(dual)
    run(dual, generators, retriever, records, position=0, until=1, checkpoint_root=tmp_path)
    after = trainable_state(dual)
    for agent in ("reasoner", "verifier"):
        keys = [k for k in before if k.startswith(agent)]
        assert any(not torch.equal(before[k], after[k]) for k in keys)
    fresh, _ = build(tiny_policy_dir, records, shared=False)
    fresh.resume(tmp_path)
    restored = trainable_state(fresh)
    assert all(torch.equal(restored[k], after[k]) for k in after)
    exported = load_policy(str(fresh.export(tmp_path / "final")["verifier"]))
    assert all(torch.equal(a, b) for a, b in zip(
        exported.model.parameters(), dual["verifier"].policy.model.parameters()))


def test_dual_trainer_reports_agents_out_of_step(tiny_policy_dir):
    policies, tokenizer = _perturbed_shared(tiny_policy_dir)
    config = TrainConfig()
    dual = AgentTrainers.build(policies, dict.fromkeys(policies, tokenizer), dict.fromkeys(policies, config))
    dual["verifier"].step = 1
    with pytest.raises(RuntimeError, match="different steps"):
        _ = dual.step


def _adapter_gradients(model_dir, *, compiled: bool) -> dict[str, dict[str, torch.Tensor]]:
    """Each agent's adapter gradients of one summed log-prob, on seeded non-zero adapters."""
    from advrag.agents.types import Trajectory

    loaded = load_policy(str(model_dir))
    policies = shared_lora_policies(loaded.model, LoraSettings(r=4), compile_update=compiled)
    torch.manual_seed(0)
    with torch.no_grad():
        for policy in policies.values():
            for param in policy.trainable_parameters():
                param.normal_(0, 0.5)
    trajectories = []
    for text in ("Who founded Zorvath? <answer> Ada Lind </answer>", "The river <search> x"):
        trajectory = Trajectory()
        trajectory.add(text[:8], "prompt")
        trajectory.add(text[8:], "policy")
        trajectories.append(trajectory)
    batch = encode_trajectories(trajectories, loaded.tokenizer, max_len=64)
    grads = {}
    for name, policy in policies.items():
        with policy.training():
            logprobs, _ = policy.logprobs_with_grad(batch)
            logprobs.sum().backward()
        grads[name] = {n: p.grad.clone() for n, p in policy.model.named_parameters()
                       if f".{name}." in n}
    return grads


def test_compiled_updates_follow_the_active_adapter(tiny_policy_dir, cxx_compiler):
    """Shared adapters under compile_update: each agent's compiled backward gives the eager
    gradients of its own adapter (the compiled layers must not keep the other's)."""
    eager = _adapter_gradients(tiny_policy_dir, compiled=False)
    compiled = _adapter_gradients(tiny_policy_dir, compiled=True)
    for agent in ("reasoner", "verifier"):
        assert eager[agent] and eager[agent].keys() == compiled[agent].keys()
        for name, grad in eager[agent].items():  # relative to the whole tensor: fp32 sums in
            # another order moved an element near zero by 0.3 % of itself and a tiny gradient by
            # 0.04 % (AMD EPYC, AVX512-BF16); the other adapter's gradient would differ wholly
            assert (compiled[agent][name] - grad).norm() <= 1e-2 * grad.norm(), name
    some = next(iter(eager["reasoner"]))
    assert not torch.equal(eager["reasoner"][some],
                           eager["verifier"][some.replace(".reasoner.", ".verifier.")])
