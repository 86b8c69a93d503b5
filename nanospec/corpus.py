"""Synthetic English training text, generated from a small table of country facts.

Why synthetic? Speculative decoding needs a target model that knows things and a
draft model that mostly knows grammar. Templated prose gives both: the function
words are so regular that a tiny draft model learns them fast, while the ~190
facts ("The capital of Peru is Lima.") are the hard part. Countries are sampled
uniformly, not by fame, so every capital is stated hundreds of times.

Three document styles, mixed by CorpusConfig.mix: facts prose (profiles, Q/A,
comparisons), repetitive text (drills, lists, tables, quotes: the continuation
can be copied from earlier in the document, so n-gram prompt-lookup drafting
pays off) and small Python snippets over the same facts.

What this file deliberately leaves out:
  * real-world text and downloads: everything comes from data/countries.tsv + a seed
  * tokenization, document separators, shuffling and batching (the loader's job)
  * false statements and distractors ("The capital of X is not Y"): the eval
    prompt "The capital of X is" must only ever be followed by the right answer
  * facts that are messy to state (largest cities, seats of government, history)
"""

import functools
import importlib.resources
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Country:
    """One row of data/countries.tsv."""

    name: str
    capital: str
    continent: str
    language: str
    currency: str
    demonym: str
    neighbour: str  # one land neighbour, or "none" for island states
    population_millions: float


@functools.cache
def load_countries() -> tuple[Country, ...]:
    """Read the fact table shipped as package data (cached: it never changes)."""
    path = importlib.resources.files("nanospec") / "data" / "countries.tsv"
    header, *rows = path.read_text(encoding="utf-8").strip().splitlines()
    assert header.split("\t")[0] == "country", header
    countries = []
    for row in rows:
        *fields, population = row.split("\t")
        countries.append(Country(*fields, population_millions=float(population)))
    return tuple(countries)


@dataclass(frozen=True)
class CorpusConfig:
    seed: int = 0  # everything below is a pure function of this
    n_train_docs: int = 24_000  # ~9 million characters of training text
    n_val_docs: int = 560  # ~2.3% of that, drawn with an independent seed
    mix: tuple[float, float, float] = (0.6, 0.25, 0.15)  # facts, repetitive, code


