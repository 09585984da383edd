"""The token arithmetic of every world-training config: what its episodes can take, against
what its budgets hold, and how long the world's demonstrations are.

    python bench/learning/bench_budgets.py [--passage-words 40 60 100]

For each shipped recipe config that trains on the world (``configs/*.yaml`` with a recipe), the
bound ``agents.budgets`` refuses a budget below — the longest prompt, every generation at
``max_new_tokens``, every search the ``topk`` longest passages, the hints — on the world the
pipeline builds (seed 13, 60-word passages), counted in SmolLM2's tokenizer. Then, for each
passage length asked, the lengths of the grounded demonstrations by searches (each hop's query
retrieving its subject's passages first: the demonstrations' own grounding rule keeps only
those). Nothing
is trained: a few seconds. Writes ``bench/results/budgets.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from advrag.common.types import Passage
from advrag.curation.demonstrations import build_demonstrations
from advrag.datasets.world import WorldConfig, generate_world
from advrag.engines.local.generation import ChatPrompting
from advrag.engines.local.tokenize import token_counter, token_lengths
from advrag.recipes import recipe_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared modules
from reporting import write_report

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ("train.yaml", "rex-rag.yaml", "rex-rag-probe-turns.yaml", "gar.yaml", "gar-demo.yaml",
           "ur2.yaml", "arr.yaml")


class TitleRetriever:
    """Each hop's query (``"<subject> <relation>"``) finds its subject's passages first (a
    demonstration is kept only when each hop's passage came back, so its length is this one's)."""

    def __init__(self, passages: list[Passage]):
        self.passages = passages

    def search(self, queries, k):
        return [([p for p in self.passages if q.startswith(p.title + " ")] + self.passages)[:k]
                for q in queries]


def world_passages(words: int) -> tuple[list[Passage], list]:
    world = generate_world(WorldConfig(seed=13, passage_words=words))
    return [Passage(p["id"], p["contents"]) for p in world.passages], world.splits["train"]


def config_rows(count, chat_prompt) -> list[dict]:
    """Each config's budgets against its episode's bound, term by term."""
    passages, questions = world_passages(WorldConfig().passage_words)
    rows = []
    for name in CONFIGS:
        recipe = recipe_for(ROOT / "configs" / name)
        for budget, bound in recipe.budget_bounds(count, chat_prompt, questions, passages):
            rows.append({"config": name, "setting": budget.setting, "budget": budget.tokens,
                         "max_turns": recipe.config.max_turns, "topk": recipe.config.topk,
                         "prompt": bound.prompt, "generations": bound.generations,
                         "max_new_tokens": bound.max_new_tokens, "searches": bound.searches,
                         "information": bound.information, "hints": bound.extra,
                         "bound": bound.tokens})
    return rows


def demonstration_rows(tokenizer, chat_prompt, words: int) -> list[dict]:
    """Demonstration lengths by searches on the world of ``words``-word passages (topk 3)."""
    passages, questions = world_passages(words)
    demos = build_demonstrations(questions, TitleRetriever(passages), chat_prompt, topk=3,
                                 max_turns=4)
    by_searches = defaultdict(list)
    for demo, n in zip(demos, token_lengths(demos, tokenizer), strict=True):
        by_searches[demo.n_searches].append(n)
    return [{"passage_words": words, "searches": s, "demonstrations": len(v),
             "median": statistics.median(v), "max": max(v)} for s, v in sorted(by_searches.items())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passage-words", type=int, nargs="+", default=[40, 60, 100])
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/budgets.json")
    args = parser.parse_args()
    from advrag.models.loading import load_tokenizer

    tokenizer = load_tokenizer("smollm2")
    chat_prompt, count = ChatPrompting(tokenizer).chat_prompt, token_counter(tokenizer)

    write_report(args.out, {
        "command": "python bench/learning/bench_budgets.py --passage-words "
                   + " ".join(map(str, args.passage_words)),
        "world": {"seed": 13, "passage_words": WorldConfig().passage_words},
        "configs": config_rows(count, chat_prompt),
        "demonstrations": [row for words in args.passage_words
                           for row in demonstration_rows(tokenizer, chat_prompt, words)]})


if __name__ == "__main__":
    main()
