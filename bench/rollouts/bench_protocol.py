"""How the tag parser's time grows with the length of malformed model output.

    python bench/rollouts/bench_protocol.py [--repeats 5]

A model can emit anything; the parser (``agents.protocol.parse_step``) must stay linear in
the text's length on the shapes that make naive tag parsers quadratic or recursive: long
text before a tag, thousands of ``<`` with no name, unclosed tags, stray closes. Each shape is
parsed at three sizes (n, 2n, 4n); the median of ``--repeats`` runs is reported with the
growth from n to 4n (4.0 is linear). Writes bench/results/protocol.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from reporting import write_report

SHAPES = {  # shape → text of n units
    "text, then an answer": lambda n: "x" * (50 * n) + "<answer>y</answer>",
    "'<' with no name": lambda n: "<" * (10 * n),
    "unclosed tags": lambda n: "<answer>x" * n,
    "opened, closed once": lambda n: "<think>" * n + "</think>",
    "stray closes": lambda n: "</search>" * n,
    "'<' then spaces": lambda n: "<" + " " * (10 * n),
}
SIZES = (20_000, 40_000, 80_000)


def seconds(text: str, repeats: int) -> float:
    """Median seconds of ``parse_step`` on ``text``."""
    from advrag.agents.protocol import parse_step
    from advrag.agents.search_loop import ACTIONS

    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        parse_step(text, ACTIONS)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/results/protocol.json"))
    args = parser.parse_args()
    shapes = {}
    for name, make in SHAPES.items():
        runs = [{"chars": len(text), "seconds": seconds(text, args.repeats)}
                for text in (make(n) for n in SIZES)]
        shapes[name] = {"runs": runs, "growth_n_to_4n": runs[-1]["seconds"] / runs[0]["seconds"]}
        print(f"{name}: {shapes[name]}", flush=True)
    write_report(args.out, {"shapes": shapes, "repeats": args.repeats, "sizes": list(SIZES)})


if __name__ == "__main__":
    main()