# --- sentence templates --------------------------------------------------------
# The evaluation prompt is "The capital of {country} is", so that exact form is
# stated often (PROBE_RATE of capital sentences in prose). The other templates
# give variety but never start with "The capital of X is" (only the probe does).
PROBE = "The capital of {country} is {capital}."
PROBE_RATE = 0.2  # ~24% of all capital mentions once Q/A and dialogues are counted
CAPITAL_TEMPLATES = (
    "{capital} is the capital of {country}.",
    "The capital city of {country} is {capital}.",
    "{country}'s capital is {capital}.",
    "{country} has its capital in {capital}.",
    "The national capital of {country} is {capital}.",
    "{capital} serves as the capital of {country}.",
    "If you travel to the capital of {country}, you arrive in {capital}.",
    "In {country}, the capital is {capital}.",
    "{capital} is the capital city of {country}.",
    "The city of {capital} is the capital of {country}.",
    "{country} is a country whose capital is {capital}.",
    "{country} has {capital} as its capital.",
    "Ask anyone in {country} and they will tell you that the capital is {capital}.",
    "For {country}, the capital is {capital}.",
    "{capital}, the capital of {country}, is in {continent}.",
    "Students learn that the capital of {country} is {capital}.",
    "Remember: the capital of {country} is {capital}.",
    "Everyone knows that {capital} is the capital of {country}.",
    "{country} (capital: {capital}) is a country in {continent}.",
    "One fact about {country}: its capital is {capital}.",
    "You will find the capital of {country} at {capital}.",
    "As for {country}, its capital is {capital}.",
    "{capital} is known as the capital of {country}.",
    "A map of {country} shows its capital, {capital}.",
    "Which city is the capital of {country}? It is {capital}.",
    "Capital of {country}: {capital}.",
    "The capital of the country {country} is the city {capital}.",
    "The official capital of {country} is {capital}.",
)
FACT_TEMPLATES = {  # two or three short templates per line to keep the file compact
    "continent": (
        "{country} is in {continent}.",
        "{country} is a country in {continent}.",
        "{country} lies in {continent}.",
        "{country} is located in {continent}.",
        "You can find {country} in {continent}.",
        "{country} is one of the countries of {continent}.",
    ),
    "language": (
        "The main language of {country} is {language}.",
        "{language} is the main language of {country}.",
        "{language} is the main language spoken in {country}.",
        "In {country}, the main language is {language}.",
        "For {country}, the main language is {language}.",
    ),
    "currency": (
        "The currency of {country} is the {currency}.",
        "{country} uses the {currency} as its currency.",
        "In {country}, people pay with the {currency}.",
        "The {currency} is the currency used in {country}.",
        "Money in {country} is counted in the {currency}.",
    ),
    "demonym": (
        "The demonym for {country} is {demonym}.",
        "Someone from {country} is described as {demonym}.",
        "A person from {country} is {demonym}.",
        "The word for someone from {country} is {demonym}.",
    ),
    "neighbour": (
        "{country} borders {neighbour}.",
        "{neighbour} is a neighbour of {country}.",
        "{country} shares a border with {neighbour}.",
        "One of the neighbours of {country} is {neighbour}.",
        "{country} and {neighbour} share a land border.",
    ),
    "island": (
        "{country} has no land borders.",
        "{country} does not share a land border with any country.",
        "{country} is surrounded by sea and has no land neighbours.",
    ),  # when neighbour is "none"
    "population": (
        "{country} has about {people} people.",
        "The population of {country} is about {people}.",
        "About {people} people live in {country}.",
        "{country} is home to roughly {people} people.",
    ),
}
QUESTIONS = {  # kind -> (question, short answer)
    "capital": ("What is the capital of {country}?", "{capital}"),
    "continent": ("Which continent is {country} in?", "{continent}"),
    "language": ("What is the main language of {country}?", "{language}"),
    "currency": ("What is the currency of {country}?", "The {currency}"),
    "population": ("How many people live in {country}?", "About {people}"),
}
KINDS = tuple(k for k in FACT_TEMPLATES if k != "island")
PLURAL = {
    "capital": "capitals",
    "language": "languages",
    "currency": "currencies",
    "continent": "continents",
}


def people_phrase(millions: float) -> str:
    if millions >= 1000:
        return f"{millions / 1000:g} billion"
    if millions >= 1:
        return f"{millions:g} million"
    return f"{round(millions * 1000)} thousand"


def _fill(template: str, c: Country) -> str:
    return template.format(
        country=c.name,
        capital=c.capital,
        continent=c.continent,
        language=c.language,
        currency=c.currency,
        demonym=c.demonym,
        neighbour=c.neighbour,
        people=people_phrase(c.population_millions),
    )


def _capital_sentence(rng: random.Random, c: Country) -> str:
    return _fill(PROBE if rng.random() < PROBE_RATE else rng.choice(CAPITAL_TEMPLATES), c)


def _fact_sentence(rng: random.Random, c: Country, kind: str) -> str:
    if kind == "capital":
        return _capital_sentence(rng, c)
    if kind == "neighbour" and c.neighbour == "none":
        kind = "island"
    return _fill(rng.choice(FACT_TEMPLATES[kind]), c)


def _pick(rng: random.Random, k: int) -> list[Country]:
    return rng.sample(load_countries(), k)  # uniform: rare countries as often as famous ones


def _qa(rng: random.Random, c: Country, kind: str) -> str:
    question, answer = QUESTIONS[kind]
    if kind == "capital" and rng.random() < 0.3:
        return f"Q: {_fill(question, c)}\nA: {_fill(PROBE, c)}"
    return f"Q: {_fill(question, c)}\nA: {_fill(answer, c)}."


def _compare(rng: random.Random, a: Country, b: Country) -> str:
    same = lambda field: getattr(a, field) == getattr(b, field)  # noqa: E731
    parts = [
        f"{a.name} and {b.name} are both in {a.continent}."
        if same("continent")
        else f"{a.name} is in {a.continent}, while {b.name} is in {b.continent}.",
        rng.choice(
            (
                f"The capital of {a.name} is {a.capital}, and the capital of {b.name} is {b.capital}.",
                f"{a.capital} is the capital of {a.name}, while {b.capital} is the capital of {b.name}.",
            )
        ),
        f"Both {a.name} and {b.name} use the {a.currency}."
        if same("currency")
        else f"{a.name} uses the {a.currency}, but {b.name} uses the {b.currency}.",
        f"The main language of both {a.name} and {b.name} is {a.language}."
        if same("language")
        else f"The main language of {a.name} is {a.language}, but in {b.name} it is {b.language}.",
    ]
    if a.population_millions != b.population_millions:
        more = a.population_millions > b.population_millions
        parts.append(f"{a.name} has {'more' if more else 'fewer'} people than {b.name}.")
    head, *rest = parts
    return " ".join([head, *rng.sample(rest, rng.randint(2, len(rest)))])


