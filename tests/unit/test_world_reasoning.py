"""The world's reasoning-only questions: facts in the question, answers computed, files apart."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from advrag.datasets.loaders import load_qa
from advrag.datasets.world import (
    _REASONING,
    SPLITS,
    Entity,
    World,
    WorldConfig,
    _difference_answers,
    _reasoning_question,
    generate_world,
    write_world,
)

SMALL = {"n_countries": 4, "n_cities": 16, "n_people": 60, "n_organisations": 20,
         "n_rivers": 6, "n_mountains": 6, "n_train": 60, "n_dev": 20, "n_test": 20}
TEMPLATES = {f"{kind}.{attr}.{op}": (attr, op, text) for kind, attr, op, text in _REASONING}


@pytest.fixture(scope="module")
def world() -> World:
    return generate_world(WorldConfig())


def _reasoning_records(world: World) -> list:
    return [r for split in SPLITS for r in world.reasoning[split]]


def _parse(text: str, question: str) -> dict[str, str]:
    """Read names and values back out of a question by its template."""
    pattern = re.escape(text)
    for slot, group in (("a", r".+?"), ("b", r".+?"), ("va", r"[\d,]+"), ("vb", r"[\d,]+")):
        pattern = pattern.replace(re.escape("{" + slot + "}"), f"(?P<{slot}>{group})")
    match = re.fullmatch(pattern, question)
    assert match, question
    return match.groupdict()


def test_year_difference_hand_worked():
    zorvath = Entity("country-0000", "country", "Zorvath", attrs={"founding_year": 1834})
    kelmar = Entity("country-0001", "country", "Kelmar", attrs={"founding_year": 1901})
    question, answers, meta = _reasoning_question(zorvath, kelmar, _REASONING[0])
    assert question == ("Zorvath was founded in 1834 and Kelmar in 1901. "
                        "How many years apart were they founded?")
    assert answers == ["67", "67 years"]  # 1901 - 1834 = 67
    assert meta == {"type": "reasoning", "hops": 0, "supporting_ids": [], "chain": [],
                    "needs_retrieval": False, "template": "country.founding_year.diff"}


def test_population_difference_and_comparison_hand_worked():
    big = Entity("city-0000", "city", "Drurvowick", attrs={"population": 1_234_567})
    small = Entity("city-0001", "city", "Maspei", attrs={"population": 34_567})
    diff = next(t for t in _REASONING if t[:3] == ("city", "population", "diff"))
    question, answers, _ = _reasoning_question(small, big, diff)
    assert "34,567" in question and "1,234,567" in question  # written as the passages do
    # 1,234,567 - 34,567 = 1,200,000, in either order
    assert answers == ["1,200,000", "1200000", "1,200,000 people", "1200000 people"]
    larger = next(t for t in _REASONING if t[:3] == ("city", "population", "max"))
    assert _reasoning_question(small, big, larger)[1] == ["Drurvowick"]


def test_comparison_answers_include_aliases():
    a = Entity("mountain-0000", "mountain", "Mount Tor", ["Tor"], {"height_m": 4_100})
    b = Entity("mountain-0001", "mountain", "Mount Vel", ["Vel"], {"height_m": 3_900})
    taller = next(t for t in _REASONING if t[:3] == ("mountain", "height_m", "max"))
    question, answers, _ = _reasoning_question(a, b, taller)
    assert question.startswith("Mount Tor rises to a height of 4,100 metres and Mount Vel to 3,900")
    assert answers == ["Mount Tor", "Tor"]


def test_difference_spellings_keep_the_relations_units():
    # lengths already carry units; years and people get theirs added
    assert _difference_answers(269, "length_km") == ["269", "269 km", "269 kilometres"]
    assert _difference_answers(1_269, "height_m") == [
        "1,269", "1269", "1,269 m", "1,269 metres", "1269 m", "1269 metres"]
    assert _difference_answers(5, "birth_year") == ["5", "5 years"]


def test_every_answer_is_computed_from_the_facts_in_its_question(world):
    names = {e.name: e for e in world.entities.values()}
    for record in _reasoning_records(world):
        attr, op, text = TEMPLATES[record.metadata["template"]]
        got = _parse(text, record.question)
        va, vb = (int(got[k].replace(",", "")) for k in ("va", "vb"))
        # the stated values are the world's own facts, never tied
        assert (names[got["a"]].attrs[attr], names[got["b"]].attrs[attr]) == (va, vb)
        assert va != vb
        if op == "diff":
            assert record.golden_answers[0].replace(",", "") == str(abs(va - vb))
        else:
            pick = min if op == "min" else max
            winner = got["a"] if pick(va, vb) == va else got["b"]
            assert record.golden_answers[0] == winner


def test_metadata_marks_reasoning_items_only(world):
    for record in _reasoning_records(world):
        meta = record.metadata
        assert (meta["type"], meta["hops"], meta["chain"], meta["supporting_ids"],
                meta["needs_retrieval"]) == ("reasoning", 0, [], [], False)
    regular = [r for split in SPLITS for r in world.splits[split]]
    assert all("needs_retrieval" not in r.metadata for r in regular)
    assert {r.metadata["type"] for r in regular} == {"single", "compositional", "comparison"}


def test_sizes_ids_and_coverage(world):
    assert {s: len(world.reasoning[s]) for s in SPLITS} == {"train": 100, "dev": 20, "test": 20}
    records = _reasoning_records(world)
    ids = [r.id for r in records]
    qa_ids = {r.id for split in SPLITS for r in world.splits[split]}
    assert len(set(ids)) == len(ids) and not set(ids) & qa_ids
    assert all(r.id.startswith(f"world-reasoning-{s}-") for s in SPLITS for r in world.reasoning[s])
    assert len({r.question for r in records}) == len(records)
    assert {r.metadata["template"] for r in records} == set(TEMPLATES)


def test_one_int_gives_every_split_that_many():
    world = generate_world(WorldConfig(n_reasoning=5, **SMALL))
    assert {s: len(world.reasoning[s]) for s in SPLITS} == dict.fromkeys(SPLITS, 5)


def test_main_files_do_not_depend_on_reasoning_items(tmp_path):
    on = write_world(generate_world(WorldConfig(seed=4, **SMALL)), tmp_path / "on")
    off = write_world(generate_world(WorldConfig(seed=4, n_reasoning=0, **SMALL)), tmp_path / "off")
    for name in ("corpus", *SPLITS):
        assert on[name].read_bytes() == off[name].read_bytes(), name
    assert off["reasoning_train"].read_bytes() == b""
    assert len(load_qa(on["reasoning_dev"])) == 20


def test_reasoning_files_are_deterministic_per_seed(tmp_path):
    a = write_world(generate_world(WorldConfig(seed=7, **SMALL)), tmp_path / "a")
    b = write_world(generate_world(WorldConfig(seed=7, **SMALL)), tmp_path / "b")
    c = write_world(generate_world(WorldConfig(seed=8, **SMALL)), tmp_path / "c")
    for split in SPLITS:
        name = f"reasoning_{split}"
        assert a[name].read_bytes() == b[name].read_bytes()
        assert a[name].read_bytes() != c[name].read_bytes()


def test_bad_counts_errors_name_the_fix():
    with pytest.raises(ValidationError, match="exactly the keys"):
        WorldConfig(n_reasoning={"train": 5})
    with pytest.raises(ValidationError, match=">= 0"):
        WorldConfig(n_reasoning={"train": 5, "dev": -1, "test": 0})
    with pytest.raises(ValueError, match="lower n_reasoning"):
        generate_world(WorldConfig(**{**SMALL, "n_reasoning": 2_000}))
