"""Run benchmarks: ``python -m bench NAME [ARGS...]`` or ``python -m bench all``.

``NAME`` is a module ``bench/NAME_bench.py`` exposing ``main(argv) -> int``; ``all`` runs every
such module in turn with its default arguments. ``python -m bench plots`` draws the plots of
docs/benchmarks.md from the recorded results (bench/recorded/*.json; needs the ``bench`` extra).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

SUFFIX = "_bench"


def available() -> list[str]:
    """The benchmark names, from the ``*_bench.py`` modules next to this file."""
    return sorted(path.stem[: -len(SUFFIX)] for path in Path(__file__).parent.glob(f"*{SUFFIX}.py"))


def run(name: str, argv: list[str]) -> int:
    module = importlib.import_module(f"bench.{name}{SUFFIX}")
    print(f"== bench {name} ==", flush=True)
    status: int = module.main(argv)
    return status


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    names = available()
    if not args or args[0] in {"-h", "--help"}:
        print(__doc__)
        print("available:", ", ".join(names) or "(none)")
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name == "plots":
        from bench import plots  # noqa: PLC0415  # matplotlib only for this command

        return plots.main(rest)
    if name == "all":
        failed = [n for n in names if run(n, []) != 0]
        if failed:
            print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1 if failed else 0
    if name not in names:
        print(f"no benchmark {name!r}; available: {', '.join(names)}", file=sys.stderr)
        return 2
    return run(name, rest)


if __name__ == "__main__":
    sys.exit(main())
