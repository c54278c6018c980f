"""No module of a shipped package imports itself back through others (an import cycle).

import-linter's ``acyclic_siblings`` contract (``make imports``) checks siblings package by
package; this checks every module of every shipped package at once, lazy and type-checking
imports included, as grimp (import-linter's graph) sees them.
"""

from __future__ import annotations

import grimp

SHIPPED = ("shared", "watcher", "apiserver", "compiler", "stagectl", "inference_auth")


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_import_cycles_are_found() -> None:
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"):
        graph.add_module(name)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    graph.add_import(importer="pkg.d", imported="pkg.a")
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_no_module_of_a_shipped_package_is_in_an_import_cycle() -> None:
    graph = grimp.build_graph(*SHIPPED)
    assert import_cycles(graph) == []
