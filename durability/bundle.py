"""Running the bundle's notebooks headless: parameters injected, outputs and charts kept.

:func:`execute` runs one notebook top to bottom in a fresh kernel of the current interpreter
(nbclient), after replacing the source of its cell tagged ``parameters`` with the values given —
papermill's convention, without papermill: the cell keeps its tag and gains
``injected-parameters``, so a reader sees which values the run used. The executed copy is
written to ``out_dir`` even when a cell fails (then :class:`~durability.errors.NotebookError`
names the cell and the error). ``durability demo`` runs the three notebooks this way and
``durability lab`` uses :func:`with_parameters` to hand JupyterLab copies that point at the
demo store::

    from durability import bundle

    result = bundle.execute(
        bundle.notebook("explore_store.ipynb"),
        {"store_url": "sqlite:///durability-out/demo.db", "output_dir": "durability-out/charts"},
        Path("durability-out/notebooks"),
    )
    result.path, result.seconds
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durability.errors import ConfigError, NotebookError

#: The bundle's notebooks, in reading order.
NOTEBOOK_NAMES = ("explore_store.ipynb", "plan_retention.ipynb", "restore_runs.ipynb")


def _notebooks_dir() -> Path:
    """Where the notebooks are: ``durability/notebooks`` in an installed wheel (the build copies
    the top-level ``notebooks/`` there), else ``notebooks/`` beside the package in a checkout."""
    package = Path(__file__).resolve().parent
    installed = package / "notebooks"
    return installed if installed.is_dir() else package.parent / "notebooks"


#: The folder holding the bundled notebooks (see :func:`notebook`).
NOTEBOOKS = _notebooks_dir()

PARAMETERS_TAG = "parameters"
INJECTED_TAG = "injected-parameters"
KERNEL_NAME = "python3"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True, slots=True)
class Executed:
    """One executed notebook: where it was written, how long it took, the values it ran with."""

    path: Path
    seconds: float
    parameters: Mapping[str, Any]


def notebook(name: str, folder: Path | None = None) -> Path:
    """The path of the bundled notebook ``name`` (in ``folder``, default :data:`NOTEBOOKS`).

    Raises:
        NotebookError: The notebook is not there (an install without its notebooks).
    """
    path = (folder or NOTEBOOKS) / name
    if not path.is_file():
        raise NotebookError(
            f"cannot find the notebook {name} in {path.parent}: this copy of durability-toolkit "
            "was installed without its notebooks; reinstall it from a wheel or a clone "
            "(`pip install --force-reinstall durability-toolkit`)"
        )
    return path


def declared_parameters(nb: Any) -> dict[str, Any]:
    """The names (and literal defaults, else ``None``) the ``parameters`` cell assigns."""
    cell = _parameters_cell(nb, Path(str(nb.metadata.get("name", "notebook"))))
    names: dict[str, Any] = {}
    for node in ast.parse(cell.source).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and node.value is not None:
                    try:
                        names[target.id] = ast.literal_eval(node.value)
                    except ValueError:
                        names[target.id] = None
    return names


def _parameters_cell(nb: Any, path: Path) -> Any:
    cells = [c for c in nb.cells if PARAMETERS_TAG in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ConfigError(
            f"cannot inject parameters into {path.name}: it has {len(cells)} cells tagged "
            f"{PARAMETERS_TAG!r}; tag exactly one code cell of plain assignments"
        )
    return cells[0]


def with_parameters(path: Path, parameters: Mapping[str, Any]) -> Any:
    """The notebook at ``path`` (an ``nbformat`` node) with its ``parameters`` cell replaced.

    Raises :class:`~durability.errors.ConfigError` for a notebook without exactly one
    ``parameters`` cell, or a parameter that cell does not declare (a typo would otherwise be
    ignored silently and the notebook run on its defaults), and
    :class:`~durability.errors.NotebookError` when there is no notebook at ``path``.
    """
    import nbformat

    nb = nbformat.read(notebook(path.name, path.parent), as_version=4)  # type: ignore[no-untyped-call]
    cell = _parameters_cell(nb, path)
    known = declared_parameters(nb)
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise ConfigError(
            f"cannot run {path.name} with parameters {unknown}: its parameters cell declares "
            f"only {sorted(known)}; use those names"
        )
    lines = ["# Parameters injected for this run (the notebook's defaults are replaced)."]
    lines += [f"{name} = {value!r}" for name, value in parameters.items()]
    untouched = [name for name in known if name not in parameters]
    lines += [f"{name} = {known[name]!r}" for name in untouched]
    cell.source = "\n".join(lines) + "\n"
    cell.metadata["tags"] = [PARAMETERS_TAG, INJECTED_TAG]
    return nb


def execute(
    notebook: Path,
    parameters: Mapping[str, Any],
    out_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
) -> Executed:
    """Execute ``notebook`` with ``parameters`` and write the executed copy to ``out_dir``.

    The kernel is ``python3`` of this interpreter (``sys.executable``), whatever kernelspecs
    are installed, and imports the same ``durability`` as the caller. ``env`` adds environment
    variables for the kernel (an API key, say: they never enter the notebook); ``cwd`` is the
    kernel's working directory (default ``out_dir``). ``MPLBACKEND`` is dropped from the
    kernel's environment: a forced ``Agg`` turns inline charts into text.

    Raises:
        ConfigError: The notebook's ``parameters`` cell is missing or does not declare a name.
        NotebookError: A cell failed (the partly executed notebook was written all the same),
            or there is no notebook at ``notebook``.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = with_parameters(notebook, parameters)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / notebook.name
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="durability-kernels-") as kernels:
        km = _kernel_manager(Path(kernels))
        client = NotebookClient(
            nb,
            km=km,
            timeout=timeout,
            startup_timeout=120,
            kernel_name=KERNEL_NAME,
            resources={"metadata": {"path": str(cwd or out_dir)}},
        )
        try:
            client.execute(env=_kernel_env(env))
        except CellExecutionError as exc:
            nbformat.write(nb, target)  # type: ignore[no-untyped-call]
            raise NotebookError(
                f"cannot execute {notebook.name}: a cell failed (the partly executed copy is "
                f"{target}); fix the store or parameters it names:\n{_ANSI.sub('', str(exc))[-2000:]}"
            ) from None
        finally:
            # nbclient leaves a kernel manager it was given running: shut the kernel down here.
            if km.has_kernel:
                km.shutdown_kernel(now=False)
    nbformat.write(nb, target)  # type: ignore[no-untyped-call]
    return Executed(target, time.perf_counter() - started, dict(parameters))


