"""Benchmark the bundle's notebooks: each executed headless on the demo store (issue 7 target).

Run with ``python benchmarks/bench_notebooks.py [--runs 3] [--no-write]``. The demo fleet is
built once (``durability.demo.build_fleet``, its plane served on loopback); then each notebook
is executed ``--runs`` times in turn (interleaved, so load drift hits them alike) through
``durability.bundle.execute`` — a fresh kernel of this interpreter every time, as ``durability
demo`` does. Beside them, the same runner on a one-cell notebook (``x = 1``): the floor of
kernel start and shutdown every notebook pays. Target: each notebook <= 30 s on the demo store.
The edge store is rebuilt before each run of ``restore_runs.ipynb`` (it restores a thread).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _results import publish

from durability import bundle
from durability.demo import build_fleet, notebook_parameters

TARGET_S = 30.0


def _floor_notebook(folder: Path) -> Path:
    nb = new_notebook()
    cell = new_code_cell("x = 1")
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = folder / "one_cell.ipynb"
    nbformat.write(nb, path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    started = datetime.now(UTC)
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    timings: dict[str, list[float]] = {name: [] for name in (*bundle.NOTEBOOK_NAMES, "one cell")}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        floor = _floor_notebook(folder)
        for run in range(args.runs):
            out = folder / f"run{run}"
            with build_fleet(out) as fleet:
                params = notebook_parameters(fleet.manifest(), fleet.plane.url, out / "charts")
                for name in bundle.NOTEBOOK_NAMES:
                    t = time.perf_counter()
                    bundle.execute(
                        bundle.NOTEBOOKS / name,
                        params[name],
                        out / "notebooks",
                        env=fleet.plane.env(),
                        cwd=out,
                    )
                    timings[name].append(time.perf_counter() - t)
                t = time.perf_counter()
                bundle.execute(floor, {}, out / "floor")
                timings["one cell"].append(time.perf_counter() - t)
            print(run, {k: round(v[-1], 2) for k, v in timings.items()})
    rows = []
    for name, values in timings.items():
        median = statistics.median(values)
        target = "" if name == "one cell" else f"<= {TARGET_S:.0f} s"
        verdict = "" if name == "one cell" else ("met" if median <= TARGET_S else "missed")
        label = f"`{name}`" if name != "one cell" else "one-cell notebook (kernel floor)"
        rows.append(
            f"| {label} | {median:.1f} | {min(values):.1f} | {max(values):.1f} | {target} | {verdict} |"
        )
    section = (
        "## Notebooks\n\n"
        f"`python benchmarks/bench_notebooks.py --runs {args.runs}` — {started:%Y-%m-%d %H:%M} UTC, "
        f"Python {platform.python_version()}; {platform.machine()}, 2 CPUs, load average {load} at "
        "the start. Each notebook executed headless on the demo store (`durability.bundle.execute`: "
        "a fresh kernel each time, parameters injected, charts saved as PNG), as `durability demo` "
        f"does; the fleet rebuilt before each round; medians of {args.runs} runs, wall seconds.\n\n"
        "| notebook | median s | min s | max s | target | |\n| --- | ---: | ---: | ---: | --- | --- |\n"
        + "\n".join(rows)
        + "\n\nNo peer runs these notebooks. The one-cell row is the floor every notebook pays "
        "(kernel start, shutdown); the rest is imports (pandas, matplotlib, ipywidgets: about 2 s "
        "in a cold kernel), the frames and sweep plans over the demo's 51 threads, and rendering "
        "the charts to PNG. The load average at the start is in the line above; the VM's speed also varies between sessions (the floor row is the yardstick).\n"
    )
    publish("## Notebooks", section, write=not args.no_write)


if __name__ == "__main__":
    main()