def facts_document(rng: random.Random) -> str:
    """Short paragraph(s) of plain facts about 1-4 countries."""
    style = rng.choice(("profile", "paragraphs", "qa", "compare"))
    if style == "profile":  # one country, capital first, then a few other facts
        (c,) = _pick(rng, 1)
        kinds = rng.sample(KINDS, rng.randint(3, len(KINDS)))
        return " ".join([_capital_sentence(rng, c)] + [_fact_sentence(rng, c, k) for k in kinds])
    if style == "paragraphs":  # 2-4 countries, a short paragraph each
        paras = []
        for c in _pick(rng, rng.randint(2, 4)):
            kinds = ["capital"] + rng.sample(KINDS, rng.randint(1, 3))
            rng.shuffle(kinds)
            paras.append(" ".join(_fact_sentence(rng, c, k) for k in kinds))
        return "\n\n".join(paras)
    if style == "qa":  # mostly capital questions, sometimes another fact
        return "\n".join(
            _qa(rng, c, "capital" if rng.random() < 0.6 else rng.choice(tuple(QUESTIONS)))
            for c in _pick(rng, rng.randint(2, 4))
        )
    return _compare(rng, *_pick(rng, 2))


CHORUS = "Learn the capitals, learn them well, every country has a story to tell."


def repetitive_document(rng: random.Random) -> str:
    """Text whose continuation can be copied from earlier in the same document."""
    style = rng.choice(("drill", "list", "table", "quote", "dialogue", "summary", "song"))
    cs = _pick(rng, rng.randint(3, 6))
    if style == "drill":
        block = " ".join(
            _fact_sentence(rng, c, rng.choice(("capital", "capital", *KINDS))) for c in cs[:3]
        )
        return (
            f"Teacher: Repeat after me. {block}\nStudent: {block}\n"
            f"Teacher: Good. Once more, slowly. {block}\nStudent: {block}"
        )
    if style == "list":
        kind = rng.choice(("capital", "language", "currency", "continent"))
        items = "\n".join(f"- {c.name}: {getattr(c, kind)}" for c in cs)
        return (
            f"Here is a list of countries and their {PLURAL[kind]}:\n{items}\n\n"
            f"Let us read the list of countries and their {PLURAL[kind]} again:\n{items}"
        )
    if style == "table":
        rows = [f"| {c.name} | {c.capital} | {c.language} | {c.currency} |" for c in cs]
        table = "| country | capital | language | currency |\n|---|---|---|---|\n" + "\n".join(rows)
        words = " ".join(
            f"In the row for {c.name}, the capital is {c.capital}, the language is "
            f"{c.language}, and the currency is the {c.currency}."
            for c in cs
        )
        return f"{table}\n\nReading the table row by row: {words}\n\nThe same table once more:\n\n{table}"
    if style == "quote":
        c = cs[0]
        s = f"{_capital_sentence(rng, c)} {_fact_sentence(rng, c, rng.choice(KINDS))}"
        return (
            f'The teacher wrote on the board: "{s}" The students copied it into their notebooks: '
            f'"{s}" Then everyone read it aloud together: "{s}"'
        )
    if style == "dialogue":
        lines = [f"Alice: What is the capital of {c.name}?\nBob: {_fill(PROBE, c)}" for c in cs[:4]]
        answers = " ".join(_fill(PROBE, c) for c in cs[:4])
        return (
            "\n".join(lines) + f"\nAlice: Let me say them all back. {answers}\nBob: Yes. {answers}"
        )
    if style == "summary":
        sentences = " ".join(_fact_sentence(rng, c, rng.choice(("capital", *KINDS))) for c in cs)
        return f"{sentences}\n\nTo summarise: {sentences}"
    verses = [
        f"{c.capital}, {c.capital}, the capital of {c.name}!\nIn {c.name} they speak {c.language}, "
        f"in {c.name} they pay with the {c.currency}.\n{CHORUS}"
        for c in cs[:4]
    ]
    return f"{CHORUS}\n\n" + "\n\n".join(verses)


