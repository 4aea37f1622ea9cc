"""The call graph of a module: its call sites, and its strongly connected components callees first.

There is an edge f -> g for every `call` in f naming g. The components come from Tarjan's algorithm ("Depth-
first search and linear graph algorithms", 1972), which finishes a component only after every component it
reaches, so its output lists callees before callers: the order of the module passes that work bottom-up
(`inline`, `func-attrs`). A function is recursive when its component has a cycle: several members, or a call
of itself. Computed on demand, so never stale; rebuild it after adding or removing calls.
"""

from __future__ import annotations

from collections.abc import Iterator

from isozyme.ssa.ir import Function, Instruction, Module
from isozyme.ssa.ops import Op


def call_sites(function: Function) -> list[Instruction]:
    """The `call` instructions of `function`, in layout order."""
    return [inst for inst in function.instructions() if inst.op is Op.CALL]


def callees(function: Function) -> list[Function]:
    """The distinct functions `function` calls, in the order of their first call."""
    return list(dict.fromkeys(call.callee for call in call_sites(function)))


def bottom_up_components(module: Module) -> list[list[Function]]:
    """The strongly connected components, each after every component it calls (members in module order)."""
    order = {function: position for position, function in enumerate(module)}
    search = _Tarjan()
    for root in module:
        if root not in search.index:
            search.visit(root)
    return [sorted(component, key=lambda f: order.get(f, len(order))) for component in search.components]


def recursive_functions(module: Module) -> set[Function]:
    """The functions on a cycle of the call graph: they call themselves, directly or through others."""
    recursive: set[Function] = set()
    for component in bottom_up_components(module):
        if len(component) > 1 or component[0] in callees(component[0]):
            recursive.update(component)
    return recursive


class _Tarjan:
    """Tarjan's algorithm, iterative (no recursion limit on deep call chains)."""

    def __init__(self) -> None:
        self.index: dict[Function, int] = {}
        """Discovery number of each visited function."""
        self.low: dict[Function, int] = {}
        """Smallest discovery number reachable through the DFS subtree and one edge back."""
        self.stack: list[Function] = []
        self.on_stack: set[Function] = set()
        self.components: list[list[Function]] = []
        """Finished components, callees first."""

    def _discover(self, function: Function) -> tuple[Function, Iterator[Function]]:
        self.index[function] = self.low[function] = len(self.index)
        self.stack.append(function)
        self.on_stack.add(function)
        return function, iter(callees(function))

    def visit(self, root: Function) -> None:
        work = [self._discover(root)]
        while work:
            function, pending = work[-1]
            for callee in pending:
                if callee not in self.index:
                    work.append(self._discover(callee))
                    break
                if callee in self.on_stack:
                    self.low[function] = min(self.low[function], self.index[callee])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    self.low[parent] = min(self.low[parent], self.low[function])
                if self.low[function] == self.index[function]:
                    self._finish_component(function)

    def _finish_component(self, root: Function) -> None:
        component = []
        while True:
            member = self.stack.pop()
            self.on_stack.discard(member)
            component.append(member)
            if member is root:
                break
        self.components.append(component)
