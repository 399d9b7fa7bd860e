"""The architecture, checked: the layers stay where docs/design.md draws them, folder by folder.

- Every module lives in a folder, and every folder in a layer (`LAYERS`, top to bottom); a module
  imports only from its own layer or the layers below it, lazy imports included.
- Only `git_lanes/gitio/` touches Git: no other module imports dulwich, imports `subprocess`
  (the one process runner `domain/procs.py` aside) or spells a `git` command line; inside it the
  runner (`process.py`) sits below the facade (`git.py`), which nothing below it imports at run time.
- `decisions/` is pure: it imports only side-effect-free modules.
- `cli/` and `mcp/` reach Git and the stores only through use cases.
- No import cycle (imports under `if TYPE_CHECKING:` aside), no module over 450 lines.

Each rule is a function of {module: source}, so the rules themselves are tested on small
made-up trees that break them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "git_lanes"
MAX_LINES = 450
PURE_STDLIB = {"__future__", "dataclasses", "typing", "fnmatch", "re", "collections", "collections.abc", "enum",
               "functools", "itertools", "math", "hashlib", "json"}
PURE_OURS = {"git_lanes.core.errors", "git_lanes.core.ids", "git_lanes.core.canonical", "git_lanes.plan.intent"}
SUBPROCESS_ALLOWED = {"git_lanes.domain.procs"}
LAYERS = (
    ("cli", "mcp"),                             # the two front doors: the command line, the MCP tools
    ("run", "board"),                           # whole batches driven (run, run --remote, work) and shown
    ("batch", "lane", "remote", "surface"),     # use cases: the coordinator's, the lane side's, remotes'
    ("tick",),                                  # SPEC §7's steps, §8's landing
    ("domain", "tracker"),                      # lanes, worktrees, checks, processes, receipts, the tracker
    ("store",),                                 # records, transactions, locks
    ("gitio",),                                 # the one gateway to Git
    ("core", "plan", "decisions"),              # vocabulary, the plan, pure decisions: no effects
)


def load(package: Path = PACKAGE) -> dict[str, tuple[bool, str]]:
    """{dotted module: (is a package __init__, source)}."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        found[".".join(parts)] = (is_pkg, path.read_text(encoding="utf-8"))
    return found


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, those under `if TYPE_CHECKING:` aside."""
    typing_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for sub in node.body:
                typing_only.update(id(n) for n in ast.walk(sub))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in typing_only]


def imported(module: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    """The absolute names an import statement brings in (a `from X import name` counts X.name when
    that is a module, else X)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    target = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else [])) \
        if node.level else (node.module or "")
    names = []
    for alias in node.names:
        candidate = f"{target}.{alias.name}"
        names.append(candidate if candidate in known else target)
    return names


def import_graph(modules: dict[str, tuple[bool, str]]) -> dict[str, set[str]]:
    """{module: the git_lanes modules it imports at run time, parent packages included}."""
    known = set(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, (is_pkg, source) in modules.items():
        for node in _runtime_imports(ast.parse(source)):
            for name in imported(module, is_pkg, node, known):
                parts = name.split(".")
                for k in range(2, len(parts) + 1):
                    dep = ".".join(parts[:k])
                    if dep in known and dep != module and not module.startswith(dep + "."):
                        graph[module].add(dep)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def git_outside_gateway(modules: dict[str, tuple[bool, str]]) -> list[str]:
    """Modules outside gitio/ that import dulwich or subprocess, or spell a `git ...` argv."""
    found = []
    for module, (is_pkg, source) in modules.items():
        if module == "git_lanes.gitio" or module.startswith("git_lanes.gitio."):
            continue
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for name in names:
                    top = name.split(".")[0]
                    if top == "dulwich" or (top == "subprocess" and module not in SUBPROCESS_ALLOWED):
                        found.append(f"{module}: imports {name}")
            elif isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) > 1:
                first, second = node.elts[0], node.elts[1]
                if isinstance(first, ast.Constant) and first.value == "git" and \
                        not (isinstance(second, ast.Constant) and second.value == "lanes"):   # our own usage line
                    found.append(f"{module}:{node.lineno}: a git command line")
            elif isinstance(node, ast.Attribute) and node.attr in ("system", "popen") and \
                    getattr(node.value, "id", None) == "os":
                found.append(f"{module}:{node.lineno}: os.{node.attr}")
    return found


