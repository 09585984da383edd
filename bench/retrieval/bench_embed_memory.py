"""Peak memory of `advrag embed` as the corpus grows: bounded by the shard, not the corpus.

    python bench/retrieval/bench_embed_memory.py [--sizes 2048 8192] [--shard-size 1024]

For each size it writes a corpus of that many passages (the offline world's passages,
repeated with a numbered first line so no two are the same), then runs the DVC stage's
command, `advrag embed` on the CPU with its pinned kernels, in a fresh process, and reads that
process's peak resident set. A corpus four times larger should leave the peak where it was,
while the embeddings file grows four times: memory holds the model and one shard, never the
corpus. Writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import child_json, write_report

MEASURE = """
import json, resource, subprocess, sys, time
started = time.perf_counter()
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
print(json.dumps({"wall_s": time.perf_counter() - started,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def write_corpus(world: Path, n: int, out: Path) -> Path:
    """``n`` distinct passages made from the world's, as a chunks file."""
    passages = [json.loads(line)["contents"] for line in
                (world / "corpus.jsonl").read_text().splitlines()]
    with out.open("w") as handle:
        for i in range(n):
            text = f"Copy {i}\n{passages[i % len(passages)]}"
            handle.write(json.dumps({"id": f"c{i}", "contents": text}) + "\n")
    return out


def measure(chunks: Path, shard_size: int, out: Path) -> dict:
    """`advrag embed` in a fresh process: its wall time and peak resident set."""
    advrag = Path(sys.executable).with_name("advrag")
    return child_json([sys.executable, "-c", MEASURE, str(advrag), "embed", str(chunks),
                       str(out), "--shard-size", str(shard_size)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--shard-size", type=int, default=1024)
    parser.add_argument("--out", type=Path, default=Path("bench/results/embed_memory.json"))
    args = parser.parse_args()
    world = offline_world()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            chunks = write_corpus(world, n, Path(tmp) / f"chunks-{n}.jsonl")
            embeddings = Path(tmp) / f"embeddings-{n}.npy"
            started = time.perf_counter()
            result = measure(chunks, args.shard_size, embeddings)
            runs.append({"passages": n, "shard_size": args.shard_size,
                         "corpus_mib": chunks.stat().st_size / 2**20,
                         "embeddings_mib": embeddings.stat().st_size / 2**20,
                         "wall_s": result["wall_s"], "peak_rss_mib": result["peak_rss_mib"],
                         "measured_s": time.perf_counter() - started})
            print(json.dumps(runs[-1]), flush=True)
    write_report(args.out, {"runs": runs})


if __name__ == "__main__":
    main()
