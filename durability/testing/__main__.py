"""Run the conformance suite against a store from the command line.

``python -m durability.testing URL [URL …] [--core] [--cross-process] [--option k=v …]``
runs every check that applies to each store (only the core contract's with ``--core``) and
prints one line per check: ``ok``, ``skip`` (with why it does not apply) or ``FAIL`` (with the
assertion). The exit status is 1 when any check failed. Each URL must name a location the
suite may fill and reset: every check starts by resetting it (a fresh file, schema or key
prefix; never a store that holds anything of value).
"""

from __future__ import annotations

import argparse
import sys
import traceback

from durability.testing import CHECKS, CORE_CHECKS, StoreTarget, not_applicable


def _options(pairs: list[str]) -> dict[str, object]:
    options: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--option takes key=value, got {pair!r}")
        options[key] = {"true": True, "false": False}.get(value.lower(), value)
    return options


def main(argv: list[str] | None = None) -> int:
    """Run the suite; the exit status: 0 when every check that applies passed, else 1."""
    parser = argparse.ArgumentParser(prog="python -m durability.testing", description=__doc__)
    parser.add_argument("urls", nargs="+", metavar="URL", help="a store location to fill")
    parser.add_argument("--core", action="store_true", help="only the core contract's checks")
    parser.add_argument(
        "--cross-process", action="store_true", help="also run the checks that need processes"
    )
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="a store option"
    )
    args = parser.parse_args(argv)
    failed = 0
    for url in args.urls:
        target = StoreTarget(url, _options(args.option), cross_process=args.cross_process)
        for check in CORE_CHECKS if args.core else CHECKS:
            name = check.__name__.removeprefix("check_")
            reason = not_applicable(check, target)
            if reason is not None:
                print(f"skip {url} {name}: {reason}")
                continue
            with target.open() as store:  # each check starts from an empty store
                store.reset()
            try:
                check(target)
            except Exception as exc:
                failed += 1
                print(f"FAIL {url} {name}: {exc!r}")
                traceback.print_exc(file=sys.stderr)
            else:
                print(f"ok   {url} {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
