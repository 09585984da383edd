"""How a sampled token is drawn: one uniform number a row against ``torch.multinomial``.

    python bench/rollouts/bench_sampling.py [--repeats 9] [--backend hf|hf-fp16]
                                            [--out bench/results/sampling.json]

``decoding.choose_tokens`` used to draw each token with ``torch.multinomial``, which draws
an exponential number for every vocabulary entry; ``decoding.draw_from`` searches the
cumulative probabilities with one uniform number a row. Timed two ways, alternating in one
process (medians): the draw alone on 16 rows of SmolLM2's vocabulary, and whole decodes of
``bench_trl.py``'s 16 prompts (4 train questions × 4, chat template) forced to 32 new tokens
each (no end of sequence, so both ways do the same steps) on the rollout back-end's model.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import write_report

ROOT = Path(__file__).resolve().parents[2]
ROWS, NEW_TOKENS = 16, 32


def multinomial(probs: torch.Tensor) -> torch.Tensor:
    """The draw before: one exponential number per vocabulary entry."""
    return torch.multinomial(probs, num_samples=1).squeeze(-1)


def alternate(ways: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each way, the ways called in turn ``repeats`` times after a warm-up."""
    times = {name: [] for name in ways}
    for fn in ways.values():
        fn()
    for _ in range(repeats):
        for name, fn in ways.items():
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--backend", choices=["hf", "hf-fp16"],
                        help="the model decoding samples from (default: hf-fp16 where torch has "
                             "fbgemm's fp16 kernels, else hf)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/sampling.json"))
    args = parser.parse_args()
    offline_world()

    from advrag.datasets.loaders import load_qa
    from advrag.engines.generators import make_generator
    from advrag.engines.local import decoding
    from advrag.engines.local.generation import fp16_weights_supported
    from advrag.models.loading import load_policy

    args.backend = args.backend or ("hf-fp16" if fp16_weights_supported() else "hf")

    loaded = load_policy("smollm2", dtype="float32")
    tokenizer = loaded.tokenizer
    generator = make_generator(args.backend, loaded.model, tokenizer, loaded.source,
                               temperature=1.0, batch_size=ROWS)
    questions = [r.question for r in load_qa(ROOT / "data/world/train.jsonl")][:ROWS // 4]
    prompts = tokenizer([generator.chat_prompt(q) for q in questions for _ in range(4)],
                        add_special_tokens=False)["input_ids"]
    probs = torch.randn(ROWS, len(tokenizer)).mul(3).softmax(dim=-1)
    draws = alternate({"multinomial": lambda: multinomial(probs),
                       "draw_from": lambda: decoding.draw_from(probs)}, args.repeats * 5)

    current = decoding.draw_from

    def decode_with(draw):
        def run():
            decoding.draw_from = draw
            try:
                decoding.decode(generator.model, prompts, max_new_tokens=NEW_TOKENS,
                                pad_id=tokenizer.eos_token_id, eos_ids={tokenizer.eos_token_id},
                                temperature=1.0, ignore_eos=True)
            finally:
                decoding.draw_from = current
        return run

    decodes = alternate({"multinomial": decode_with(multinomial),
                         "draw_from": decode_with(current)}, args.repeats)
    write_report(args.out, {
        "bench": "bench/rollouts/bench_sampling.py",
        "command": f"python bench/rollouts/bench_sampling.py --repeats {args.repeats} "
                   f"--backend {args.backend} --out {args.out}",
        "backend": args.backend,
        "work": f"{ROWS} rows × {len(tokenizer)} vocabulary entries a draw; decodes of {ROWS} "
                f"prompts × {NEW_TOKENS} new tokens (end of sequence banned)",
        "draw_ms": {name: s * 1000 for name, s in draws.items()},
        "decode_s": decodes,
        "decode_speedup": decodes["multinomial"] / decodes["draw_from"],
        "torch": torch.__version__,
    })


if __name__ == "__main__":
    main()
