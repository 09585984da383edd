"""An offline, fictional knowledge world: entities, a passage corpus and QA splits.

Everything here is invented (names are built from syllables), so a model cannot
answer from memory and has to retrieve. The world has countries, cities,
people, organisations, rivers and mountains, each with attributes (years,
populations, heights, professions, ...) and links (born_in, located_in,
capital, founded_by, headquartered_in, spouse, ...). Every fact is stated as a
plain sentence in a ~``passage_words``-word passage whose title is the
subject's name (FlashRAG corpus format, ``contents = "title\\ntext"``); filler
sentences that state no facts pad each passage to length.

Questions come in three types, recorded in ``metadata``:

- ``single``: one fact (``hops = 1``).
- ``compositional``: a chain of 2 or 3 facts, each hop's answer being the next
  hop's subject ("In which country was the founder of Zorvath Works born?").
- ``comparison``: the same attribute of two entities, never tied
  ("Who was born earlier, X or Y?"); ``hops = 2``.

``metadata["chain"]`` lists the facts used, each as
``{"subject", "relation", "object", "passage_id"}``, where ``object`` is the
exact string written in that passage; ``supporting_ids`` are those passage ids.
Generation is deterministic for a seed: one ``random.Random(seed)`` drives it
all and every iteration is over ordered containers.

Reasoning-only questions (UR²'s task mixing, §3.1.2) state both facts in the
question and ask for a computed answer: a difference of years, populations or
lengths, or which of two values is larger ("Zorvath was founded in 1834 and
Kelmar in 1901. How many years apart were they founded?" → 67). Their metadata
is ``type = "reasoning"``, ``hops = 0``, empty ``chain`` and ``supporting_ids``,
and ``needs_retrieval = False`` (the other questions carry no such key). They
go to separate ``reasoning_<split>.jsonl`` files and are drawn by their own
``Random(f"{seed}-reasoning")``, so the corpus and the QA splits are the same
bytes whatever ``n_reasoning`` is.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from random import Random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from advrag.common.fileio import atomic_write_text
from advrag.datasets.records import QARecord, write_jsonl

QUESTION_TYPES = ("single", "compositional", "comparison")
KINDS = ("country", "city", "person", "organisation", "river", "mountain")
SPLITS = ("train", "dev", "test")
REASONING_SIZES = {"train": 100, "dev": 20, "test": 20}


class WorldConfig(BaseModel):
    """Sizes and seed of a generated world; the defaults give ~1.5k passages."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    seed: int = 0
    """Seed of the single random generator; same seed, same world."""
    n_countries: int = Field(12, ge=2)
    """Countries; each has a capital city, so ``n_cities >= n_countries``."""
    n_cities: int = Field(120, ge=2)
    """Cities, each located in one country."""
    n_people: int = Field(480, ge=4)
    """People; each gets two passages (about 4-5 facts)."""
    n_organisations: int = Field(150, ge=2)
    """Organisations, each founded by a person and headquartered in a city."""
    n_rivers: int = Field(40, ge=2)
    """Rivers, each flowing through a country."""
    n_mountains: int = Field(40, ge=2)
    """Mountains, each standing in a country."""
    n_train: int = Field(500, ge=0)
    """Questions in the train split."""
    n_dev: int = Field(100, ge=0)
    """Questions in the dev split."""
    n_test: int = Field(100, ge=0)
    """Questions in the test split."""
    passage_words: int = Field(60, ge=40, le=120)
    """Target words per passage text (after the title); filler pads up to it (at most 120:
    the filler pools hold about that many words)."""
    facts_per_passage: int = Field(3, ge=1, le=6)
    """Most facts stated in one passage; an entity with more gets several passages."""
    question_mix: dict[str, float] = Field(
        default_factory=lambda: {"single": 0.3, "compositional": 0.5, "comparison": 0.2}
    )
    """Share of each question type over all splits; must sum to 1."""
    n_reasoning: int | dict[str, int] = Field(default_factory=lambda: dict(REASONING_SIZES))
    """Reasoning-only questions per split (``reasoning_<split>.jsonl``): a count for each
    split name, or one int for every split (0 turns them off)."""

    @model_validator(mode="after")
    def _check(self) -> WorldConfig:
        if self.n_cities < self.n_countries:
            raise ValueError(
                f"n_cities ({self.n_cities}) < n_countries ({self.n_countries}): every "
                "country needs its own capital city; raise n_cities or lower n_countries"
            )
        if set(self.question_mix) != set(QUESTION_TYPES):
            raise ValueError(f"question_mix must have exactly the keys {QUESTION_TYPES}")
        if any(v < 0 for v in self.question_mix.values()):
            raise ValueError("question_mix shares must be >= 0")
        if abs(sum(self.question_mix.values()) - 1.0) > 1e-6:
            raise ValueError(f"question_mix shares must sum to 1, got {self.question_mix}")
        if isinstance(self.n_reasoning, dict) and set(self.n_reasoning) != set(SPLITS):
            raise ValueError(f"n_reasoning must have exactly the keys {SPLITS} (or be one int), "
                             f"got {sorted(self.n_reasoning)}")
        if min(self.reasoning_sizes().values()) < 0:
            raise ValueError(f"n_reasoning counts must be >= 0, got {self.n_reasoning}")
        return self

    def reasoning_sizes(self) -> dict[str, int]:
        """Reasoning-only questions per split, ``n_reasoning`` spelled out for every split."""
        if isinstance(self.n_reasoning, int):
            return dict.fromkeys(SPLITS, self.n_reasoning)
        return {split: self.n_reasoning[split] for split in SPLITS}


