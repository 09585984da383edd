"""Our decoding loop against transformers' ``model.generate`` on the benchmark's Search-R1 episodes.

    python bench/rollouts/bench_decoding.py [--model smollm2] [--questions 32] [--repeats 3]
                                   [--temperatures 0 1] [--generators ours ours-fp16 ...]

The same questions of the offline world's test split run as `make demo`'s benchmark runs
them (Search-R1, 2 turns and the forced answer, 80 new tokens a call, one batch of 32,
fp32 unless the CPU runs bf16 natively) through three generators on the same model: ours
(``HFGenerator`` on ``advrag.engines.local.decoding``: the shared prompt prefix
prefilled once, rows prefilled in groups of similar length, the KV cache written in
place, finished rows leaving the batch, and a turn that continues an earlier one
prefilled only past it, from the ``PrefixStore``), ours without the store
(``ours-no-store``: every turn prefills its whole conversation), ours on a copy whose
linear layers compute with fp16 weights (``ours-fp16``: ``pack_fp16_weights``, fbgemm's
kernels, fp32 activations; what ``rollout_backend: auto`` samples from on an x86 CPU
without vLLM) and the same generator calling ``model.generate`` as it did before (every
prompt prefilled whole and padded to the longest, every row decoded until the batch's
last one stops). Greedy first — where all but ``ours-fp16`` must write the same
trajectories, and the file says how many of each do — then sampled at
temperature 1 as rollouts are (``--temperatures``). They alternate in each repeat; the
report gives the median seconds per episode batch, the completion tokens and the ratios,
and for ``ours-fp16`` how far its log-probabilities lie from fp32's on its own trajectories.
Needs `dvc repro` to have built the index.
"""

from __future__ import annotations

import argparse
import copy
import functools
import statistics
import sys
import time
from pathlib import Path

import torch

from advrag.agents.search_loop import run_search_agent
from advrag.datasets.loaders import load_qa
from advrag.engines.local.generation import (
    HFGenerator,
    cut_at_stop,
    pack_fp16_weights,
    pick_dtype,
)
from advrag.models.loading import load_policy
from advrag.retrieval.retriever import load_retriever

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from inputs import offline_world
from reporting import write_report

GENERATORS = ["ours", "ours-no-store", "ours-fp16", "generate"]


