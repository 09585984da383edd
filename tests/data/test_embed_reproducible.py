"""The DVC `embed` stage writes the same bytes whichever kernels a CPU would pick, and the
committed `dvc.lock` was made from the sources in the tree: so a fresh clone's `make demo`
rewrites `dvc.lock` as it is committed, on any x86-64 CPU with AVX2.

A different CPU is played here by what it changes in this process: the kernels torch and
MKL would pick (their own switches for it, no wider than this CPU's own) and the number of
threads.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from advrag.retrieval.embedding import REPRODUCIBLE_CPU_KERNELS, pin_cpu_kernels

ROOT = Path(__file__).resolve().parents[2]
def widest_capability() -> str:
    """The widest kernels torch would pick on this CPU (``avx512`` or ``avx2``; ``default``
    without either): the other CPU below may only ask for kernels this one can run — an
    AVX2-only CPU cannot play an AVX-512 one (torch's kernels there fail to start)."""
    import torch

    return torch.backends.cpu.get_cpu_capability().lower()


OTHER_CPUS = (
    {"ATEN_CPU_CAPABILITY": widest_capability(), "OMP_NUM_THREADS": "2"},
    {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "OMP_NUM_THREADS": "3"},
)
UNPINNED_EMBED = ("from advrag.retrieval.embedding import Embedder, embed_corpus_file; import sys; "
                  "embed_corpus_file(sys.argv[1], sys.argv[2], Embedder(device='cpu', "
                  "progress=False), progress=False)")


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture()
def chunks(tmp_path) -> Path:
    """Twelve short passages in the chunk file layout."""
    path = tmp_path / "chunks.jsonl"
    rows = [{"id": str(i), "contents": f"Passage {i}: the river Ovel{i} runs {3 * i} km north "
             f"past the town of Brisca{i}, founded in {1400 + 7 * i}."} for i in range(12)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def embed_as(cpu: dict[str, str], chunks: Path, out: Path, pinned: bool) -> Path:
    """Embed ``chunks`` in a new process whose environment plays ``cpu``: with the DVC stage's
    command (``pinned``) or with an Embedder left to pick its kernels."""
    env = {k: v for k, v in os.environ.items() if k not in REPRODUCIBLE_CPU_KERNELS} | cpu
    command = ([sys.executable, "-m", "advrag.cli", "embed", str(chunks), str(out)] if pinned
               else [sys.executable, "-c", UNPINNED_EMBED, str(chunks), str(out)])
    subprocess.run(command, env=env, check=True, capture_output=True, cwd=ROOT)
    return out


@pytest.mark.slow
def test_the_embed_stage_writes_the_same_bytes_on_every_cpu(chunks, tmp_path):
    first, second = (embed_as(cpu, chunks, tmp_path / f"{i}.npy", pinned=True)
                     for i, cpu in enumerate(OTHER_CPUS))
    assert md5(first) == md5(second)


@pytest.mark.slow
def test_left_to_pick_its_kernels_the_embedder_writes_other_bytes_on_those_cpus(chunks, tmp_path):
    """What the test above would see without the pins (so it can fail): needs a CPU with AVX2,
    where torch's AVX2 kernels and its scalar ones round differently."""
    import torch

    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        pytest.skip("this CPU has no AVX2: both processes run torch's scalar kernels")
    first, second = (embed_as(cpu, chunks, tmp_path / f"{i}.npy", pinned=False)
                     for i, cpu in enumerate(OTHER_CPUS))
    assert md5(first) != md5(second)


def test_pinning_after_torch_is_imported_fails_and_changes_nothing(monkeypatch):
    import torch  # noqa: F401  (the situation under test)

    monkeypatch.delenv("MKL_CBWR", raising=False)
    with pytest.raises(RuntimeError, match="before torch is imported"):
        pin_cpu_kernels()
    assert "MKL_CBWR" not in os.environ


def test_the_committed_lock_was_made_from_the_sources_in_the_tree():
    """Every source file a stage of dvc.lock depends on has the md5 the lock records: edit
    one (say advrag/retrieval/embedding.py) and `dvc repro` + commit dvc.lock with it, or a
    fresh clone's `make demo` leaves dvc.lock modified."""
    stages = yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]
    sources = {dep["path"]: dep["md5"] for stage in stages.values() for dep in stage["deps"]
               if dep["path"].startswith("advrag/")}
    assert sources, "dvc.lock names no source file"
    assert {path: md5(ROOT / path) for path in sources} == sources


PINNED_EMBED = ("from advrag.retrieval.embedding import pin_cpu_kernels; pin_cpu_kernels(); "
                "from advrag.retrieval.embedding import Embedder, embed_corpus_file; import sys; "
                "embed_corpus_file(sys.argv[1], sys.argv[2], Embedder(device='cpu', "
                "progress=False), progress=False, workers=int(sys.argv[3]))")


@pytest.mark.slow
def test_the_pinned_stage_writes_the_same_bytes_with_any_number_of_workers(tmp_path):
    """The DVC stage embeds its pieces in as many threads as the CPU has cores: three pieces
    (600 passages, pieces of 256) in one thread or in two give the same file."""
    path = tmp_path / "chunks.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "contents": f"Town {i}\nTown {i} lies "
                                        f"{i % 97} km from the sea, founded in {1000 + i}."})
                            + "\n" for i in range(600)))
    env = {k: v for k, v in os.environ.items() if k not in REPRODUCIBLE_CPU_KERNELS}
    outs = []
    for workers in (1, 2):
        out = tmp_path / f"{workers}.npy"
        subprocess.run([sys.executable, "-c", PINNED_EMBED, str(path), str(out), str(workers)],
                       env=env, check=True, capture_output=True, cwd=ROOT)
        outs.append(md5(out))
    assert outs[0] == outs[1]
