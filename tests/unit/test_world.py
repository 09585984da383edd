"""The fictional world: deterministic, unambiguous, and every answer is in its passages."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from pydantic import ValidationError

from advrag.datasets.loaders import load_corpus, load_qa
from advrag.datasets.world import (
    SPLITS,
    World,
    WorldConfig,
    _number_answers,
    _type_counts,
    generate_world,
    write_world,
)

SMALL = {"n_countries": 4, "n_cities": 16, "n_people": 60, "n_organisations": 20,
         "n_rivers": 6, "n_mountains": 6, "n_train": 60, "n_dev": 20, "n_test": 20}


@pytest.fixture(scope="module")
def world() -> World:
    return generate_world(WorldConfig())


def _records(world: World) -> list:
    return [r for split in SPLITS for r in world.splits[split]]


def _body(contents: str) -> str:
    return contents.split("\n", 1)[1]


def test_same_seed_gives_identical_files(tmp_path):
    cfg = WorldConfig(seed=7, **SMALL)
    a = write_world(generate_world(cfg), tmp_path / "a")
    b = write_world(generate_world(cfg), tmp_path / "b")
    for name in a:
        assert a[name].read_bytes() == b[name].read_bytes(), name


def test_other_seed_gives_other_world():
    one = generate_world(WorldConfig(seed=1, **SMALL))
    two = generate_world(WorldConfig(seed=2, **SMALL))
    assert [p["contents"] for p in one.passages] != [p["contents"] for p in two.passages]
    assert [r.question for r in one.splits["test"]] != [r.question for r in two.splits["test"]]


def test_default_sizes(world):
    # 12 countries + 120 cities + 40 rivers + 40 mountains: 1 passage each (<= 3 facts);
    # 480 people + 150 organisations: 2 each (4-5 facts) -> 212 + 1260 = 1472.
    assert len(world.passages) == 1472
    assert {s: len(world.splits[s]) for s in SPLITS} == {"train": 500, "dev": 100, "test": 100}


def test_ids_and_names_unique(world):
    assert len({p["id"] for p in world.passages}) == len(world.passages)
    records = _records(world)
    assert len({r.id for r in records}) == len(records)
    names = [e.name.lower() for e in world.entities.values()]
    aliases = [a.lower() for e in world.entities.values() for a in e.aliases]
    assert len(set(names + aliases)) == len(names) + len(aliases)


def test_splits_disjoint_and_questions_unique(world):
    texts = [r.question for r in _records(world)]
    assert len(set(texts)) == len(texts)
    by_split = {s: {r.question for r in world.splits[s]} for s in SPLITS}
    assert not by_split["train"] & by_split["dev"]
    assert not by_split["train"] & by_split["test"]
    assert not by_split["dev"] & by_split["test"]


@pytest.mark.parametrize("target", [60, 100, 120])
def test_passage_lengths_near_target(target):
    world = generate_world(WorldConfig(passage_words=target, **SMALL))
    counts = [len(_body(p["contents"]).split()) for p in world.passages]
    # filler is added until the count reaches the target; the longest filler sentence
    # (with a three-word organisation name) is 15 words, so at most target + 14.
    assert min(counts) >= target
    assert max(counts) <= target + 14


def test_titles_are_entity_names(world):
    names = {e.name for e in world.entities.values()}
    assert {p["contents"].split("\n", 1)[0] for p in world.passages} == names


@pytest.mark.parametrize("seed", [0, 3])
def test_every_chain_is_walkable_through_its_passages(seed):
    world = generate_world(WorldConfig(seed=seed, **SMALL))
    passages = {p["id"]: p["contents"] for p in world.passages}
    for record in _records(world):
        meta, chain = record.metadata, record.metadata["chain"]
        assert meta["hops"] == len(chain)
        assert meta["supporting_ids"] == list(dict.fromkeys(h["passage_id"] for h in chain))
        for i, hop in enumerate(chain):
            title, text = passages[hop["passage_id"]].split("\n", 1)
            assert title == hop["subject"]
            assert hop["object"] in text
            if meta["type"] == "compositional" and i > 0:
                assert hop["subject"] == chain[i - 1]["object"]  # bridge entity
        if meta["type"] != "comparison":
            assert chain[-1]["object"] in record.golden_answers
            assert chain[0]["subject"] in record.question


def test_comparisons_are_untied_and_answered_correctly(world):
    comparisons = [r for r in _records(world) if r.metadata["type"] == "comparison"]
    assert comparisons
    for record in comparisons:
        a, b = record.metadata["chain"]
        va, vb = (int(h["object"].replace(",", "")) for h in (a, b))
        assert va != vb
        pick_a = (va < vb) == (record.metadata["select"] == "min")
        assert record.golden_answers[0] == (a if pick_a else b)["subject"]
        assert a["subject"] in record.question and b["subject"] in record.question


def test_type_mix_and_hops(world):
    records = _records(world)
    # 700 questions * (0.3, 0.5, 0.2) = 210 single, 350 compositional, 140 comparison
    assert Counter(r.metadata["type"] for r in records) == {
        "single": 210, "compositional": 350, "comparison": 140}
    hops = {r.metadata["type"]: set() for r in records}
    for r in records:
        hops[r.metadata["type"]].add(r.metadata["hops"])
    assert hops == {"single": {1}, "compositional": {2, 3}, "comparison": {2}}


def test_type_counts_largest_remainder():
    # total 7: raw 2.1 / 3.5 / 1.4 -> floors 2 / 3 / 1 (sum 6); the one left over goes to
    # the largest remainder (0.5, compositional) -> 2 / 4 / 1
    mix = {"single": 0.3, "compositional": 0.5, "comparison": 0.2}
    assert _type_counts(mix, 7) == {"single": 2, "compositional": 4, "comparison": 1}


def test_number_answers_include_plain_and_unit_forms():
    assert _number_answers(48210, "population") == ("48,210", ("48,210", "48210"))
    assert _number_answers(1843, "birth_year") == ("1843", ("1843",))
    assert _number_answers(183, "height_cm") == ("183", ("183", "183 cm", "183 centimetres"))
    surface, answers = _number_answers(3412, "height_m")
    assert surface == "3,412"
    assert set(answers) == {"3,412", "3412", "3,412 m", "3,412 metres", "3412 m", "3412 metres"}


def test_bad_config_errors_name_the_fix():
    with pytest.raises(ValidationError, match="capital city"):
        WorldConfig(n_countries=10, n_cities=5)
    with pytest.raises(ValidationError, match="sum to 1"):
        WorldConfig(question_mix={"single": 0.5, "compositional": 0.5, "comparison": 0.5})


def test_too_many_questions_for_a_small_world():
    cfg = WorldConfig(**{**SMALL, "n_train": 5000})
    with pytest.raises(ValueError, match="raise the entity counts"):
        generate_world(cfg)


def test_written_world_loads_back(tmp_path, world):
    paths = write_world(world, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "corpus.jsonl", "dev.jsonl", "reasoning_dev.jsonl", "reasoning_test.jsonl",
        "reasoning_train.jsonl", "test.jsonl", "train.jsonl", "world.json"]
    assert load_qa(paths["test"]) == world.splits["test"]
    assert load_corpus(paths["corpus"]) == world.passages
    doc = json.loads(paths["world"].read_text())
    assert WorldConfig(**doc["config"]) == world.config
    assert len(doc["entities"]) == len(world.entities)


def test_the_pipeline_world_section_sets_the_passage_length(tmp_path):
    from advrag.config import WorldSection
    from advrag.tasks.data import build_world

    section = WorldSection(out_dir=tmp_path, seed=3, n_train=10, n_dev=5, n_test=5,
                           passage_words=60)
    build_world.fn(section)
    counts = [len(_body(p["contents"]).split()) for p in load_corpus(tmp_path / "corpus.jsonl")]
    assert 60 <= min(counts) and max(counts) <= 74  # the bounds of test_passage_lengths_near_target


def test_the_pipeline_world_section_sizes_the_world_and_refuses_what_cannot_generate(tmp_path):
    from advrag.config import ConfigError, PipelineConfig, WorldSection, load_config
    from advrag.tasks.data import build_world

    sizes = ("n_countries", "n_cities", "n_people", "n_organisations", "n_rivers", "n_mountains")
    assert {k: getattr(WorldSection(), k) for k in sizes} == {k: getattr(WorldConfig(), k)
                                                             for k in sizes}
    section = WorldSection(out_dir=tmp_path, **SMALL)
    build_world.fn(section)
    assert load_corpus(tmp_path / "corpus.jsonl") == generate_world(
        WorldConfig(seed=section.seed, **SMALL)).passages

    config = tmp_path / "pipeline.yaml"
    config.write_text("data: {world: {n_countries: 5, n_cities: 4}}\n")
    with pytest.raises(ConfigError, match=r"data\.world.*n_cities \(4\) < n_countries \(5\)"):
        load_config(config, PipelineConfig)
