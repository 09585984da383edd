"""A small generated world with a BM25 retriever over its passages, for tests that need real
transcripts (grounded demonstrations, slices) without an embedding index."""

from __future__ import annotations

from advrag.common.types import Passage
from advrag.datasets.world import World, WorldConfig, generate_world
from advrag.retrieval.bm25 import BM25Index
from advrag.retrieval.retriever import BM25Retriever


def bm25_world(seed: int, n_train: int) -> tuple[World, BM25Retriever]:
    """A world of 3 countries, 8 cities, 16 people (train split only) and its BM25 retriever."""
    world = generate_world(WorldConfig(seed=seed, n_countries=3, n_cities=8, n_people=16,
                                       n_organisations=6, n_rivers=3, n_mountains=3,
                                       n_train=n_train, n_dev=0, n_test=0))
    passages = [Passage(p["id"], p["contents"]) for p in world.passages]
    return world, BM25Retriever(BM25Index.build([p.contents for p in passages], progress=False),
                                passages)