class GenerateBaseline(HFGenerator):
    """``HFGenerator`` as it was: one left-padded ``model.generate`` call per micro-batch."""

    @torch.no_grad()
    def _generate_batch(self, prompts, max_new_tokens, stop):
        tok = self.tokenizer
        enc = tok(prompts, return_tensors="pt", padding=True, truncation=True,
                  max_length=self.max_prompt_tokens, add_special_tokens=False)
        enc = enc.to(self.model.device)
        sampling = self.temperature > 0
        with self.autocast():
            out = self.model.generate(
                **enc, max_new_tokens=max_new_tokens, do_sample=sampling,
                temperature=self.temperature if sampling else None,
                top_p=self.top_p if sampling else None, top_k=None,
                stop_strings=list(stop) or None, tokenizer=tok,
                pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        new_tokens = out[:, enc["input_ids"].shape[1]:]
        lengths = (new_tokens != tok.pad_token_id).sum(dim=1).tolist()
        self.last_completion_tokens.extend(lengths)
        self.generated_tokens += sum(lengths)
        texts = tok.batch_decode(new_tokens, skip_special_tokens=True)
        return [cut_at_stop(t, stop) for t in texts]


def episodes(generator: HFGenerator, questions, retriever, args) -> tuple[float, int, list[str]]:
    """Seconds, completion tokens and transcripts of one batch of Search-R1 episodes."""
    before, start = generator.generated_tokens, time.perf_counter()
    trajectories = run_search_agent(questions, generator, retriever, max_turns=args.max_turns,
                                    topk=3, max_new_tokens=args.max_new_tokens)
    seconds = time.perf_counter() - start
    return seconds, generator.generated_tokens - before, [t.text for t in trajectories]


def compare(policy, packed, questions, retriever, temperature: float, args) -> dict:
    """The generators at ``temperature``, alternating, ``args.repeats`` times each; ``packed``:
    the fp16-weight copy of ``policy.model`` (None without ``ours-fp16``)."""
    make = {"ours": functools.partial(HFGenerator, policy.model),
            "ours-no-store": functools.partial(HFGenerator, policy.model, prefix_store_bytes=0),
            "ours-fp16": functools.partial(HFGenerator, packed),
            "generate": functools.partial(GenerateBaseline, policy.model)}
    make = {name: make[name] for name in args.generators}
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name in make}
    texts: dict[str, list[str]] = {}
    for repeat in range(args.repeats):
        for name, build in make.items():
            torch.manual_seed(repeat)
            generator = build(policy.tokenizer, batch_size=args.questions,
                              temperature=temperature)
            seconds, tokens, texts[name] = episodes(generator, questions, retriever, args)
            runs[name].append((seconds, tokens))
            print(f"T={temperature} {name}: {seconds:.1f} s, {tokens} tokens", flush=True)
    seconds = {name: statistics.median(s for s, _ in r) for name, r in runs.items()}
    rates = {name: statistics.median(t / s for s, t in r) for name, r in runs.items()}
    others = [name for name in make if name != "ours"]
    result = {"runs": {name: [{"seconds": s, "tokens": t} for s, t in r]
                       for name, r in runs.items()},
              "median_seconds": seconds, "median_tokens_per_s": rates,
              "seconds_over_ours": {name: seconds[name] / seconds["ours"] for name in others},
              "tokens_per_s_over_ours": {name: rates[name] / rates["ours"] for name in others}}
    if temperature == 0:
        result["identical_greedy_trajectories_to_ours"] = {
            other: sum(a == b for a, b in zip(texts["ours"], texts[other], strict=True))
            for other in others}
    if packed is not None:
        result["fp16_logprob_gap"] = logprob_gap(policy.model, packed, policy.tokenizer,
                                                 texts["ours-fp16"])
    return result


@torch.no_grad()
def logprob_gap(exact, packed, tokenizer, texts: list[str]) -> dict[str, float]:
    """How far the fp16-weight copy's next-token log-probabilities lie from the fp32 model's
    on ``texts`` (the copy's own trajectories): over every token after the first, the largest
    and mean absolute difference of the token's log-probability, and the share of positions
    whose most likely next token differs."""
    gaps, flips, positions = [], 0, 0
    for text in texts:
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        fp32, fp16 = (m(input_ids=ids).logits[0, :-1].float().log_softmax(-1)
                      for m in (exact, packed))
        chosen = ids[0, 1:, None]
        gaps.append((fp32.gather(-1, chosen) - fp16.gather(-1, chosen)).abs().flatten())
        flips += int((fp32.argmax(-1) != fp16.argmax(-1)).sum())
        positions += chosen.shape[0]
    gap = torch.cat(gaps)
    return {"tokens": positions, "max_abs": float(gap.max()), "mean_abs": float(gap.mean()),
            "argmax_differs_share": flips / positions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=80)
    parser.add_argument("--generators", nargs="+", default=GENERATORS, choices=GENERATORS,
                        help="which to compare with ours (always run)")
    parser.add_argument("--index", type=Path, default=Path("processed/index"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/decoding.json"))
    args = parser.parse_args()
    offline_world()
    args.generators = ["ours", *(g for g in args.generators if g != "ours")]

    dtype = pick_dtype("auto")
    policy = load_policy(args.model, dtype=dtype)
    packed = pack_fp16_weights(copy.deepcopy(policy.model)) if "ours-fp16" in args.generators \
        else None
    retriever = load_retriever(args.index)
    questions = [r.question for r in load_qa(Path("data/world/test.jsonl"),
                                             limit=args.questions)]
    report = {"model": args.model, "dtype": dtype, "device": str(policy.model.device),
              "questions": len(questions), "max_turns": args.max_turns,
              "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
              "threads": torch.get_num_threads(),
              "temperatures": {str(t): compare(policy, packed, questions, retriever, t, args)
                               for t in args.temperatures}}
    write_report(args.out, report)


if __name__ == "__main__":
    main()
