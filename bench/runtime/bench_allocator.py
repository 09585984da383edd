"""tcmalloc against the C library's malloc on the update and sampling: what the preload buys.

    python bench/runtime/bench_allocator.py [--rounds 2] [--repeats 3] [--workloads ...]

An allocator is fixed when a process starts, so each measurement is a child
process (``bench/runtime/bench_omp_wait.py``'s workloads: short-row updates, full and
LoRA; a LoRA update of Search-R1-shaped rollouts; transformers sampling), run
with tcmalloc in ``LD_PRELOAD`` and without it, alternating, ``--rounds``
times — the choice ``advrag`` makes itself (``advrag/common/allocator.py``).
Reports each child's median seconds, its peak resident memory and the
allocator it ran on, the medians over rounds, and system / tcmalloc.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench_omp_wait import alternating_parser, child_run

from advrag.common.allocator import INSTALL_HINT, find_tcmalloc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import write_report


def allocator_envs(tcmalloc: str) -> dict[str, dict[str, str]]:
    """The two environments: tcmalloc preloaded, and nothing preloaded (the C library's malloc)."""
    plain = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ADVRAG_ALLOCATOR")}
    return {"tcmalloc": plain | {"LD_PRELOAD": tcmalloc}, "system": plain}


def main() -> None:
    args = alternating_parser(__doc__, Path("bench/results/allocator.json")).parse_args()
    offline_world()
    tcmalloc = find_tcmalloc()
    if tcmalloc is None:
        raise SystemExit(f"no tcmalloc library to compare against: {INSTALL_HINT}")
    envs, rows = allocator_envs(tcmalloc), {}
    with tempfile.TemporaryDirectory() as tmp:
        for workload in args.workloads:
            runs: dict[str, list[dict]] = {name: [] for name in envs}
            for _ in range(args.rounds):
                for name, env in envs.items():
                    run = child_run(workload, env, args.repeats, Path(tmp) / "child.json")
                    if run["allocator"] != name:
                        raise SystemExit(f"the {name} child ran on {run['allocator']}")
                    runs[name].append(run)
                    print(f"{workload} {name}: {run['seconds']:.2f} s, "
                          f"peak {run['peak_rss_gib']:.2f} GiB", flush=True)
            median = {name: {key: statistics.median(r[key] for r in runs[name])
                             for key in ("seconds", "peak_rss_gib")} for name in envs}
            rows[workload] = {"runs": runs, "median": median,
                              "system_over_tcmalloc_s": median["system"]["seconds"]
                              / median["tcmalloc"]["seconds"]}
    write_report(args.out, {"bench": "bench/runtime/bench_allocator.py", "tcmalloc": tcmalloc,
                            "repeats": args.repeats, "rounds": args.rounds, "rows": rows})


if __name__ == "__main__":
    main()