def impure_decisions(modules: dict[str, tuple[bool, str]]) -> list[str]:
    found = []
    known = set(modules)
    for module, (is_pkg, source) in modules.items():
        if not module.startswith("git_lanes.decisions"):
            continue
        for node in _runtime_imports(ast.parse(source)):
            for name in imported(module, is_pkg, node, known):
                ours = name.startswith("git_lanes.")
                allowed = name.startswith("git_lanes.decisions") or name in PURE_OURS if ours else \
                    name in PURE_STDLIB or name.split(".")[0] in PURE_STDLIB and name.split(".")[0] != "os"
                if not allowed:
                    found.append(f"{module}: imports {name}")
    return found


def layer_of(module: str) -> int | None:
    """The index in `LAYERS` of the folder `module` lives in; -1 for the package itself and
    `__main__`; None for a module in no layer."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1:] == ["__main__"]:
        return -1
    return next((i for i, folders in enumerate(LAYERS) if parts[1] in folders), None)


def layer_violations(modules: dict[str, tuple[bool, str]]) -> list[str]:
    """Modules in no layer, and imports (lazy ones too) that reach up to a higher layer."""
    found = []
    graph = import_graph(modules)
    for module in sorted(modules):
        mine = layer_of(module)
        if mine is None:
            found.append(f"{module}: in no layer")
            continue
        for dep in sorted(graph[module]):
            theirs = layer_of(dep)
            if dep != "git_lanes" and theirs is not None and mine != -1 and theirs < mine:
                found.append(f"{module}: imports {dep} from a higher layer")
    return found


def gitio_facade_on_top(modules: dict[str, tuple[bool, str]]) -> list[str]:
    """Inside gitio/ the runner (`process`) imports no other gitio module and no gitio module but
    the package imports the facade (`git`) at run time: one way down, facade → parts → runner."""
    found = []
    graph = import_graph(modules)
    for module in sorted(m for m in modules if m.startswith("git_lanes.gitio.")):
        deps = {d for d in graph[module] if d.startswith("git_lanes.gitio.")}
        if module == "git_lanes.gitio.process" and deps:
            found.append(f"{module}: the runner imports {', '.join(sorted(deps))}")
        if module != "git_lanes.gitio.git" and "git_lanes.gitio.git" in deps:
            found.append(f"{module}: imports the facade")
    return found


TOP_LAYERS = ("git_lanes.cli", "git_lanes.mcp")   # the command line and the MCP tools, side by side


def cli_reaching_past_use_cases(modules: dict[str, tuple[bool, str]]) -> list[str]:
    """`cli/` and `mcp/` reach Git and the stores only through use cases; neither goes through the other
    (the MCP tools call the use cases the click commands call: one implementation of each command)."""
    found = []
    known = set(modules)
    for module, (is_pkg, source) in modules.items():
        layer = next((t for t in TOP_LAYERS if module == t or module.startswith(t + ".")), None)
        if layer is None:
            continue
        others = tuple(t for t in TOP_LAYERS if t != layer)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for name in imported(module, is_pkg, node, known):
                    if name.startswith(("git_lanes.gitio", "git_lanes.store")) or \
                            (name.startswith(others) and not name == "git_lanes.mcp" and layer == "git_lanes.mcp"):
                        found.append(f"{module}: imports {name}")
    return found


def too_long(modules: dict[str, tuple[bool, str]]) -> list[str]:
    return [f"{m}: {len(src.splitlines())} lines" for m, (_, src) in modules.items()
            if len(src.splitlines()) > MAX_LINES]


# -- the product ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def product():
    return load()


def test_only_the_gateway_touches_git(product):
    assert git_outside_gateway(product) == []


def test_decisions_are_pure(product):
    assert any(m.startswith("git_lanes.decisions.") for m in product)
    assert impure_decisions(product) == []


def test_the_cli_goes_through_use_cases(product):
    assert any(m.startswith("git_lanes.cli.") for m in product)
    assert any(m.startswith("git_lanes.mcp.") for m in product)
    assert cli_reaching_past_use_cases(product) == []


def test_every_folder_is_a_layer_and_imports_only_downwards(product):
    assert {m.split(".")[1] for m in product if m.count(".") >= 2} == {f for layer in LAYERS for f in layer}
    assert layer_violations(product) == []


def test_the_git_facade_sits_on_its_runner(product):
    assert "git_lanes.gitio.process" in import_graph(product)["git_lanes.gitio.git"]
    assert gitio_facade_on_top(product) == []


def test_no_import_cycle(product):
    graph = import_graph(product)
    assert "git_lanes.gitio" in graph["git_lanes.store.batch"]   # the graph is really read
    assert cycles(graph) == []


def test_no_module_over_450_lines(product):
    assert too_long(product) == []


# -- the rules catch what they are for ------------------------------------------------------------------

def _tree(**sources: str) -> dict[str, tuple[bool, str]]:
    return {name.replace("__", "."): (False, text) for name, text in sources.items()}


def test_the_rules_see_violations():
    bad = _tree(git_lanes__tick="import dulwich.repo\nimport subprocess\nx = ['git', 'status']\ny = ['git', 'lanes']\n",
                git_lanes__gitio__git="import subprocess\nimport dulwich\n",
                git_lanes__domain__procs="import subprocess\n",
                git_lanes__decisions__a="import os\nfrom git_lanes import store\nfrom git_lanes.core import ids\n",
                git_lanes__cli__x="from git_lanes.store import BatchStore\nfrom git_lanes import session\n",
                git_lanes__mcp__t="from git_lanes.cli import render\nfrom git_lanes.gitio import Git\n",
                git_lanes__cli="", git_lanes__gitio="",
                git_lanes__store="",
                git_lanes__core__ids="",
                git_lanes__session="")
    assert git_outside_gateway(bad) == ["git_lanes.tick: imports dulwich.repo", "git_lanes.tick: imports subprocess",
                                        "git_lanes.tick:3: a git command line"]
    assert impure_decisions(bad) == ["git_lanes.decisions.a: imports os", "git_lanes.decisions.a: imports git_lanes.store"]
    assert cli_reaching_past_use_cases(bad) == ["git_lanes.cli.x: imports git_lanes.store",
                                                "git_lanes.mcp.t: imports git_lanes.cli",
                                                "git_lanes.mcp.t: imports git_lanes.gitio"]
    ring = _tree(git_lanes__a="from git_lanes import b\n", git_lanes__b="import git_lanes.c\n",
                 git_lanes__c="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import git_lanes.a\n"
                              "def f():\n    from git_lanes import a\n")
    assert cycles(import_graph(ring)) == [["git_lanes.a", "git_lanes.b", "git_lanes.c"]]
    typing_only = _tree(git_lanes__a="from git_lanes import b\n",
                        git_lanes__b="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import git_lanes.a\n")
    assert cycles(import_graph(typing_only)) == []
    assert too_long(_tree(git_lanes__big="x = 1\n" * 451)) == ["git_lanes.big: 451 lines"]


def test_the_layer_rules_see_violations():
    sources = {"core.ids": "def f():\n    from ..tick import engine\n",      # lazy, and still upward
               "tick.engine": "from ..domain import session\nfrom ... import git_lanes\n",
               "domain.session": "from ..batch import start\n",
               "batch.start": "from ..tick import engine\nfrom ..lane import side\n",
               "lane.side": "from ..batch import start\n",                  # one layer: both ways
               "loose": "from .core import ids\n", "extra.x": ""}
    packages = ("tick", "domain", "batch", "lane", "core")
    tree = {f"git_lanes.{name}": (False, text) for name, text in sources.items()}
    tree.update({f"git_lanes.{name}": (True, "") for name in packages})
    assert layer_violations(tree) == ["git_lanes.core.ids: imports git_lanes.tick from a higher layer",
                                      "git_lanes.core.ids: imports git_lanes.tick.engine from a higher layer",
                                      "git_lanes.domain.session: imports git_lanes.batch from a higher layer",
                                      "git_lanes.domain.session: imports git_lanes.batch.start from a higher layer",
                                      "git_lanes.extra.x: in no layer", "git_lanes.loose: in no layer"]
    gitio = _tree(git_lanes__gitio__process="from .refs import Refs\n",
                  git_lanes__gitio__refs="def f():\n    from .git import Git\n",
                  git_lanes__gitio__git="from .process import run\n",
                  git_lanes__gitio__objects="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .git import Git\n",
                  git_lanes__gitio="from .git import Git\n")
    assert gitio_facade_on_top(gitio) == ["git_lanes.gitio.process: the runner imports git_lanes.gitio.refs",
                                          "git_lanes.gitio.refs: imports the facade"]
