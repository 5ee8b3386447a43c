"""Check the package layering and the size limits of the package code.

The order, lowest first: ``benchmarks`` (shipped data) and ``store`` < ``engines``
< ``archive`` (the parse path, WARC bundles, run files) < ``crawler`` (what is due,
pacing, fetching, leases, writing) < ``scoring`` (scores, reports and figures) <
``pipelines`` (demo, publish, verify) < ``cli`` (the command line). Every import node of every module is read,
the lazy ones inside functions included, and an import may only point at its own
package or a lower one. Inside a package, files must not import each other in a
circle. No module uses another module's ``_name`` (imported, or as ``module._name``).

Run as a script to print the findings: ``python -m tests.support.layering [ROOT]``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

RANK = {"benchmarks": 0, "store": 1, "migrations": 1, "engines": 2, "archive": 3,
        "crawler": 4, "scoring": 5, "pipelines": 6, "cli": 7}
PACKAGES = tuple(RANK)
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80



def from_module(node: ast.ImportFrom, name: str, is_pkg: bool) -> str:
    """The absolute module a ``from … import`` in module ``name`` reads (relative levels resolved)."""
    if not node.level:
        return node.module or ""
    base = name.split(".")
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))

def modules(root: Path) -> dict[str, Path]:
    """Every module of the package code: dotted name -> path."""
    found = {}
    for pkg in PACKAGES:
        base = root / pkg
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imported_names(path: Path, name: str) -> list[tuple[int, str]]:
    """(line, dotted module) for every import node in the file, lazy ones included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = from_module(node, name, is_pkg)
            out.append((node.lineno, mod))
            # ``from pkg import module`` imports a module too
            out.extend((node.lineno, f"{mod}.{a.name}") for a in node.names)
    return out


def graph(root: Path) -> tuple[dict[str, Path], dict[str, set[tuple[int, str]]]]:
    mods = modules(root)
    edges: dict[str, set[tuple[int, str]]] = {}
    for name, path in mods.items():
        targets = set()
        for line, mod in imported_names(path, name):
            if mod in mods:
                targets.add((line, mod))
        edges[name] = targets
    return mods, edges


def upward_imports(root: Path) -> list[str]:
    """One line per import that points up the layering."""
    mods, edges = graph(root)
    bad = []
    for name, targets in edges.items():
        own = RANK[name.split(".")[0]]
        for line, mod in sorted(targets):
            if RANK[mod.split(".")[0]] > own:
                bad.append(f"{mods[name].relative_to(root)}:{line}: {name} imports {mod} (up)")
    return bad


def circles(root: Path) -> list[list[str]]:
    """Strongly connected components of more than one module (file or package level)."""
    mods, edges = graph(root)
    adj = {n: {m for _, m in t if m != n} for n, t in edges.items()}
    # a package's __init__ importing its own submodules is not a circle of files
    adj = {n: {m for m in t if not m.startswith(n + ".")} for n, t in adj.items()}
    pkg_adj: dict[str, set[str]] = {}
    for n, t in adj.items():
        pkg_adj.setdefault(n.split(".")[0], set()).update(
            m.split(".")[0] for m in t if m.split(".")[0] != n.split(".")[0])
    return [c for c in _scc(adj) + _scc(pkg_adj) if len(c) > 1]


def _scc(adj: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        work = [(v, iter(sorted(adj.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(adj.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(sorted(comp))

    for v in sorted(adj):
        if v not in index:
            visit(v)
    return out


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id] + parts[::-1])


def private_imports(root: Path) -> list[str]:
    """One line per use of another module's ``_name``: ``from m import _name``, or
    ``m._name`` where ``m`` is a module of ours bound by an import. What is shared is
    public; what starts with ``_`` stays in its module."""
    mods = modules(root)
    bad = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_pkg = path.name == "__init__.py"
        bound: dict[str, str] = {}  # local name -> module of ours
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        bound[a.asname] = a.name
                    else:
                        bound[a.name.split(".")[0]] = a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                mod = from_module(node, name, is_pkg)
                for a in node.names:
                    if f"{mod}.{a.name}" in mods:
                        bound[a.asname or a.name] = f"{mod}.{a.name}"
                    elif mod in mods and mod != name and _is_private(a.name):
                        bad.append(f"{path.relative_to(root)}:{node.lineno}: {name} imports {mod}.{a.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                dotted = _dotted(node.value)
                if dotted is None or dotted.split(".")[0] not in bound:
                    continue
                head, _, rest = dotted.partition(".")
                target = bound[head] + ("." + rest if rest else "")
                if target in mods and target != name:
                    bad.append(f"{path.relative_to(root)}:{node.lineno}: {name} uses {target}.{node.attr}")
    return bad


def long_files(root: Path) -> list[tuple[str, int]]:
    out = []
    for path in modules(root).values():
        if "migrations" in path.relative_to(root).parts:
            continue
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_FILE_LINES:
            out.append((str(path.relative_to(root)), n))
    return sorted(out, key=lambda x: -x[1])


def function_lengths(root: Path) -> list[tuple[str, int]]:
    """(path:line name, body lines) of every function, counted from its first
    statement (a docstring included) to its last line; a nested function counts on its own, not in the
    outer one."""
    out = []
    for path in modules(root).values():
        if "migrations" in path.relative_to(root).parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = node.body
            start = body[0].lineno  # the signature is free, the docstring counts
            total = node.end_lineno - start + 1
            nested = _direct_nested(node)
            total -= sum(n.end_lineno - (n.decorator_list[0].lineno if n.decorator_list else n.lineno) + 1
                         for n in nested)
            out.append((f"{path.relative_to(root)}:{node.lineno} {node.name}", total))
    return sorted(out, key=lambda x: -x[1])


def _direct_nested(fn: ast.AST) -> list[ast.AST]:
    found = []
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(n)
            continue
        stack.extend(ast.iter_child_nodes(n))
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else Path(__file__).resolve().parents[2])
    for line in upward_imports(root):
        print(line)
    for c in circles(root):
        print("circle:", " <-> ".join(c))
    for line in private_imports(root):
        print(line)
    for p, n in long_files(root):
        print(f"file {p}: {n} lines")
    for p, n in function_lengths(root):
        if n > MAX_FUNCTION_LINES:
            print(f"function {p}: {n} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