def _kernel_manager(kernels: Path) -> Any:
    """A kernel manager whose only ``python3`` kernelspec is this interpreter."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = kernels / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (durability)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    specs = KernelSpecManager(kernel_dirs=[str(kernels)], ensure_native_kernel=False)
    # IPC transport (its sockets in the temp folder): no TCP port to take, and no "running
    # over TCP without encryption" warning on every start.
    return KernelManager(
        kernel_name=KERNEL_NAME,
        kernel_spec_manager=specs,
        transport="ipc",
        ip=str(kernels / "kernel-ipc"),
    )


def source_root() -> Path | None:
    """The directory holding this ``durability`` package when it runs from a source tree
    (a clone or worktree), so a kernel imports the same code; ``None`` when installed."""
    root = Path(__file__).resolve().parent.parent
    return None if "site-packages" in root.parts else root


def _kernel_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    root = source_root()
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def chart(fig: Any, name: str, output_dir: Path | str) -> None:
    """Save ``fig`` as ``output_dir/name.png``, show that PNG in the notebook, close the figure.

    What the notebooks call for every chart, so the executed notebook and the PNG folder hold
    the same picture. The PNG itself is displayed (not the figure): the plots are built with
    matplotlib's object API, which no notebook backend renders by itself.
    """
    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    path = Path(output_dir) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    display(Image(filename=str(path)))  # type: ignore[no-untyped-call]


def write_copies(
    dest: Path, parameters: Mapping[str, Mapping[str, Any]], *, source: Path | None = None
) -> list[Path]:
    """Copy the bundled notebooks to ``dest`` with their ``parameters`` cells replaced.

    What ``durability lab`` opens: the committed notebooks stay stripped and untouched, the
    copies point at the store (and plane) given. A copy already in ``dest`` is replaced.
    """
    import nbformat

    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for name in NOTEBOOK_NAMES:
        nb = with_parameters(notebook(name, source), parameters.get(name, {}))
        nbformat.write(nb, dest / name)  # type: ignore[no-untyped-call]
        written.append(dest / name)
    return written


def kernel_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a kernel (or JupyterLab) started from here gets: this process's, without
    ``MPLBACKEND``, with ``durability``'s source tree first on ``PYTHONPATH``, plus ``extra``."""
    return _kernel_env(extra)
