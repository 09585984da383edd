"""Two policies trained side by side (ARR's reasoner and verifier) with the local engine.

Two layouts:

- shared (the CPU default): ONE base model carrying one LoRA adapter per
  agent (peft multi-adapter). ``AdapterPolicy`` is a ``TrainablePolicy`` view
  that activates its own adapter before every forward pass and lists only
  that adapter's weights as trainable; its reference is the base with all
  adapters disabled. One copy of the base weights is held in memory.
- separate: one ``TrainablePolicy`` per agent on its own model (LoRA or full).

Either way each agent gets its own ``LocalTrainer`` — its own AdamW state, lr
schedule and metrics — and ``AgentTrainers`` checkpoints each under
``<root>/<agent>/step-<n>`` (``checkpoint.py`` layout, adapter-only weights
for a shared base). A kill between the two agents' saves leaves one agent a
step ahead; ``AgentTrainers.resume`` loads the newest step that *both* have, so
it needs ``keep_last >= 2``.

Sampling must use the agent's own adapter: ``agent_generators`` gives each
agent a copy with only its adapter merged (a vLLM engine, or a transformers
copy in the policy's compute dtype), pushed after its updates.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from advrag.common.fileio import atomic_dir
from advrag.common.types import TextGenerator
from advrag.engines.generators import make_generator
from advrag.engines.local.checkpoint import (
    PREFIX,
    CorruptCheckpoint,
    checkpoint_step,
    list_checkpoints,
)
from advrag.engines.local.policy import (
    ADAPTER_FILE,
    LoraSettings,
    TrainablePolicy,
    _native_cpu_bf16,
    check_compilable,
    lora_config,
    wrap_lora,
)
from advrag.engines.local.tokenize import Batch
from advrag.engines.local.trainer import LocalTrainer, TrainConfig

AGENTS = ("reasoner", "verifier")


class AdapterPolicy(TrainablePolicy):
    """One named LoRA adapter of a shared peft model, seen as a ``TrainablePolicy``."""

    def __init__(self, peft_model: nn.Module, name: str, *, bf16: bool = True,
                 cpu_bf16: bool = False, compile_update: bool = False, amx_attention: bool = True):
        """View adapter ``name`` of ``peft_model`` (built by ``shared_lora_policies``)."""
        if name not in peft_model.peft_config:
            raise ValueError(f"the model has no adapter {name!r}; it has {list(peft_model.peft_config)}")
        self.model = peft_model
        self.name = name
        self.is_lora = True
        self._reference = None
        self.bf16 = bf16
        self.cpu_bf16 = cpu_bf16 and _native_cpu_bf16()
        self.compile_update = compile_update
        self.amx_attention = amx_attention
        self._compiled_layers = None

    def activate(self) -> None:
        """Make this adapter the one the forward pass uses (and the one with gradients)."""
        self.model.set_adapter(self.name)

    def trainable_parameters(self) -> list[nn.Parameter]:
        """This adapter's weights only (peft names them ``….lora_A.<name>.weight``)."""
        tag = f".{self.name}."
        return [p for n, p in self.model.named_parameters() if tag in n]

    @contextmanager
    def training(self) -> Iterator[None]:
        """``train()`` mode with this adapter active, ``eval()`` again afterwards."""
        self.activate()
        with super().training():
            yield

    def logprobs(self, batch: Batch, *, micro_batch_size: int,
                 with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
        """Log-probs under this adapter, without gradients (see ``TrainablePolicy``)."""
        self.activate()
        return super().logprobs(batch, micro_batch_size=micro_batch_size, with_entropy=with_entropy)

    def logprobs_with_grad(
        self, batch: Batch, *, with_entropy: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Differentiable log-probs (and entropy if asked) under this adapter."""
        self.activate()
        return super().logprobs_with_grad(batch, with_entropy=with_entropy)

    def save_weights(self, directory: Path) -> None:
        """Write this adapter alone as a peft adapter directory (config + safetensors)."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = get_peft_model_state_dict(self.model, adapter_name=self.name)
        save_file({k: v.contiguous() for k, v in state.items()}, directory / ADAPTER_FILE)
        self.model.peft_config[self.name].save_pretrained(directory)

    def load_weights(self, directory: Path) -> None:
        """Load an adapter written by ``save_weights`` into this adapter, exactly."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        state = load_file(Path(directory) / ADAPTER_FILE)
        result = set_peft_model_state_dict(self.model, state, adapter_name=self.name)
        if result.unexpected_keys:
            raise ValueError(f"adapter in {directory} has unknown keys {result.unexpected_keys}")


def shared_lora_policies(model: nn.Module, lora: LoraSettings, *, names: Sequence[str] = AGENTS,
                         cpu_bf16: bool = False, compile_update: bool = False,
                         amx_attention: bool = True
                         ) -> dict[str, AdapterPolicy]:
    """One LoRA adapter per name on ``model`` (wrapped in place); a policy view for each."""
    if compile_update:
        check_compilable(model)  # fails now, before the model is wrapped

    peft_model = wrap_lora(model, lora, adapter_name=names[0])
    for name in names[1:]:
        peft_model.add_adapter(name, lora_config(lora))
    peft_model.eval()
    return {name: AdapterPolicy(peft_model, name, cpu_bf16=cpu_bf16, compile_update=compile_update,
                                amx_attention=amx_attention) for name in names}


def separate_policies(models: Mapping[str, nn.Module], lora: LoraSettings | None, *,
                      keep_reference: bool = True, cpu_bf16: bool = False,
                      compile_update: bool = False,
                      amx_attention: bool = True) -> dict[str, TrainablePolicy]:
    """An independent ``TrainablePolicy`` (full or LoRA) on each agent's own model."""
    return {
        name: TrainablePolicy(model, lora=lora, keep_reference=keep_reference, cpu_bf16=cpu_bf16,
                              compile_update=compile_update, amx_attention=amx_attention)
        for name, model in models.items()
    }


def agent_generators(policies: Mapping[str, TrainablePolicy], tokenizers: Mapping[str, Any], *,
                     temperature: float, batch_size: int = 64, backend: str = "hf",
                     model_dirs: Mapping[str, str | Path] | None = None, **engine
                     ) -> dict[str, TextGenerator]:
    """A sampling generator per agent on its policy's current weights (see ``agent_generator``);
    ``model_dirs``: each agent's base checkpoint directory (what a vLLM engine starts from);
    ``engine``: vLLM engine settings (``make_generator``'s)."""
    return {name: agent_generator(policy, tokenizers[name], temperature=temperature,
                                  batch_size=batch_size, backend=backend,
                                  model_dir=(model_dirs or {}).get(name, ""), **engine)
            for name, policy in policies.items()}


def agent_generator(policy: TrainablePolicy, tokenizer, *, temperature: float,
                    batch_size: int, backend: str = "hf", model_dir: str | Path = "",
                    **engine) -> TextGenerator:
    """One agent's sampler, in the dtype its policy computes in, on ``backend``
    (``make_generator``'s; vLLM needs ``model_dir``, the base checkpoint).

    vLLM: an engine of this agent's own, its adapter merged into every push.
    transformers: for a LoRA agent (every agent on a shared base) or under bf16
    autocast over fp32 weights, a copy in the compute dtype with this agent's
    adapter merged (``SnapshotGenerator``; ``push_weights`` after each of its
    updates); a plain fp32 model samples from its live weights.
    """
    adapter = policy.name if isinstance(policy, AdapterPolicy) else None
    return make_generator(backend, policy.model, tokenizer, model_dir, adapter=adapter,
                          temperature=temperature, batch_size=batch_size,
                          autocast=policy.autocast, **engine)


def common_steps(root: str | Path, names: Sequence[str] = AGENTS) -> list[int]:
    """The checkpoint steps every agent has (see ``AgentTrainers.directory``), oldest first."""
    steps = [{checkpoint_step(p) for p in list_checkpoints(agent_dir(root, name, names))}
             for name in names]
    return sorted(set.intersection(*steps)) if steps else []


def agent_dir(root: str | Path, name: str, names: Sequence[str]) -> Path:
    """Where agent ``name`` keeps its checkpoints: ``root`` for a lone agent, else ``root/name``."""
    return Path(root) if len(names) == 1 else Path(root) / name


class AgentTrainers(Mapping[str, LocalTrainer]):
    """One ``LocalTrainer`` per agent (a read-only mapping), checkpointed, resumed and exported together.

    A recipe with one agent (GRPO) keeps its checkpoints in ``root`` itself; with
    several (ARR), each agent under ``root/<agent>``.
    """

    def __init__(self, trainers: Mapping[str, LocalTrainer]):
        self.trainers = dict(trainers)

    @classmethod
    def build(cls, policies: Mapping[str, TrainablePolicy], tokenizers: Mapping[str, Any],
              configs: Mapping[str, TrainConfig]) -> AgentTrainers:
        """A trainer (optimizer, schedule) per agent; each construction seeds the RNGs."""
        return cls({name: LocalTrainer(policies[name], tokenizers[name], configs[name])
                    for name in policies})

    def __getitem__(self, name: str) -> LocalTrainer:
        return self.trainers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.trainers)

    def __len__(self) -> int:
        return len(self.trainers)

    @property
    def step(self) -> int:
        """Updates done so far (the same for every agent)."""
        steps = {t.step for t in self.trainers.values()}
        if len(steps) != 1:
            raise RuntimeError(f"the agents are at different steps {steps}")
        return steps.pop()

    def directory(self, root: str | Path, name: str) -> Path:
        """Checkpoint directory of agent ``name`` under ``root``."""
        return agent_dir(root, name, list(self.trainers))

    def save(self, root: str | Path, *, data_position: int,
             extra: dict[str, Any] | None = None, keep_last: int = 3) -> dict[str, Path]:
        """Checkpoint every agent; returns each checkpoint directory."""
        if keep_last < 2 and len(self.trainers) > 1:
            raise ValueError("keep_last must be >= 2: a kill between the agents' saves "
                             "must leave a step that both agents still have")
        return {name: trainer.save(self.directory(root, name), data_position=data_position,
                                   extra=extra, keep_last=keep_last)
                for name, trainer in self.trainers.items()}

    def resume(self, root: str | Path) -> dict[str, Any] | None:
        """Load the newest step every agent saved; returns its ``state.json`` (None: nothing).

        A step one of whose checkpoints cannot be read (``CorruptCheckpoint``) is passed
        over, saying so, for the one before it (each load overwrites every agent's state
        whole); when none can be read, ``CorruptCheckpoint`` names them all.
        """
        steps = common_steps(root, list(self.trainers))
        failures = []
        for step in reversed(steps):
            try:
                states = [trainer.resume(self.directory(root, name) / f"{PREFIX}{step:08d}")
                          for name, trainer in self.trainers.items()]
            except CorruptCheckpoint as error:
                failures.append(str(error))
                print(f"{error}; resuming from the checkpoint before it", flush=True)
                continue
            return states[-1]
        if failures:
            raise CorruptCheckpoint("no checkpoint under {} can be read back: {}; delete them "
                                    "to start afresh".format(root, " | ".join(failures)))
        return None

    def export(self, root: str | Path) -> dict[str, Path]:
        """Every agent as a plain transformers checkpoint under ``root/<agent>``."""
        return {name: export_policy(t.policy, t.tokenizer, Path(root) / name)
                for name, t in self.trainers.items()}


def export_policy(policy: TrainablePolicy, tokenizer, out_dir: Path,
                  files: Mapping[str, str] | None = None) -> Path:
    """A plain transformers checkpoint of one agent: its LoRA merged into a copy of the base.

    The training model is left as it is (the merge runs on a deep copy). ``files``
    (name → text) are written beside the weights; the directory appears atomically.
    """
    model = copy.deepcopy(policy.model)
    if isinstance(policy, AdapterPolicy):
        model = model.merge_and_unload(adapter_names=[policy.name])
    elif policy.is_lora:
        model = model.merge_and_unload()
    with atomic_dir(Path(out_dir)) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for name, text in (files or {}).items():
            (tmp / name).write_text(text)
    return Path(out_dir)
