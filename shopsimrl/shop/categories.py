"""The shop's vocabulary: categories, product types, typed attributes and options.

Kept as data (frozen dataclasses) so the catalog generator stays generic: a category names its
product types, its attribute dimensions (fixed properties of a product, e.g. material) and its
option dimensions (choices the buyer selects, e.g. size and colour), a price range and brands.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CategorySpec:
    name: str
    product_types: tuple[str, ...]
    attributes: tuple[tuple[str, tuple[str, ...]], ...]  # (dimension, values); order is stable
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (dimension, values); order is stable
    price_range: tuple[float, float]
    brands: tuple[str, ...]

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.attributes)

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.options)


_COLOURS = ("black", "white", "navy", "grey", "red", "green", "beige", "brown")

CATEGORIES: tuple[CategorySpec, ...] = (
    CategorySpec(
        name="footwear",
        product_types=("running shoes", "hiking boots", "sneakers", "sandals"),
        attributes=(
            ("material", ("leather", "mesh", "canvas", "suede")),
            ("feature", ("waterproof", "lightweight", "slip-resistant", "breathable")),
        ),
        options=(("size", ("6", "7", "8", "9", "10", "11", "12")), ("colour", _COLOURS)),
        price_range=(25.0, 180.0),
        brands=("Stride", "Trailcraft", "Nimbo", "Pacer", "Urbano"),
    ),
    CategorySpec(
        name="tops",
        product_types=("t-shirt", "polo shirt", "hoodie", "button-down shirt"),
        attributes=(
            ("material", ("cotton", "linen", "polyester", "merino wool")),
            ("fit", ("slim fit", "regular fit", "relaxed fit")),
        ),
        options=(("size", ("XS", "S", "M", "L", "XL", "XXL")), ("colour", _COLOURS)),
        price_range=(12.0, 90.0),
        brands=("Loomwell", "Basics Co", "Northline", "Tessa", "Kindred"),
    ),
    CategorySpec(
        name="outerwear",
        product_types=("rain jacket", "puffer jacket", "fleece jacket", "trench coat"),
        attributes=(
            ("material", ("nylon", "down", "fleece", "cotton twill")),
            ("feature", ("waterproof", "windproof", "packable", "insulated")),
        ),
        options=(("size", ("S", "M", "L", "XL")), ("colour", _COLOURS)),
        price_range=(40.0, 260.0),
        brands=("Alpenrow", "Driftway", "Cirrus", "Harbor", "Kestrel"),
    ),
    CategorySpec(
        name="bags",
        product_types=("backpack", "laptop bag", "duffel bag", "tote bag"),
        attributes=(
            ("material", ("canvas", "leather", "nylon", "recycled polyester")),
            ("capacity", ("15 litre", "25 litre", "35 litre")),
        ),
        options=(("colour", _COLOURS),),
        price_range=(20.0, 160.0),
        brands=("Carryall", "Voyager", "Packwise", "Metro", "Summit"),
    ),
    CategorySpec(
        name="audio",
        product_types=("wireless earbuds", "over-ear headphones", "bluetooth speaker", "soundbar"),
        attributes=(
            ("connectivity", ("bluetooth 5.3", "wired", "wi-fi")),
            ("feature", ("noise cancelling", "water resistant", "long battery")),
        ),
        options=(("colour", ("black", "white", "silver", "blue")),),
        price_range=(30.0, 350.0),
        brands=("Sonique", "Bassline", "Auralis", "Tonehaus", "Echo Labs"),
    ),
    CategorySpec(
        name="lighting",
        product_types=("desk lamp", "floor lamp", "string lights", "ceiling light"),
        attributes=(
            ("bulb", ("led", "halogen", "incandescent")),
            ("feature", ("dimmable", "smart", "adjustable arm", "motion sensor")),
        ),
        options=(("finish", ("matte black", "brass", "chrome", "white")),),
        price_range=(15.0, 220.0),
        brands=("Lumio", "Brightside", "Halo", "Lanterna", "Glow & Co"),
    ),
    CategorySpec(
        name="kitchen",
        product_types=("coffee mug", "water bottle", "chef knife", "frying pan"),
        attributes=(
            ("material", ("ceramic", "stainless steel", "glass", "cast iron")),
            ("feature", ("dishwasher safe", "insulated", "non-stick")),
        ),
        options=(("colour", _COLOURS), ("pack", ("1 pack", "2 pack", "4 pack"))),
        price_range=(8.0, 140.0),
        brands=("Hearth", "Copperleaf", "Kitchenary", "Mesa", "Oakhome"),
    ),
    CategorySpec(
        name="furniture",
        product_types=("office chair", "bookshelf", "side table", "bar stool"),
        attributes=(
            ("material", ("oak", "walnut", "metal", "bamboo")),
            ("style", ("modern", "industrial", "mid-century", "rustic")),
        ),
        options=(("colour", ("natural", "black", "white", "grey")),),
        price_range=(45.0, 480.0),
        brands=("Arbor", "Nordvik", "Loftline", "Woodlane", "Cubix"),
    ),
    CategorySpec(
        name="watches",
        product_types=("analog watch", "smartwatch", "dive watch", "fitness tracker"),
        attributes=(
            ("band", ("leather band", "steel band", "silicone band")),
            ("feature", ("water resistant", "gps", "solar powered", "sapphire glass")),
        ),
        options=(
            ("case size", ("38 mm", "40 mm", "42 mm", "44 mm")),
            ("colour", ("black", "silver", "gold")),
        ),
        price_range=(35.0, 600.0),
        brands=("Chronos", "Tempo", "Meridian", "Axis", "Pulse"),
    ),
    CategorySpec(
        name="fitness",
        product_types=("yoga mat", "dumbbell set", "resistance bands", "foam roller"),
        attributes=(
            ("material", ("natural rubber", "tpe", "pvc", "neoprene")),
            ("feature", ("non-slip", "extra thick", "eco-friendly", "portable")),
        ),
        options=(("colour", ("purple", "black", "blue", "green", "pink")),),
        price_range=(10.0, 150.0),
        brands=("Flexa", "Corebody", "Zenfit", "Ironline", "Motiv"),
    ),
)


def category_names() -> tuple[str, ...]:
    return tuple(spec.name for spec in CATEGORIES)