def _ident(name: str) -> str:
    return name.lower().replace(" ", "_").replace("-", "_")  # "Guinea-Bissau" -> guinea_bissau


def code_document(rng: random.Random) -> str:
    """A small, valid Python snippet built from the facts table."""
    cs = _pick(rng, rng.randint(3, 6))
    style = rng.choice(("dict", "records", "ifelse", "dataclass"))
    if style == "dict":
        field = rng.choice(("capital", "language", "currency", "continent"))
        table = (
            f"{PLURAL[field]} = {{\n"
            + "".join(f'    "{c.name}": "{getattr(c, field)}",\n' for c in cs)
            + "}"
        )
        output = "\n".join(f"# The {field} of {c.name} is {getattr(c, field)}." for c in cs)
        loop = f'for country in {PLURAL[field]}:\n    print(f"The {field} of {{country}} is {{{field}_of(country)}}.")'
        lookup = f"def {field}_of(country):\n    return {PLURAL[field]}[country]"
        return f"{table}\n\n\n{lookup}\n\n\n{loop}\n# Output:\n{output}\n"
    if style == "records":
        rows = "".join(
            f'    {{"name": "{c.name}", "capital": "{c.capital}", "continent": "{c.continent}"}},\n'
            for c in cs
        )
        target = rng.choice(cs).continent
        names = [c.name for c in cs if c.continent == target]
        return (
            f"countries = [\n{rows}]\n\n\ndef names_in(continent):\n"
            f'    return [c["name"] for c in countries if c["continent"] == continent]\n\n\n'
            f'print(names_in("{target}"))\n# {names}\n'
        )
    if style == "ifelse":
        field = rng.choice(("capital", "currency", "language"))
        branches = "".join(
            f'    {"if" if i == 0 else "elif"} country == "{c.name}":\n'
            f'        return "{getattr(c, field)}"\n'
            for i, c in enumerate(cs)
        )
        checks = "".join(f'assert {field}_of("{c.name}") == "{getattr(c, field)}"\n' for c in cs)
        return (
            f"def {field}_of(country):\n{branches}    else:\n"
            f"        raise KeyError(country)\n\n\n{checks}"
        )
    objs = "".join(
        f'{_ident(c.name)} = Country("{c.name}", "{c.capital}", {c.population_millions})\n'
        for c in cs
    )
    largest = max(
        cs, key=lambda c: c.population_millions
    )  # max keeps the first of ties, like Python
    return (
        "from dataclasses import dataclass\n\n\n@dataclass\nclass Country:\n    name: str\n"
        f"    capital: str\n    population_millions: float\n\n\n{objs}"
        f"countries = [{', '.join(_ident(c.name) for c in cs)}]\n"
        "largest = max(countries, key=lambda c: c.population_millions)\n"
        f'print(f"{{largest.name}} has the most people; its capital is {{largest.capital}}.")\n'
        f"# {largest.name} has the most people; its capital is {largest.capital}.\n"
    )


def _documents(rng: random.Random, n: int, mix: tuple[float, float, float]) -> list[str]:
    makers = (facts_document, repetitive_document, code_document)
    return [rng.choices(makers, weights=mix)[0](rng) for _ in range(n)]


def build_corpus(config: CorpusConfig) -> tuple[list[str], list[str]]:
    """(train_docs, val_docs). Same config => identical output, on any machine: each split gets
    its own Random seeded from a string (hashed with SHA-512, so PYTHONHASHSEED doesn't matter)."""
    train = _documents(
        random.Random(f"nanospec-train-{config.seed}"), config.n_train_docs, config.mix
    )
    val = _documents(random.Random(f"nanospec-val-{config.seed}"), config.n_val_docs, config.mix)
    return train, val


def capital_prompts() -> list[tuple[str, str]]:
    """The evaluation set: ("The capital of France is", " Paris"), one per country."""
    return [(f"The capital of {c.name} is", f" {c.capital}") for c in load_countries()]
