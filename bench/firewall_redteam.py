"""The firewall's adversarial set: per kind of leak, the share of variants rejected; the share of
benign lessons accepted (each checked as a lesson built from each evidence card in turn).

    .venv/bin/python bench/firewall_redteam.py                    # catalog seed 0, 200 products
    .venv/bin/python bench/firewall_redteam.py --num-products 2000 --show-failures

The set is shopsimrl.analyst.redteam (built from real gold of generated tasks); the default-tier
test tests/analyst/test_analyst_firewall_redteam.py asserts >= 95% for every row. Failures print
the text that got through, which carries gold values: keep that output local.
"""

from __future__ import annotations

import argparse
import time

from shopsimrl.analyst.redteam import BENIGN, measure
from shopsimrl.shop import generate_catalog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--catalog-seed", type=int, default=0)
    parser.add_argument("--num-products", type=int, default=200)
    parser.add_argument("--show-failures", action="store_true", help="print the texts that were misjudged")
    args = parser.parse_args()
    start = time.perf_counter()
    rates = measure(generate_catalog(seed=args.catalog_seed, num_products=args.num_products))
    seconds = time.perf_counter() - start
    print(f"catalog seed {args.catalog_seed}, {args.num_products} products ({seconds:.1f} s)")
    print(f"{'kind':32} {'passed':>7} {'total':>6} {'rate':>7}")
    for kind in sorted(rates, key=lambda k: (k == BENIGN, k)):
        rate = rates[kind]
        what = "accepted" if kind == BENIGN else "rejected"
        print(f"{kind:32} {rate.passed:>7} {rate.total:>6} {rate.fraction:>7.1%}  {what}")
        if args.show_failures:
            for failure in rate.failures or []:
                print(f"    {failure}")


if __name__ == "__main__":
    main()
