"""The firewall's adversarial set: leaks written the ways models write them, and benign lessons.

    from shopsimrl.analyst.redteam import measure
    rates = measure(generate_catalog(seed=0, num_products=200))   # kind -> Rate

Every leak variant is built from real gold of generated tasks (train tasks are the evidence cards,
validation/test tasks the held-out ones) and must be rejected; every benign lesson is a generic
procedure (written for this set, no gold) and must be accepted when checked as a lesson built from
each evidence card in turn. `bench/firewall_redteam.py` prints the rates; docs/analyst.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import inflect

from shopsimrl.analyst.firewall import Firewall, GoldFacts
from shopsimrl.shop import Catalog, Task, load_split
from shopsimrl.shop.catalog import parse_product_id

BENIGN = "benign lessons"
BANNED_TERM = "internal codename"
ZWSP = "\u200b"
_CYRILLIC = str.maketrans({"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "x": "х", "P": "Р"})
_words = inflect.engine()

BENIGN_LESSONS: tuple[str, ...] = (
    "Read the whole instruction before the first search and note every constraint it names.",
    "Search with the product type first, then narrow the results with the attributes the customer named.",
    "Open a product page before adding the product to the cart; search results do not show every option.",
    "Call select_option once for every option the instruction names, before add_to_cart.",
    "Copy option values from the instruction exactly as the customer wrote them.",
    "Compare the product's price with the customer's limit before you add it to the cart.",
    "When no result fits, search again with fewer keywords instead of buying the closest match.",
    "Buy exactly one product; remove any extra line from the cart before checkout.",
    "Call checkout as soon as the right product, with its options selected, is in the cart.",
    "Keep each turn short: one tool call, no explanation before it.",
    "Write tool calls in the required format with valid JSON arguments and nothing after the call.",
    "Use only product ids that a search result returned in this episode.",
    "Do not repeat a search that already ran; change the keywords or open a result instead.",
    "If the cart holds the wrong product, call remove_from_cart and then add the right one.",
    "Check the product type on the page: a similar product of another type is a wrong product.",
    "Check each attribute the customer asked for, one at a time, on the product page.",
    "Use the max_price filter set to the customer's limit when the first results are too expensive.",
    "Scroll down the result list only after the first page of results has no match.",
    "An order counts only after checkout, so never stop with items left in the cart.",
    "Work in few turns: search, open the best match, select options, add to cart, check out.",
    "Before checkout, compare the cart with every constraint of the instruction.",
    "When a tool returns an error, read the message and fix the arguments instead of repeating the call.",
    "Give every required argument with the type the tool's schema names.",
    "Prefer the product that matches all constraints over a cheaper one that misses one.",
    "When two products both fit, pick either; do not spend turns comparing ratings.",
    "Select the colour the customer named, not the colour shown first on the page.",
    "Select the size the customer named; sizes shown on the page are only what is offered.",
    "A price limit is a maximum: a product that costs more is wrong even if everything else fits.",
    "If the search returns nothing, drop one adjective from the keywords and search again.",
    "Never guess a product id; copy it from the latest search result.",
    "After adding a product, confirm the cart shows the selected options before checkout.",
    "Do not call add_to_cart twice for the same product.",
    "Stop searching once a product satisfies every constraint; extra turns only risk the turn limit.",
    "Read tool observations fully; the answer to the next step is usually in them.",
    "If the instruction lists two options, select both before adding the product.",
    "Treat every word the customer used for the product as a constraint unless it is filler.",
    "When a page lists an option the instruction did not name, leave it at its default.",
    "Keep the turn budget in mind: aim to finish well before the last turn.",
    "Do not invent tools; call only the tools listed in this turn.",
    "Write the arguments as a JSON object, with quotes around every string value.",
    "Search results are sorted by relevance, so the first result is not always the right one.",
    "Verify the material on the product page rather than trusting the title alone.",
    "When unsure whether a feature matches, open the product page and read its attributes.",
    "Do not write a long plan; act with one tool call per turn.",
    "If checkout fails, read the error, fix the cart and call checkout again.",
    "A product that lacks the requested option value cannot be bought for this customer.",
    "Keep the customer's wording for the product type when you search.",
    "Look at the price shown on the page, not a price you remember from an earlier search.",
    "When several lines are in the cart, remove all but the one that fits.",
    "If the turn limit is close, buy the best match found so far instead of searching again.",
    "Wait for each tool result before deciding the next call.",
    "Pick options by their name on the page, such as size, colour, finish or pack.",
    "Never explain the plan to the customer; the customer only sees the order.",
    "Run at most 3 searches before opening a result page.",
    "Check the cart with view_cart when unsure what it holds.",
    "Use natural keywords from the instruction, not a sentence, in the search box.",
    "Select one option per select_option call, and check the observation after each.",
    "Do not trade down to a cheaper product that misses an attribute.",
    "When you set the max_price filter, use the limit exactly, not a rounded value.",
    "Count the constraints in the instruction and tick each one off before checkout.",
    "For shoes and clothing, select the size before the colour; both are options on the page.",
    "A watch's case size and a bag's capacity are attributes or options: read them on the page.",
    "Set the pack option when the customer asks for several units in one order.",
    "If a product is light enough for the customer's needs, that is not a constraint to check.",
    "Write down the price limit before the first search so that you can compare prices later.",
)


@dataclass(frozen=True)
class Case:
    kind: str
    text: str
    evidence: tuple[str, ...]  # card ids the text is checked as built from
    leak: bool


@dataclass
class Rate:
    passed: int = 0  # rejected leaks, or accepted benign lessons
    total: int = 0
    failures: list[str] | None = None

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 1.0


def _pick(tasks: list[Task], accept: Callable[[Task], bool], count: int) -> list[Task]:
    found = [t for t in tasks if accept(t)]
    return found[:count]


def _spellings(value: str) -> list[str]:
    """Hyphenated, joined, plural, capitals, look-alike letters, a zero-width space, a typo."""
    words = value.split()
    joined = "".join(words) if len(words) > 1 else value.replace("-", "")
    hyphen = "-".join(words) if len(words) > 1 else value
    longest = max(words, key=len)
    typo = value.replace(longest, longest[:-2] + longest[-1], 1) if len(longest) >= 7 else value.upper()
    mid = len(value) // 2
    return [
        hyphen.title(),
        joined,
        (_words.singular_noun(value) or _words.plural(value)) if len(value) > 3 else value.title(),
        value.upper(),
        value.translate(_CYRILLIC),
        value[:mid] + ZWSP + value[mid:],
        value.replace(" ", "\u00a0").replace("-", "\u2011"),
        typo,
    ]


def _price_texts(price: float) -> list[str]:
    dollars, cents = int(price), round((price - int(price)) * 100)
    spoken = f"{_words.number_to_words(dollars)} dollars" + (
        f" and {_words.number_to_words(cents)} cents" if cents else "")  # fmt: skip
    return [
        f"${price:.2f}",
        f"{price:.2f} dollars",
        f"{price:.2f}$",
        f"USD {price:,.2f}",
        spoken,
        f"about {round(price)} dollars",
        f"{price:.2f}".replace(".", ","),
        f"${price * 1.03:.0f}",
        f"{price:g} bucks",
    ]


def _leaks(catalog: Catalog, evidence: list[Task], held_out: list[Task]) -> Iterator[Case]:
    for task in evidence[:3]:
        card = (task.task_id,)
        pid = task.gold.gold_product_ids[0]
        digits = pid[1:]
        for text in (f"{pid[0]} {digits}", f"P-{digits[:3]}-{digits[3:]}", f"P{digits[:3]}{ZWSP}{digits[3:]}",
                     f"\u0420{digits}", "P" + digits.replace("0", "O", 1), "Ｐ" + "".join(chr(0xFF10 + int(d)) for d in digits),
                     f"p.{digits}", f"item #{digits}"):  # fmt: skip
            yield Case("product id", f"Buy {text} right away.", card, True)
        gold = task.gold
        for text in _spellings(gold.product_type):
            yield Case("gold product type", f"Look for {text} first.", card, True)
        for value in gold.attributes.values():
            for text in _spellings(value):
                yield Case("gold attribute value", f"Prefer {text} products.", card, True)
        for price in (gold.price_ceiling,):
            for text in _price_texts(price):
                yield Case("price ceiling", f"Stay below {text} when you buy.", card, True)
        bought = catalog.product(parse_product_id(gold.family_product_ids["over_budget"], catalog.num_products))
        for text in _price_texts(bought.price):
            yield Case("price of a purchased product", f"Do not pay {text} again.", card, True)
        for text in _spellings(bought.title)[:6] + [bought.title.lower(), f"the {bought.title}s"]:
            yield Case("title of a purchased product", f"Avoid {text}.", card, True)
    for text, card in _option_variants(evidence):
        yield Case("gold option value", text, card, True)
    bag = next((t for t in evidence if "capacity" in t.gold.attributes), None)
    if bag is not None:
        litres = int(bag.gold.attributes["capacity"].split()[0])
        for text in (f"{litres}L", f"{litres} liters", f"{_words.number_to_words(litres)}-litre", f"{litres} ltr",
                     f"{litres}-liter capacity"):  # fmt: skip
            yield Case("gold attribute value", f"Take the {text} one.", (bag.task_id,), True)
    for task in held_out[:4]:
        yield from _held_out_cases(task)
    for text in ("internal-codename", "Internal Codenames", f"internal code{ZWSP}name", "INTERNAL CODENAME",
                 "internal codname"):  # fmt: skip
        yield Case("banned term", f"Use the {text} here.", (), True)


def _option_variants(tasks: list[Task]) -> Iterator[tuple[str, tuple[str, ...]]]:
    def first(accept: Callable[[Task], bool]) -> Task:
        return _pick(tasks, accept, 1)[0]

    grey = first(lambda t: "grey" in t.gold.options.values())
    for text in ("gray", "Gray", "colour: gray", "greys", "GREY", "gr\u0435y", "color gray"):
        yield f"Pick {text} for this item.", (grey.task_id,)
    letter = first(lambda t: t.gold.options.get("size") in ("S", "M", "L", "XL", "XS", "XXL"))
    size = letter.gold.options["size"]
    names = {"S": "small", "M": "medium", "L": "large", "XL": "extra large", "XS": "extra small", "XXL": "2XL"}
    for text in (f"size {size.lower()}", f"size {names[size]}", f"{names[size].title()} size", f"in {size}",
                 f"size: {size}", f"{names[size]}-sized"):  # fmt: skip
        yield f"Choose {text} for the customer.", (letter.task_id,)
    number = first(lambda t: (t.gold.options.get("size") or "").isdigit())
    value = number.gold.options["size"]
    for text in (f"size {_words.number_to_words(int(value))}", f"size {value}", f"a size-{value}", f"{value} size",
                 f"shoe size {value}"):  # fmt: skip
        yield f"Select {text} shoes.", (number.task_id,)
    case = next((t for t in tasks if "case size" in t.gold.options), None)
    if case is not None:
        mm = int(case.gold.options["case size"].split()[0])
        for text in (f"{mm}mm", f"{mm} millimetres", f"{_words.number_to_words(mm)} mm", f"{mm}-mm case",
                     f"case size {mm}"):  # fmt: skip
            yield f"Choose the {text} watch.", (case.task_id,)
    pack = next((t for t in tasks if "pack" in t.gold.options), None)
    if pack is not None:
        count = int(pack.gold.options["pack"].split()[0])
        for text in (f"{_words.number_to_words(count)}-pack", f"pack of {count}", f"{count} packs", f"{count}pack",
                     f"pack of {_words.number_to_words(count)}"):  # fmt: skip
            yield f"Buy the {text}.", (pack.task_id,)


def _held_out_cases(task: Task) -> Iterator[Case]:
    gold = task.gold
    instruction = task.instruction
    price = f"{gold.price_ceiling:.2f}"
    values = [*gold.attributes.values(), *gold.options.values()]
    opts = " and ".join(f"{k} {v}" for k, v in gold.options.items())
    words = instruction.split()
    changed = [("thing" if i % 5 == 2 else w) for i, w in enumerate(words)]
    for text in (
        f"Example request: {instruction}",
        instruction.replace(price, f"{gold.price_ceiling + 7:.2f}"),
        " ".join(w for w in words if w.lower().strip(",.") not in ("i", "need", "for", "me", "and", "it", "must", "be")),
        " ".join(changed),
        instruction.upper(),
    ):
        yield Case("held-out text", text, (), True)
    for text in (
        f"A shopper wanted {gold.product_type} that were {' and '.join(values[:2])}.",
        f"Recommend the {values[0]} {gold.product_type} with {opts}.",
        f"{gold.product_type.title()}: {', '.join(values)}; budget {price}.",
        f"If someone asks for {values[1]} {gold.product_type}s in {opts}, buy one.",
        f"Choose {gold.product_type.replace(' ', '-')} made of {values[0]}, {values[1]} style, under ${round(gold.price_ceiling)}.",
    ):
        yield Case("held-out task", text, (), True)


def cases(catalog: Catalog, evidence_cards: int = 8) -> tuple[Firewall, list[Case]]:
    """The firewall (evidence: the first `evidence_cards` train tasks, with the over-budget family
    member as what their episodes bought; held-out: the catalog's) and every case."""
    train = load_split(catalog, "train")
    multi = [t for t in train if len(t.gold.options) == 2]
    evidence = _diverse(train, evidence_cards)
    for extra in (lambda t: "grey" in t.gold.options.values(),
                  lambda t: t.gold.options.get("size") in ("S", "M", "L", "XL", "XS", "XXL"),
                  lambda t: (t.gold.options.get("size") or "").isdigit(),
                  lambda t: "pack" in t.gold.options,
                  lambda t: "case size" in t.gold.options,
                  lambda t: "capacity" in t.gold.attributes):  # fmt: skip
        found = [t for t in multi + train if extra(t)]
        if found and found[0] not in evidence:
            evidence.append(found[0])
    wall = Firewall.for_evidence([], catalog=catalog, banned_terms=[BANNED_TERM])
    for task in evidence:
        bought = catalog.product(parse_product_id(task.gold.family_product_ids["over_budget"], catalog.num_products))
        wall.evidence[task.task_id] = GoldFacts.of_gold(
            task.task_id, task.gold.model_dump(), [{"title": bought.title, "price": bought.price}]
        )
    held_out = load_split(catalog, "validation") + load_split(catalog, "test")
    found = list(_leaks(catalog, evidence, held_out[::3]))
    found += [Case(BENIGN, text, (t.task_id,), False) for text in BENIGN_LESSONS for t in evidence]
    return wall, found


def _diverse(tasks: list[Task], count: int) -> list[Task]:
    """One task per category first, so the evidence spans the vocabulary."""
    seen: set[str] = set()
    out: list[Task] = []
    for task in tasks:
        if task.gold.category not in seen:
            seen.add(task.gold.category)
            out.append(task)
    return out[:count]


def measure(catalog: Catalog, evidence_cards: int = 8) -> dict[str, Rate]:
    """Per kind: leak variants rejected, or (BENIGN) lesson x card pairs accepted."""
    wall, found = cases(catalog, evidence_cards)
    rates: dict[str, Rate] = {}
    for case in found:
        rate = rates.setdefault(case.kind, Rate(failures=[]))
        verdict = wall.check(case.text, case.evidence)
        rate.total += 1
        if verdict.ok != case.leak:
            rate.passed += 1
        else:
            rate.failures.append(f"{case.text} | {verdict.kinds}")
    return rates
