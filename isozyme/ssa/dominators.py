"""Dominator tree and dominance frontiers.

The tree is computed with Cooper, Harvey and Kennedy's iterative algorithm ("A Simple, Fast Dominance
Algorithm", 2001) over the reverse post-order; the frontiers with the same paper's walk up from each
predecessor of a join block. Blocks unreachable from the entry are not in the tree: like LLVM, queries
treat them as dominated by everything, so code in them never fails a dominance check.
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
        index = {block: i for i, block in enumerate(self.rpo)}
        idom: dict[Block, Block | None] = {block: None for block in self.rpo}
        if not self.rpo:
            return idom
        entry = self.rpo[0]
        idom[entry] = entry
        changed = True
        while changed:
            changed = False
            for block in self.rpo[1:]:
                processed = [p for p in self.preds[block] if p in index and idom[p] is not None]
                new_idom = processed[0]
                for pred in processed[1:]:
                    new_idom = self._intersect(pred, new_idom, idom, index)
                if idom[block] is not new_idom:
                    idom[block] = new_idom
                    changed = True
        idom[entry] = None
        return idom

    @staticmethod
    def _intersect(a: Block, b: Block, idom: dict[Block, Block | None], index: dict[Block, int]) -> Block:
        while a is not b:
            while index[a] > index[b]:
                a = idom[a]  # type: ignore[assignment]
            while index[b] > index[a]:
                b = idom[b]  # type: ignore[assignment]
        return a

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
            while runner is not None and runner is not tree.idom[block]:
                frontier[runner].add(block)
                runner = tree.idom[runner]
    return frontier
