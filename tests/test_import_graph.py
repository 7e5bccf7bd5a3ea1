"""The package's import graph: no cycles, no import that runs upward, nothing imports ``cli/``.

Every module of ``fairseq_docctx`` is parsed (``ast``, nothing is imported); every ``import``
and ``from ... import`` counts, at module level and inside functions (a lazy import is an
import too), relative or absolute. An edge goes from a module to the module of the package
that the statement names (``from ..data.drafts import X`` -> ``data.drafts``; ``from . import
hub`` -> ``hub``; ``from . import register`` -> the package ``__init__``); the
parent packages Python imports on the way are not edges.

The layers, lowest first (docs/inference.md, "The package's layers")::

    safe_loading, errors, bf16 < data < modules < models < criterions, tasks < the package __init__
      < inference < hub < engines < evaluation < probe < cli

The package ``__init__`` is what ``--user-dir fairseq_docctx`` imports: it registers the
data, models, criteria and tasks with fairseq, so it sits above them and below everything
that runs trained models. ``engines/`` (the inference engines the command lines choose
with ``--engine``) loads models through the hub, so it sits above it. ``probe.py`` makes
the probe's data and scores checkpoints with the evaluation's scorers, so it sits above
``evaluation/``. A module may import its own layer or any lower one.
"""
import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fairseq_docctx")
PACKAGE = "fairseq_docctx"

#: the layers, lowest first; a module's layer is that of its longest listed prefix
LAYERS = [
    ["safe_loading", "errors", "bf16"],
    ["data"],
    ["modules"],
    ["models"],
    ["criterions", "tasks"],
    [""],  # the package __init__: the plugin, registering the layers below
    ["inference"],
    ["hub"],
    ["engines"],
    ["evaluation"],
    ["probe"],
    ["cli"],
]

def _modules():
    """{dotted name relative to the package ("" for its __init__): (path, is a package)}."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        rel = os.path.relpath(dirpath, ROOT)
        parts = [] if rel == "." else rel.split(os.sep)
        for f in sorted(filenames):
            if not f.endswith(".py"):
                continue
            if f == "__init__.py":
                out[".".join(parts)] = (os.path.join(dirpath, f), True)
            else:
                out[".".join(parts + [f[:-3]])] = (os.path.join(dirpath, f), False)
    return out


def _join(*parts):
    return ".".join(p for p in parts if p)


def _imports(name, path, is_package, modules):
    """The modules of the package that the module ``name`` imports: {target: first line}."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    here = name.split(".") if name else []
    if not is_package:
        here = here[:-1]  # the package a relative import starts from
    found = {}

    def add(target, line):
        if target in modules and target != name:
            found.setdefault(target, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    add(alias.name[len(PACKAGE) + 1:], node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(here):
                    continue  # above the package
                base = here[:len(here) - (node.level - 1)]
                module = _join(".".join(base), node.module or "")
            elif node.module and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
                module = node.module[len(PACKAGE) + 1:]
            else:
                continue
            for alias in node.names:
                sub = _join(module, alias.name)
                add(sub if sub in modules else module, node.lineno)
    return found


def _layer(name):
    best, rank = -1, None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (p == "" and name == "") or (p and (name == p or name.startswith(p + "."))):
                if len(p) >= best:
                    best, rank = len(p), i
    return rank


def _graph():
    modules = _modules()
    return {name: _imports(name, path, is_pkg, modules) for name, (path, is_pkg) in modules.items()}


def _show(name):
    return f"{PACKAGE}.{name}" if name else PACKAGE


def _strongly_connected(graph):
    """Tarjan's strongly connected components of ``graph`` ({node: iterable of nodes})."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.fixture(scope="module")
def graph():
    return _graph()


def _edges(graph):
    return [(a, b, line) for a, targets in sorted(graph.items()) for b, line in sorted(targets.items())]


def test_every_module_has_a_layer(graph):
    assert [_show(m) for m in graph if _layer(m) is None] == []


def test_no_import_cycles(graph):
    cycles = [" <-> ".join(_show(m) for m in c) for c in _strongly_connected(graph) if len(c) > 1]
    assert not cycles, "modules that import each other (directly or through others):\n" + "\n".join(cycles)


def test_no_upward_imports(graph):
    upward = [f"{_show(a)}:{line} imports {_show(b)}" for a, b, line in _edges(graph)
              if _layer(b) > _layer(a)]
    order = " < ".join("/".join(p or "__init__" for p in layer) for layer in LAYERS)
    assert not upward, f"imports that run upward in the layers {order}:\n" + "\n".join(upward)


def test_nothing_imports_cli(graph):
    into_cli = [f"{_show(a)}:{line} imports {_show(b)}" for a, b, line in _edges(graph)
                if (b == "cli" or b.startswith("cli.")) and not (a == "cli" or a.startswith("cli."))]
    assert not into_cli, "the library imports the command lines:\n" + "\n".join(into_cli)


def test_the_graph_is_read(graph):
    """The parser sees the imports it must see (relative, absolute, lazy, ``from . import``)."""
    g = graph
    assert "data.context_batch" in g["data.document_dataset"]  # from . import context_batch as cb
    assert "data.drafts" in g[""]  # from .data import background, drafts (package __init__)
    assert "safe_loading" in g[""]
    assert "data.readers" in g["cli.prepare"]  # from fairseq_docctx.data.readers import ...
    assert "inference.shards" in g["cli"]  # a lazy import inside a function
    assert {"criterions", "models", "modules", "tasks"} <= set(g[""])
    assert _strongly_connected({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"], ["d"]]