@dataclass
class Entity:
    """One invented thing: attributes are plain values, links point at entity ids."""

    id: str
    kind: str
    name: str
    aliases: list[str] = field(default_factory=list)
    attrs: dict[str, int | str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)


@dataclass
class World:
    """A generated world: entities by id, corpus passages, QA and reasoning-only splits by name."""

    config: WorldConfig
    entities: dict[str, Entity]
    passages: list[dict[str, str]]
    splits: dict[str, list[QARecord]]
    reasoning: dict[str, list[QARecord]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Fact:
    """A stated fact: ``surface`` is the object exactly as the passage writes it."""

    relation: str
    surface: str
    answers: tuple[str, ...]


# ---------------------------------------------------------------- names

_ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
           "br", "dr", "kr", "th", "sh", "st")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei", "ou")
_CODAS = ("", "", "", "", "n", "r", "l", "s", "m", "th")
_COUNTRY_ENDINGS = ("ia", "ar", "ora", "land", "mark", "en")
_CITY_ENDINGS = ("", "", "", "holm", "ford", "grad", "wick")
_ORG_SUFFIXES = ("Industries", "Holdings", "Works", "Guild", "Consortium", "Laboratories",
                 "Trading Company", "Foundry")
_PROFESSIONS = ("architect", "astronomer", "botanist", "cartographer", "chemist", "composer",
                "diplomat", "economist", "engineer", "geologist", "historian", "judge",
                "linguist", "mathematician", "novelist", "painter", "photographer",
                "physician", "pilot", "poet", "sculptor", "surgeon", "teacher", "violinist")
_INDUSTRIES = ("agriculture", "aviation", "banking", "brewing", "ceramics", "clockmaking",
               "glassmaking", "mining", "pharmaceuticals", "publishing", "railways",
               "shipbuilding", "software", "telecommunications", "textiles")


class _Namer:
    """Draws invented words and guarantees every word and full name is new."""

    def __init__(self, rng: Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: int, ending: str = "") -> str:
        """A fresh capitalised word of ``syllables`` syllables plus ``ending``."""
        while True:
            parts = [self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)
                     for _ in range(syllables)]
            candidate = ("".join(parts) + ending).capitalize()
            if candidate.lower() not in self.used and len(candidate) >= 4:
                self.used.add(candidate.lower())
                return candidate

    def claim(self, name: str) -> bool:
        """Reserve a composed name; False if it was already taken."""
        if name.lower() in self.used:
            return False
        self.used.add(name.lower())
        return True


# ---------------------------------------------------------------- entities

def _add(ents: dict[str, Entity], kind: str, name: str, aliases: list[str] | None = None,
         **attrs: int | str) -> Entity:
    """Register a new entity of ``kind``; ids count up per kind (``city-0007``)."""
    number = sum(1 for e in ents.values() if e.kind == kind)
    ent = Entity(f"{kind}-{number:04d}", kind, name, aliases or [], dict(attrs))
    ents[ent.id] = ent
    return ent


