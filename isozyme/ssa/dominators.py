"""Dominator tree and dominance frontiers.

The tree is computed with Lengauer and Tarjan's algorithm ("A Fast Algorithm for Finding Dominators in a
Flowgraph", 1979), O(m log n): Cooper, Harvey and Kennedy's iterative one ("A Simple, Fast Dominance
Algorithm", 2001), simpler, walks dominator chains once per predecessor of each join, quadratic in the
chains of joins that AD makes of a long `a and b and ...`. The frontiers are computed with the latter
paper's walk up from each predecessor of a join block. Blocks unreachable from the entry are not in the
tree: like LLVM, queries treat them as dominated by everything, so code in them never fails a dominance
check.
"""

from __future__ import annotations

from isozyme.ssa.cfg import predecessors, reverse_post_order
from isozyme.ssa.ir import Block, Function, Instruction, Phi, Use, Value


class DominatorTree:
    """Immediate dominators of the reachable blocks of a function, with O(1) dominance queries."""

    def __init__(self, function: Function) -> None:
        self.function = function
        self.rpo = reverse_post_order(function)
        """Reachable blocks in reverse post-order."""
        self.preds = predecessors(function)
        """Each block's predecessors, reachable or not (`cfg.predecessors`), as the CFG was when the tree was
        built: a pass that keeps the tree while it edits no edges reads them here instead of again."""
        self.idom: dict[Block, Block | None] = self._compute_idoms()
        """Immediate dominator of each reachable block (None for the entry)."""
        self.children: dict[Block, list[Block]] = {block: [] for block in self.rpo}
        """Blocks immediately dominated by each block, in reverse post-order."""
        for block in self.rpo:
            parent = self.idom[block]
            if parent is not None:
                self.children[parent].append(block)
        self._number_tree()

    def _compute_idoms(self) -> dict[Block, Block | None]:
        """Lengauer and Tarjan's algorithm, the simple version (path compression, no balancing: O(m log n)),
        on depth-first numbers, with every walk on an explicit stack."""
        idom: dict[Block, Block | None] = {block: None for block in self.rpo}
        if not self.rpo:
            return idom
        order, parent = self._depth_first(self.rpo[0])
        number = {block: index for index, block in enumerate(order)}
        preds = [[number[pred] for pred in self.preds[block] if pred in number] for block in order]
        semi, label, ancestor = list(range(len(order))), list(range(len(order))), [-1] * len(order)
        dominator = [0] * len(order)
        bucket: list[list[int]] = [[] for _ in order]

        def evaluate(v: int) -> int:
            """The vertex of least semidominator on the forest path above `v`, compressing the path."""
            if ancestor[v] < 0:
                return v
            path = []
            while ancestor[ancestor[v]] >= 0:
                path.append(v)
                v = ancestor[v]
            for x in reversed(path):  # topmost first, as the recursion returns
                above = ancestor[x]
                if semi[label[above]] < semi[label[x]]:
                    label[x] = label[above]
                ancestor[x] = ancestor[above]
            return label[path[0]] if path else label[v]

        for w in range(len(order) - 1, 0, -1):
            for v in preds[w]:
                semi[w] = min(semi[w], semi[evaluate(v)])
            bucket[semi[w]].append(w)
            ancestor[w] = parent[w]
            for v in bucket[parent[w]]:
                u = evaluate(v)
                dominator[v] = u if semi[u] < semi[v] else parent[w]
            bucket[parent[w]] = []
        for w in range(1, len(order)):
            if dominator[w] != semi[w]:
                dominator[w] = dominator[dominator[w]]
            idom[order[w]] = order[dominator[w]]
        return idom

    @staticmethod
    def _depth_first(entry: Block) -> tuple[list[Block], list[int]]:
        """The blocks reachable from `entry` in depth-first preorder, and each one's parent in the
        depth-first tree (by number; -1 for the entry)."""
        order: list[Block] = []
        parent: list[int] = []
        numbered: set[Block] = set()
        stack: list[tuple[Block, int]] = [(entry, -1)]
        while stack:
            block, above = stack.pop()
            if block in numbered:
                continue
            numbered.add(block)
            here = len(order)
            order.append(block)
            parent.append(above)
            stack.extend((succ, here) for succ in reversed(block.successors) if succ not in numbered)
        return order, parent

    def _number_tree(self) -> None:
        """Pre- and post-order numbers of the tree: a dominates b iff b's interval nests in a's."""
        self._enter: dict[Block, int] = {}
        self._leave: dict[Block, int] = {}
        self.depth: dict[Block, int] = {}
        """Distance from the entry in the tree."""
        if not self.rpo:
            return
        counter = 0
        stack: list[tuple[Block, bool]] = [(self.rpo[0], False)]
        while stack:
            block, done = stack.pop()
            counter += 1
            if done:
                self._leave[block] = counter
                continue
            self._enter[block] = counter
            parent = self.idom[block]
            self.depth[block] = 0 if parent is None else self.depth[parent] + 1
            stack.append((block, True))
            stack.extend((child, False) for child in reversed(self.children[block]))

    def is_reachable(self, block: Block) -> bool:
        return block in self._enter

    def dominates(self, a: Block, b: Block) -> bool:
        """Every path from the entry to `b` goes through `a` (a block dominates itself)."""
        if not self.is_reachable(b):
            return True
        if not self.is_reachable(a):
            return False
        return self._enter[a] <= self._enter[b] and self._leave[b] <= self._leave[a]

    def nearest_common_dominator(self, a: Block, b: Block) -> Block:
        """The deepest block that dominates both reachable blocks `a` and `b`."""
        while self.depth[a] > self.depth[b]:
            a = self.idom[a]  # type: ignore[assignment]
        while self.depth[b] > self.depth[a]:
            b = self.idom[b]  # type: ignore[assignment]
        while a is not b:
            a, b = self.idom[a], self.idom[b]  # type: ignore[assignment]
        return a

    def strictly_dominates(self, a: Block, b: Block) -> bool:
        return a is not b and self.dominates(a, b)

    def instruction_dominates(self, a: Instruction, b: Instruction) -> bool:
        """`a` runs before `b` on every path to `b`: same block and earlier, or a dominating block."""
        if a.block is b.block:
            block = a.block
            return block.position(a) < block.position(b)  # type: ignore[union-attr]
        return self.dominates(a.block, b.block)  # type: ignore[arg-type]

    def dominates_use(self, value: Value, use: Use) -> bool:
        """Is `value` available at `use`? A phi operand is used at the end of its incoming block."""
        if not isinstance(value, Instruction):
            return True
        user = use.user
        if isinstance(user, Phi):
            incoming = user.blocks[use.index]
            return value.block is incoming or self.dominates(value.block, incoming)  # type: ignore[arg-type]
        return self.instruction_dominates(value, user)


def dominance_frontiers(function: Function, tree: DominatorTree | None = None) -> dict[Block, set[Block]]:
    """DF(b): blocks where b's dominance ends (b dominates a predecessor, not strictly the block)."""
    tree = tree or DominatorTree(function)
    frontier: dict[Block, set[Block]] = {block: set() for block in tree.rpo}
    for block in tree.rpo:
        # No "joins only" shortcut: an entry block with a single predecessor (a loop back to the entry) is
        # in that predecessor's frontier. For any other block with one predecessor the walk is empty anyway.
        preds = [p for p in tree.preds[block] if tree.is_reachable(p)]
        for pred in preds:
            runner: Block | None = pred
            # A runner that has `block` already was walked from before, up to the idom: stop there (a join of
            # thousands of predecessors would walk its chain of dominators once per predecessor).
            while runner is not None and runner is not tree.idom[block] and block not in frontier[runner]:
                frontier[runner].add(block)
                runner = tree.idom[runner]
    return frontier
