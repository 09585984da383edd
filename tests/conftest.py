"""Shared fixtures: a small generated world, a tiny random policy, a real index.

Telemetry is off, every store is project- or tmp-local and Prefect's temporary servers need a
credential before anything imports Prefect, MLflow or transformers.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

for key, value in {
    "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    "DVC_NO_ANALYTICS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false", "OMP_WAIT_POLICY": "PASSIVE",
    # The suite's expectations (exact fp32 equalities, CPU tensors built in tests) are the
    # CPU's: models stay there on a machine with a GPU too (advrag.common.device).
    "ADVRAG_DEVICE": "cpu",
}.items():
    os.environ.setdefault(key, value)
# Prefect's temporary servers the suite starts require a credential, as every `advrag` command's
# do (advrag.cli.base._environment): one for the session, set before Prefect reads its settings.
_CREDENTIAL = os.environ.setdefault("PREFECT_SERVER_API_AUTH_STRING", os.urandom(24).hex())
os.environ.setdefault("PREFECT_API_AUTH_STRING", _CREDENTIAL)


_FREE_AT_START = pytest.StashKey[str]()


def _free_disk(config) -> str:
    """Free disk where the suite writes: its tmp dirs, and the repo (venv, caches)."""
    import tempfile
    places = {"tmp": Path(tempfile.gettempdir()), "repo": Path(config.rootpath)}
    return ", ".join(f"{name} {shutil.disk_usage(path).free / 2**30:.1f} GiB"
                     for name, path in places.items())


def pytest_configure(config) -> None:
    config.stash[_FREE_AT_START] = _free_disk(config)


def pytest_terminal_summary(terminalreporter, config) -> None:
    """A run that fills the disk fails as a wall of fixture errors; these lines say why. The
    suite needs about 2 GiB beyond its venv (one model conversion, the infra tools' venvs)."""
    terminalreporter.write_line(f"free disk at the start: {config.stash[_FREE_AT_START]}; "
                                f"at the end: {_free_disk(config)}")


@pytest.fixture(scope="session", autouse=True)
def prefect_servers_stopped_before_exit():
    """Stop Prefect's temporary API servers (a flow or task run outside a test harness starts
    one) at the end of the session, while pytest still owns the output: their own exit hook
    logs the stop to a stream pytest has closed by then ("--- Logging error ---")."""
    yield
    server_module = sys.modules.get("prefect.server.api.server")
    servers = getattr(getattr(server_module, "SubprocessASGIServer", None), "_instances", {})
    for server in list(servers.values()):
        server.stop()


SMALL_WORLD = dict(seed=1, n_countries=3, n_cities=8, n_people=16, n_organisations=6,
                   n_rivers=3, n_mountains=3, n_train=12, n_dev=6, n_test=8, passage_words=100)
"""The tests' world: its 100-word passages are the text the tiny model's tokenizer is trained on
(the tests of its sampling and learning were written on it), not the shipped world's 60."""


@pytest.fixture(scope="session")
def cxx_compiler() -> str:
    """The C++ compiler torch.compile builds CPU kernels with (``CXX``, else g++ — installed
    from Debian's packages when missing)."""
    from system_packages import apt_install

    from advrag.engines.local.policy import cxx_compiler_name

    compiler = cxx_compiler_name()
    return shutil.which(compiler) or apt_install("g++", lambda: shutil.which(compiler))


@pytest.fixture(scope="session")
def small_world_dir(tmp_path_factory) -> Path:
    """A small offline world on disk (corpus.jsonl, train/dev/test.jsonl)."""
    from advrag.datasets.world import WorldConfig, generate_world, write_world

    out = tmp_path_factory.mktemp("world")
    write_world(generate_world(WorldConfig(**SMALL_WORLD)), out)
    return out


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory, small_world_dir) -> Path:
    """A tiny random Llama with a BPE tokenizer trained on the small world."""
    from advrag.models.tiny import build_tiny_policy

    corpus = small_world_dir / "corpus.jsonl"
    texts = [json.loads(line)["contents"] for line in corpus.read_text().splitlines()]
    return build_tiny_policy(tmp_path_factory.mktemp("tiny-policy"), texts)


@pytest.fixture(scope="session")
def small_index_dir(tmp_path_factory, small_world_dir) -> Path:
    """A real MiniLM + FAISS flat index over the small world's corpus."""
    from advrag.retrieval.chunking import chunk_corpus_file
    from advrag.retrieval.embedding import Embedder, embed_corpus_file
    from advrag.retrieval.index import build_index_dir

    work = tmp_path_factory.mktemp("index")
    chunk_corpus_file(small_world_dir / "corpus.jsonl", work / "chunks.jsonl", 128, 16, progress=False)
    embed_corpus_file(work / "chunks.jsonl", work / "emb.npy", embedder=Embedder(progress=False),
                      progress=False)
    build_index_dir(work / "emb.npy", work / "chunks.jsonl", work / "index")
    return work / "index"
