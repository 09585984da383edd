"""Where a benchmark's numbers go (one JSON file under bench/results/, echoed), and the peak they
are measured against."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def question_group(metadata: dict) -> str:
    """The row label of per-type tables: the world question's type and hop count."""
    return f"{metadata.get('type')}, {metadata.get('hops')} hops"


def openmp_wait_policy() -> str:
    """How idle OpenMP threads wait in this run: ``OMP_WAIT_POLICY`` or libgomp's default."""
    return os.environ.get("OMP_WAIT_POLICY") or "unset (libgomp default: spin briefly, then sleep)"


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name, core count and the vector/matrix extensions that pick torch's
    kernels (results from an AVX2, an AVX512_BF16 and an AMX CPU differ several-fold)."""
    text = cpuinfo.read_text() if cpuinfo.exists() else ""
    fields: dict[str, str] = {}
    for line in text.splitlines():  # the first processor's entry of each field
        key, colon, value = line.partition(":")
        if colon:
            fields.setdefault(key.strip(), value.strip())
    name, flags = fields.get("model name", "unknown CPU"), set(fields.get("flags", "").split())
    extensions = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{name} ({os.cpu_count()} cores; {', '.join(extensions) or 'no AVX2'})"


def write_report(path: Path, report: dict) -> None:
    """Add the CPU, the 1-minute load average (shared cores slow every run), the OpenMP wait
    policy and the allocator (tcmalloc or the C library's), write ``path``, print it."""
    from advrag.common.allocator import allocator_in_use

    report = report | {"cpu": cpu_description(), "load_average_1m_at_end": os.getloadavg()[0],
                       "omp_wait_policy": openmp_wait_policy(), "allocator": allocator_in_use()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def median_seconds(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of ``repeats`` calls of ``fn`` and the last call's result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def matmul_peak_gflops(dtype: str = "float32", n: int = 2048, repeats: int = 5) -> float:
    """Median GFLOP/s of an n×n matmul (2·n³ FLOPs) in ``dtype``, measured in this process."""
    import torch

    a, b = (torch.randn(n, n, dtype=getattr(torch, dtype)) for _ in range(2))
    a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


def child_json(command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None):
    """Run ``command`` (a benchmark re-running itself for one mode, in a fresh process so modes
    share no allocator, thread pool or compiled graph; in ``cwd`` when given) and return the last
    JSON object or list it printed on a line of its own; its other output (library logs) is
    passed over. Its output goes to a file, not a pipe: a server the child started (Prefect's)
    holds the child's stdout open, so with a pipe a child killed (out of memory) would leave
    this waiting for an end of file that never comes, instead of raising."""
    with tempfile.TemporaryFile("w+") as out:
        subprocess.run(command, check=True, stdout=out, text=True, env=env, cwd=cwd)
        out.seek(0)
        lines = out.read().splitlines()
    return json.loads([line for line in lines if line.startswith(("{", "["))][-1])
