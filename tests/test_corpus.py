"""Tests for nanospec.corpus: the fact table and the synthetic training text."""

import dataclasses
import random

import pytest

from nanospec.corpus import (
    CorpusConfig,
    build_corpus,
    capital_prompts,
    code_document,
    facts_document,
    load_countries,
    repetitive_document,
)

CONTINENTS = {"Africa", "Asia", "Europe", "North America", "South America", "Oceania"}
SMALL = CorpusConfig(n_train_docs=600, n_val_docs=50)


@pytest.fixture(scope="module")
def medium_train():
    # Big enough that every one of ~190 countries shows up, still well under a second.
    train, _ = build_corpus(CorpusConfig(n_train_docs=4000, n_val_docs=10))
    return train


def test_table_shape():
    countries = load_countries()
    assert len(countries) >= 150
    assert len({c.name for c in countries}) == len(countries)
    assert len({c.capital for c in countries}) == len(countries)
    assert {c.continent for c in countries} <= CONTINENTS
    names = {c.name for c in countries}
    for c in countries:
        assert all(getattr(c, f.name) for f in dataclasses.fields(c)), c  # no empty cells
        assert c.neighbour == "none" or c.neighbour in names, c
        assert c.neighbour != c.name
        assert 0 < c.population_millions < 2000, c
        assert c.capital.isascii() and c.name.isascii()


def test_known_rows():
    by_name = {c.name: c for c in load_countries()}
    assert by_name["France"].capital == "Paris"
    assert by_name["Netherlands"].capital == "Amsterdam"
    assert by_name["Bolivia"].capital == "Sucre"
    assert by_name["Switzerland"].currency == "Swiss franc"
    assert by_name["Japan"].neighbour == "none"


def test_load_countries_is_cached():
    assert load_countries() is load_countries()


def test_deterministic_under_seed():
    assert build_corpus(SMALL) == build_corpus(SMALL)
    other = build_corpus(dataclasses.replace(SMALL, seed=1))
    assert other[0] != build_corpus(SMALL)[0]


def test_does_not_touch_global_random():
    random.seed(123)
    expected = random.random()
    random.seed(123)
    build_corpus(SMALL)
    assert random.random() == expected


def test_sizes_and_val_differs_from_train():
    train, val = build_corpus(SMALL)
    assert len(train) == SMALL.n_train_docs and len(val) == SMALL.n_val_docs
    assert val != train[: len(val)]  # independent seed, not a prefix of train
    overlap = set(val) & set(train)
    assert len(overlap) <= 0.02 * len(val)  # only the odd short Q/A doc can coincide


def test_every_capital_appears(medium_train):
    text = "\n".join(medium_train)
    missing = [c.name for c in load_countries() if f"{c.capital}" not in text]
    assert not missing
    # The exact evaluation form must be common, for every country.
    missing_probe = [
        c.name for c in load_countries() if f"The capital of {c.name} is {c.capital}" not in text
    ]
    assert not missing_probe


def test_probe_prefix_is_only_followed_by_the_answer(medium_train):
    text = "\n".join(medium_train)
    for c in load_countries():
        prompt = f"The capital of {c.name} is"
        start = text.find(prompt)
        while start != -1:
            after = text[start + len(prompt) :]
            assert after.startswith(" " + c.capital), text[start : start + 80]
            start = text.find(prompt, start + 1)


def test_capital_prompts_match_table():
    prompts = capital_prompts()
    countries = load_countries()
    assert len(prompts) == len(countries)
    for (prompt, answer), c in zip(prompts, countries):
        assert prompt == f"The capital of {c.name} is"
        assert answer == " " + c.capital


def test_all_three_styles_appear():
    train, _ = build_corpus(SMALL)
    n_code = sum(
        d.startswith(
            (
                "capitals =",
                "languages =",
                "currencies =",
                "continents =",
                "countries =",
                "def ",
                "from dataclasses",
            )
        )
        for d in train
    )
    n_repeat = sum(
        (
            "again" in d
            or "once more" in d.lower()
            or "summarise" in d
            or "Learn the capitals" in d
            or "read it aloud" in d
        )
        for d in train
    )
    assert 0.08 * len(train) < n_code < 0.25 * len(train)
    assert 0.15 * len(train) < n_repeat < 0.40 * len(train)
    assert len(train) - n_code - n_repeat > 0.45 * len(train)  # the rest is facts prose


def _has_repeated_span(doc: str, n: int = 8) -> bool:
    words = doc.split()
    spans = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return len(spans) != len(set(spans))


def test_repetitive_docs_really_repeat():
    rng = random.Random(0)
    docs = [repetitive_document(rng) for _ in range(300)]
    assert sum(map(_has_repeated_span, docs)) >= 0.9 * len(docs)


def test_code_docs_are_valid_python_and_their_output_comments_are_true(capsys):
    rng = random.Random(0)
    for _ in range(100):
        doc = code_document(rng)
        exec(compile(doc, "<doc>", "exec"), {})  # asserts inside the snippet must hold
        printed = capsys.readouterr().out.strip().splitlines()
        comments = [
            line[2:] for line in doc.splitlines() if line.startswith("# ") and line != "# Output:"
        ]
        assert printed == comments, doc


def test_facts_docs_are_plain_sentences():
    rng = random.Random(0)
    for _ in range(200):
        doc = facts_document(rng)
        assert doc.isascii() and doc.strip() == doc
        assert doc.endswith((".", "?"))
        assert "{" not in doc and "}" not in doc  # every template slot was filled