def _places(cfg: WorldConfig, rng: Random, namer: _Namer, ents: dict[str, Entity]) -> None:
    """Countries and cities; each country gets >= 1 city and one capital."""
    countries = [_add(ents, "country", namer.word(2, rng.choice(_COUNTRY_ENDINGS)),
                      population=rng.randint(800_000, 60_000_000),
                      founding_year=rng.randint(1100, 1950))
                 for _ in range(cfg.n_countries)]
    cities_of: dict[str, list[Entity]] = {c.id: [] for c in countries}
    for i in range(cfg.n_cities):
        city = _add(ents, "city", namer.word(2, rng.choice(_CITY_ENDINGS)),
                    population=rng.randint(4_000, 3_000_000),
                    founding_year=rng.randint(600, 1900))
        country = countries[i] if i < len(countries) else rng.choice(countries)
        city.links["located_in"] = country.id
        cities_of[country.id].append(city)
    for country in countries:
        country.links["capital"] = rng.choice(cities_of[country.id]).id


def _people(cfg: WorldConfig, rng: Random, namer: _Namer, ents: dict[str, Entity]) -> None:
    """People with birth year/place, profession, height; about half are married."""
    cities = [e.id for e in ents.values() if e.kind == "city"]
    firsts = [namer.word(2) for _ in range(max(2, cfg.n_people // 3))]
    lasts = [namer.word(rng.choice((2, 2, 3))) for _ in range(max(2, cfg.n_people // 2))]
    people = []
    while len(people) < cfg.n_people:
        name = f"{rng.choice(firsts)} {rng.choice(lasts)}"
        if namer.claim(name):
            person = _add(ents, "person", name, birth_year=rng.randint(1820, 1995),
                          profession=rng.choice(_PROFESSIONS), height_cm=rng.randint(150, 200))
            person.links["born_in"] = rng.choice(cities)
            people.append(person)
    married = rng.sample(people, 2 * (len(people) // 4))
    for a, b in zip(married[0::2], married[1::2], strict=True):
        a.links["spouse"], b.links["spouse"] = b.id, a.id


def _others(cfg: WorldConfig, rng: Random, namer: _Namer, ents: dict[str, Entity]) -> None:
    """Organisations (founder, HQ, year, industry), rivers and mountains."""
    by_kind = {k: [e for e in ents.values() if e.kind == k] for k in ("country", "city", "person")}
    for _ in range(cfg.n_organisations):
        base = namer.word(2)
        founder = rng.choice(by_kind["person"])
        org = _add(ents, "organisation", f"{base} {rng.choice(_ORG_SUFFIXES)}", [base],
                   founding_year=int(founder.attrs["birth_year"]) + rng.randint(22, 60),
                   industry=rng.choice(_INDUSTRIES))
        org.links["founded_by"] = founder.id
        org.links["headquartered_in"] = rng.choice(by_kind["city"]).id
    for _ in range(cfg.n_rivers):
        base = namer.word(2)
        river = _add(ents, "river", f"River {base}", [base], length_km=rng.randint(40, 3_500))
        river.links["flows_through"] = rng.choice(by_kind["country"]).id
    for _ in range(cfg.n_mountains):
        base = namer.word(2)
        mountain = _add(ents, "mountain", f"Mount {base}", [base], height_m=rng.randint(600, 8_000))
        mountain.links["stands_in"] = rng.choice(by_kind["country"]).id


# ---------------------------------------------------------------- facts

_SENTENCES = {
    "capital": "The capital of {s} is {o}.",
    "population": "{s} has a population of {o} people.",
    "founding_year": "{s} was founded in {o}.",
    "located_in": "{s} is a city in {o}.",
    "birth_year": "{s} was born in the year {o}.",
    "born_in": "{s} was born in the city of {o}.",
    "profession": "{s} earned a living as a professional {o}.",
    "height_cm": "{s} stood {o} centimetres tall.",
    "spouse": "{s} was married to {o}.",
    "founded_by": "{s} was established by {o}.",
    "headquartered_in": "{s} has its headquarters in {o}.",
    "industry": "{s} is active in the {o} industry.",
    "length_km": "{s} is {o} kilometres long.",
    "flows_through": "{s} flows through {o}.",
    "height_m": "{s} rises to a height of {o} metres.",
    "stands_in": "{s} stands in {o}.",
}
# relation -> (group digits with commas in the passage?, unit words accepted in answers)
_NUMBER_FORMATS: dict[str, tuple[bool, tuple[str, ...]]] = {
    "population": (True, ()),
    "founding_year": (False, ()),
    "birth_year": (False, ()),
    "height_cm": (False, ("cm", "centimetres")),
    "length_km": (True, ("km", "kilometres")),
    "height_m": (True, ("m", "metres")),
}
_RELATION_ORDER = tuple(_SENTENCES)


def _number_answers(value: int, relation: str) -> tuple[str, tuple[str, ...]]:
    """Surface form of a number plus its accepted spellings (digits, commas, units)."""
    grouped, units = _NUMBER_FORMATS[relation]
    surface = f"{value:,}" if grouped else str(value)
    forms = list(dict.fromkeys((surface, str(value))))
    return surface, tuple(forms + [f"{f} {u}" for f in forms for u in units])


def _facts_of(ent: Entity, ents: dict[str, Entity]) -> list[_Fact]:
    """Every fact about ``ent``, in the fixed relation order."""
    facts = []
    for rel in _RELATION_ORDER:
        if rel in ent.links:
            target = ents[ent.links[rel]]
            facts.append(_Fact(rel, target.name, (target.name, *target.aliases)))
        elif rel in ent.attrs and rel in _NUMBER_FORMATS:
            facts.append(_Fact(rel, *_number_answers(int(ent.attrs[rel]), rel)))
        elif rel in ent.attrs:
            facts.append(_Fact(rel, str(ent.attrs[rel]), (str(ent.attrs[rel]),)))
    return facts


# ---------------------------------------------------------------- passages

_PERSON_FILLER = (
    "{n} kept a detailed diary that later readers found unusually candid.",
    "Friends described {n} as patient, curious and quick to laugh.",
    "Letters written by {n} survive in a small private collection.",
    "{n} enjoyed long walks and collected old maps as a hobby.",
    "Several local newspapers published short profiles of {n} over the years.",
    "A portrait of {n} hangs in a modest gallery today.",
    "{n} rarely gave interviews and preferred to stay out of public view.",
    "Colleagues remembered {n} for careful work and a dry sense of humour.",
    "{n} often spoke about the importance of good teachers.",
    "Biographers disagree about some minor episodes in the life of {n}.",
    "{n} was fond of music and played an instrument in private.",
    "A short documentary about {n} was produced by a student group.",
)
_PLACE_FILLER = (
    "Travellers often describe {n} as quiet in winter and lively in summer.",
    "Old maps show {n} under several slightly different spellings.",
    "The landscape around {n} has been painted by many amateur artists.",
    "Local guidebooks devote a full chapter to {n} and its surroundings.",
    "Stories about {n} are still told at seasonal festivals.",
    "The weather around {n} can change quickly, so visitors are advised to pack layers.",
    "Birdwatchers visit {n} to observe migrating flocks in spring.",
    "Photographs of {n} regularly appear in regional calendars.",
    "Some people say that {n} is best seen at sunrise.",
    "Geographers have surveyed {n} several times with modern instruments.",
    "Folk songs mention {n} in more than one verse.",
    "Postcards showing {n} remain popular with collectors.",
)
_ORG_FILLER = (
    "{n} publishes an annual report describing its main activities.",
    "Employees of {n} often praise its friendly working culture.",
    "{n} sponsors a small scholarship for local students.",
    "The logo of {n} has been redesigned several times.",
    "Critics have occasionally questioned the strategy of {n}.",
    "{n} maintains a modest archive of its early documents.",
    "Trade magazines have profiled {n} on several occasions.",
    "{n} is known for a distinctive style of internal meetings.",
    "The early years of {n} were marked by careful growth.",
    "{n} hosts an open day for the public once a year.",
    "Former staff of {n} have gone on to start their own ventures.",
    "Customers often mention the reliability of {n} in reviews.",
)
_FILLER = {"person": _PERSON_FILLER, "organisation": _ORG_FILLER}


def _passage_text(ent: Entity, facts: list[_Fact], words: int, rng: Random) -> str:
    """Fact sentences (first one leads) mixed with filler until ~``words`` words."""
    stated = [_SENTENCES[f.relation].format(s=ent.name, o=f.surface) for f in facts]
    filler = [s.format(n=ent.name) for s in _FILLER.get(ent.kind, _PLACE_FILLER)]
    rng.shuffle(filler)
    extra: list[str] = []
    count = sum(len(s.split()) for s in stated)
    for sentence in filler:
        if count >= words:
            break
        extra.append(sentence)
        count += len(sentence.split())
    rest = stated[1:] + extra
    rng.shuffle(rest)
    return " ".join(stated[:1] + rest)


def _corpus(ents: dict[str, Entity], cfg: WorldConfig,
            rng: Random) -> tuple[list[dict[str, str]], dict[tuple[str, str], tuple[_Fact, str]]]:
    """Passages for every entity, and (entity id, relation) -> (fact, passage id)."""
    passages: list[dict[str, str]] = []
    index: dict[tuple[str, str], tuple[_Fact, str]] = {}
    for ent in ents.values():
        facts = _facts_of(ent, ents)
        step = cfg.facts_per_passage
        for k, start in enumerate(range(0, len(facts), step)):
            group = facts[start:start + step]
            pid = f"{ent.id}-{k}"
            text = _passage_text(ent, group, cfg.passage_words, rng)
            passages.append({"id": pid, "contents": f"{ent.name}\n{text}"})
            index.update({(ent.id, f.relation): (f, pid) for f in group})
    return passages, index


# ---------------------------------------------------------------- questions

# (start kind, relation path, question); the type is single for one hop, else compositional.
_CHAINS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("person", ("birth_year",), "In which year was {x} born?"),
    ("person", ("born_in",), "In which city was {x} born?"),
    ("person", ("profession",), "What was the profession of {x}?"),
    ("person", ("height_cm",), "How tall was {x}, in centimetres?"),
    ("person", ("spouse",), "Who was {x} married to?"),
    ("city", ("located_in",), "In which country is the city of {x}?"),
    ("city", ("population",), "What is the population of the city of {x}?"),
    ("city", ("founding_year",), "In which year was the city of {x} founded?"),
    ("country", ("capital",), "What is the capital of {x}?"),
    ("country", ("population",), "What is the population of {x}?"),
    ("country", ("founding_year",), "In which year was {x} founded?"),
    ("organisation", ("founded_by",), "Who established {x}?"),
    ("organisation", ("founding_year",), "In which year was {x} founded?"),
    ("organisation", ("headquartered_in",), "In which city is {x} headquartered?"),
    ("organisation", ("industry",), "In which industry is {x} active?"),
    ("river", ("length_km",), "How long is {x}, in kilometres?"),
    ("river", ("flows_through",), "Through which country does {x} flow?"),
    ("mountain", ("height_m",), "How high is {x}, in metres?"),
    ("mountain", ("stands_in",), "In which country does {x} stand?"),
    ("person", ("born_in", "located_in"), "In which country was {x} born?"),
    ("person", ("born_in", "population"), "What is the population of the city where {x} was born?"),
    ("person", ("spouse", "born_in"), "In which city was the spouse of {x} born?"),
    ("person", ("spouse", "profession"), "What was the profession of the spouse of {x}?"),
    ("organisation", ("founded_by", "born_in"), "In which city was the founder of {x} born?"),
    ("organisation", ("founded_by", "birth_year"), "In which year was the founder of {x} born?"),
    ("organisation", ("headquartered_in", "located_in"), "In which country is {x} headquartered?"),
    ("organisation", ("headquartered_in", "founding_year"),
     "In which year was the city that hosts the headquarters of {x} founded?"),
    ("city", ("located_in", "capital"), "What is the capital of the country in which {x} lies?"),
    ("river", ("flows_through", "capital"),
     "What is the capital of the country that {x} flows through?"),
    ("mountain", ("stands_in", "population"),
     "What is the population of the country where {x} stands?"),
    ("organisation", ("founded_by", "born_in", "located_in"),
     "In which country was the founder of {x} born?"),
    ("organisation", ("headquartered_in", "located_in", "capital"),
     "What is the capital of the country in which {x} is headquartered?"),
    ("person", ("born_in", "located_in", "capital"),
     "What is the capital of the country where {x} was born?"),
    ("person", ("spouse", "born_in", "located_in"), "In which country was the spouse of {x} born?"),
    ("organisation", ("founded_by", "spouse", "profession"),
     "What was the profession of the spouse of the founder of {x}?"),
    ("organisation", ("founded_by", "born_in", "population"),
     "What is the population of the city where the founder of {x} was born?"),
)
# (kind, attribute, "min" or "max" wins, question)
_COMPARISONS: tuple[tuple[str, str, str, str], ...] = (
    ("person", "birth_year", "min", "Who was born earlier, {a} or {b}?"),
    ("person", "height_cm", "max", "Who was taller, {a} or {b}?"),
    ("city", "population", "max", "Which city has the larger population, {a} or {b}?"),
    ("city", "founding_year", "min", "Which city was founded earlier, {a} or {b}?"),
    ("country", "population", "max", "Which country has more inhabitants, {a} or {b}?"),
    ("organisation", "founding_year", "min", "Which organisation is older, {a} or {b}?"),
    ("river", "length_km", "max", "Which river is longer, {a} or {b}?"),
    ("mountain", "height_m", "max", "Which mountain is higher, {a} or {b}?"),
)
# Reasoning-only: (kind, attribute, "diff", "min" or "max", question); {va}/{vb} are the
# values as the passages write them.
_REASONING: tuple[tuple[str, str, str, str], ...] = (
    ("country", "founding_year", "diff",
     "{a} was founded in {va} and {b} in {vb}. How many years apart were they founded?"),
    ("person", "birth_year", "diff",
     "{a} was born in {va} and {b} in {vb}. How many years apart were they born?"),
    ("city", "population", "diff",
     "The city of {a} has a population of {va} and the city of {b} a population of {vb}. "
     "What is the difference between their populations?"),
    ("river", "length_km", "diff",
     "{a} is {va} kilometres long and {b} is {vb} kilometres long. "
     "How much longer is the longer river, in kilometres?"),
    ("person", "height_cm", "max",
     "{a} stood {va} centimetres tall and {b} stood {vb} centimetres tall. Who was taller?"),
    ("organisation", "founding_year", "min",
     "{a} was founded in {va} and {b} in {vb}. Which of the two is older?"),
    ("city", "founding_year", "diff",
     "The city of {a} was founded in {va} and the city of {b} in {vb}. "
     "How many years apart were they founded?"),
    ("country", "population", "diff",
     "{a} has a population of {va} and {b} a population of {vb}. "
     "How many more people live in the more populous country?"),
    ("mountain", "height_m", "max",
     "{a} rises to a height of {va} metres and {b} to {vb} metres. Which mountain is taller?"),
    ("person", "birth_year", "min", "{a} was born in {va} and {b} in {vb}. Who was older?"),
    ("organisation", "founding_year", "diff",
     "{a} was founded in {va} and {b} in {vb}. How many years apart were they founded?"),
    ("city", "population", "max",
     "The city of {a} has a population of {va} and the city of {b} a population of {vb}. "
     "Which city is larger?"),
    ("mountain", "height_m", "diff",
     "{a} rises to a height of {va} metres and {b} to {vb} metres. "
     "How much higher is the higher mountain, in metres?"),
    ("person", "height_cm", "diff",
     "{a} stood {va} centimetres tall and {b} stood {vb} centimetres tall. "
     "What was the difference in their heights, in centimetres?"),
    ("river", "length_km", "max",
     "{a} is {va} kilometres long and {b} is {vb} kilometres long. Which river is longer?"),
    ("country", "founding_year", "min",
     "{a} was founded in {va} and {b} in {vb}. Which country is older?"),
)
# relation -> unit words also accepted after a difference (lengths already carry theirs)
_DIFFERENCE_UNITS = {"founding_year": ("years",), "birth_year": ("years",),
                     "population": ("people",)}

_PairTemplate = tuple[str, str, str, str]  # kind, attribute, selection or operation, question
_Question = tuple[str, list[str], dict[str, Any]]  # question, golden answers, metadata
_Index = dict[tuple[str, str], tuple[_Fact, str]]


def _hop(index: _Index, subject: Entity, relation: str) -> dict[str, str]:
    fact, pid = index[(subject.id, relation)]
    return {"subject": subject.name, "relation": relation, "object": fact.surface,
            "passage_id": pid}


def _walk(start: Entity, path: tuple[str, ...], text: str, ents: dict[str, Entity],
          index: _Index) -> _Question | None:
    """Follow ``path`` from ``start``; None when a link is missing (e.g. unmarried)."""
    chain, node = [], start
    for relation in path:
        if (node.id, relation) not in index:
            return None
        chain.append(_hop(index, node, relation))
        answers = list(index[(node.id, relation)][0].answers)
        node = ents[node.links[relation]] if relation in node.links else node
    meta = {"type": "single" if len(path) == 1 else "compositional", "hops": len(path),
            "supporting_ids": list(dict.fromkeys(h["passage_id"] for h in chain)),
            "chain": chain, "template": ".".join((start.kind, *path))}
    return text.format(x=start.name), answers, meta


def _chain_buckets(by_kind: dict[str, list[Entity]], ents: dict[str, Entity],
                   index: _Index) -> dict[str, list[list[_Question]]]:
    """All answerable chain questions, one bucket per template, grouped by type."""
    buckets: dict[str, list[list[_Question]]] = {"single": [], "compositional": []}
    for kind, path, text in _CHAINS:
        found = [q for e in by_kind[kind] if (q := _walk(e, path, text, ents, index))]
        buckets["single" if len(path) == 1 else "compositional"].append(found)
    return buckets


def _round_robin(buckets: list[list[_Question]], n: int, rng: Random, what: str) -> list[_Question]:
    """Take ``n`` questions cycling over templates, so every template is used evenly."""
    queues = [rng.sample(bucket, len(bucket)) for bucket in buckets]
    picked: list[_Question] = []
    while len(picked) < n:
        live = [queue for queue in queues if queue]
        if not live:
            raise ValueError(
                f"the world has only {len(picked)} distinct {what} questions but {n} were "
                "requested; raise the entity counts (n_people, n_cities, ...) or lower "
                "n_train/n_dev/n_test"
            )
        for queue in live[: n - len(picked)]:
            picked.append(queue.pop())
    return picked


def _comparison(a: Entity, b: Entity, template: tuple[str, str, str, str],
                index: _Index) -> _Question:
    """A comparison question over ``a`` and ``b``; the answer is the min/max holder."""
    _, attr, select, text = template
    chain = [_hop(index, a, attr), _hop(index, b, attr)]
    pick = min if select == "min" else max
    winner = pick((a, b), key=lambda e: int(e.attrs[attr]))
    meta = {"type": "comparison", "hops": 2, "select": select,
            "supporting_ids": [h["passage_id"] for h in chain], "chain": chain,
            "template": f"{a.kind}.{attr}.{select}"}
    return text.format(a=a.name, b=b.name), [winner.name, *winner.aliases], meta


def _untied_pairs(templates: tuple[_PairTemplate, ...], by_kind: dict[str, list[Entity]],
                  n: int, rng: Random, what: str,
                  lower: str) -> list[tuple[_PairTemplate, Entity, Entity]]:
    """``n`` random pairs with different values of their template's attribute, cycling over
    ``templates``; a pair is used once per attribute. ``what``/``lower`` name the error's fix."""
    seen: set[tuple[str, str, str]] = set()
    out: list[tuple[_PairTemplate, Entity, Entity]] = []
    for attempt in range(50 * n + 100):
        if len(out) == n:
            break
        template = templates[attempt % len(templates)]
        kind, attr = template[:2]
        a, b = rng.sample(by_kind[kind], 2)
        key = (attr, *sorted((a.id, b.id)))
        if key not in seen and a.attrs[attr] != b.attrs[attr]:
            seen.add(key)
            out.append((template, a, b))
    if len(out) < n:
        raise ValueError(f"could only draw {len(out)} of {n} untied {what} questions; "
                         f"raise the entity counts or lower {lower}")
    return out


def _comparisons(by_kind: dict[str, list[Entity]], index: _Index, n: int,
                 rng: Random) -> list[_Question]:
    """``n`` comparison questions over random untied pairs, cycling over templates."""
    pairs = _untied_pairs(_COMPARISONS, by_kind, n, rng, "comparison", "the comparison share")
    return [_comparison(a, b, template, index) for template, a, b in pairs]


def _difference_answers(value: int, relation: str) -> list[str]:
    """Spellings of a difference of ``relation`` values: digits, commas, units ("67 years")."""
    surface, forms = _number_answers(value, relation)
    plain = dict.fromkeys((surface, str(value)))
    return [*forms, *(f"{f} {u}" for f in plain for u in _DIFFERENCE_UNITS.get(relation, ()))]


def _reasoning_question(a: Entity, b: Entity, template: _PairTemplate) -> _Question:
    """Both values stated in the question; the answer is their difference or the min/max holder."""
    kind, attr, op, text = template
    va, vb = int(a.attrs[attr]), int(b.attrs[attr])
    if op == "diff":
        answers = _difference_answers(abs(va - vb), attr)
    else:
        winner = (min if op == "min" else max)((a, b), key=lambda e: int(e.attrs[attr]))
        answers = [winner.name, *winner.aliases]
    meta = {"type": "reasoning", "hops": 0, "supporting_ids": [], "chain": [],
            "needs_retrieval": False, "template": f"{kind}.{attr}.{op}"}
    question = text.format(a=a.name, b=b.name, va=_number_answers(va, attr)[0],
                           vb=_number_answers(vb, attr)[0])
    return question, answers, meta


def _reasoning(ents: dict[str, Entity], cfg: WorldConfig) -> dict[str, list[QARecord]]:
    """Reasoning-only questions per split, drawn by their own generator so that the main
    one's draws (hence corpus and QA splits) do not depend on ``n_reasoning``."""
    rng = Random(f"{cfg.seed}-reasoning")
    sizes = cfg.reasoning_sizes()
    pairs = _untied_pairs(_REASONING, _by_kind(ents), sum(sizes.values()), rng, "reasoning",
                          "n_reasoning")
    pool = [_reasoning_question(a, b, template) for template, a, b in pairs]
    rng.shuffle(pool)
    return _cut(pool, sizes, "world-reasoning")


def _type_counts(mix: dict[str, float], total: int) -> dict[str, int]:
    """Split ``total`` by ``mix`` with largest remainders, so counts sum to ``total``."""
    raw = {t: mix[t] * total for t in QUESTION_TYPES}
    counts = {t: int(raw[t]) for t in QUESTION_TYPES}
    by_remainder = sorted(QUESTION_TYPES, key=lambda t: counts[t] - raw[t])
    for t in by_remainder[: total - sum(counts.values())]:
        counts[t] += 1
    return counts


def _questions(ents: dict[str, Entity], index: _Index, cfg: WorldConfig,
               rng: Random) -> dict[str, list[QARecord]]:
    """Draw the question pool by type, shuffle it and cut it into the splits."""
    sizes = {"train": cfg.n_train, "dev": cfg.n_dev, "test": cfg.n_test}
    counts = _type_counts(cfg.question_mix, sum(sizes.values()))
    by_kind = _by_kind(ents)
    buckets = _chain_buckets(by_kind, ents, index)
    pool = (_round_robin(buckets["single"], counts["single"], rng, "single-hop")
            + _round_robin(buckets["compositional"], counts["compositional"], rng,
                           "compositional")
            + _comparisons(by_kind, index, counts["comparison"], rng))
    rng.shuffle(pool)
    return _cut(pool, sizes, "world")


def _by_kind(ents: dict[str, Entity]) -> dict[str, list[Entity]]:
    """Entities grouped by kind, each group in id order."""
    return {k: [e for e in ents.values() if e.kind == k] for k in KINDS}


def _cut(pool: list[_Question], sizes: dict[str, int], prefix: str) -> dict[str, list[QARecord]]:
    """Cut ``pool`` into consecutive splits of ``sizes``; ids are ``<prefix>-<split>-<n>``."""
    splits, start = {}, 0
    for split in SPLITS:
        chunk = pool[start:start + sizes[split]]
        splits[split] = [QARecord(f"{prefix}-{split}-{i:04d}", q, a, m)
                         for i, (q, a, m) in enumerate(chunk)]
        start += sizes[split]
    return splits


# ---------------------------------------------------------------- public API

def generate_world(config: WorldConfig | None = None) -> World:
    """Build the whole fictional world (entities, corpus, QA and reasoning splits) from one seed.

    Same config, same world, byte for byte; the defaults run in well under a second.
    """
    cfg = config or WorldConfig()
    rng = Random(cfg.seed)
    namer = _Namer(rng)
    ents: dict[str, Entity] = {}
    _places(cfg, rng, namer, ents)
    _people(cfg, rng, namer, ents)
    _others(cfg, rng, namer, ents)
    passages, index = _corpus(ents, cfg, rng)
    return World(cfg, ents, passages, _questions(ents, index, cfg, rng), _reasoning(ents, cfg))


def write_world(world: World, out_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Write ``corpus.jsonl``, ``<split>.jsonl``, ``reasoning_<split>.jsonl`` and ``world.json``
    into ``out_dir``.

    Each file is written atomically (a reasoning file is empty when its count is 0). Returns
    the paths by name (``corpus``, ``train``, ``dev``, ``test``, ``reasoning_train``,
    ``reasoning_dev``, ``reasoning_test``, ``world``).
    """
    out = Path(out_dir)
    paths = {"corpus": write_jsonl(out / "corpus.jsonl", world.passages)}
    for split, records in world.splits.items():
        paths[split] = write_jsonl(out / f"{split}.jsonl", records)
    for split, records in world.reasoning.items():
        paths[f"reasoning_{split}"] = write_jsonl(out / f"reasoning_{split}.jsonl", records)
    doc = {"config": world.config.model_dump(),
           "entities": [asdict(e) for e in world.entities.values()]}
    paths["world"] = out / "world.json"
    atomic_write_text(paths["world"], [json.dumps(doc, indent=1, ensure_ascii=False) + "\n"])
    return paths
