"""Natural loops and the loop nest of a function.

Computes, for the blocks reachable from the entry, every natural loop and how the loops nest. A back edge
is an edge `latch -> header` whose header dominates its latch; the natural loop of a header is the header
plus every block that reaches one of its latches without passing through the header. Back edges that share
a header make one loop (with several latches). Two natural loops are then either disjoint or nested, so
they form a forest: a loop's parent is the smallest loop that strictly contains it.

Assumes a function whose blocks all end in a terminator (a block still being built has no successors).
Blocks unreachable from the entry are ignored: they belong to no loop, and they count neither as latches
nor as predecessors of a header. The result is a snapshot of the CFG: rebuild it after editing edges.

Irreducible cycles (a cycle that can be entered at more than one block, so no block of it dominates the
others) are not natural loops: the edges closing them are not back edges, and they are not reported (a
natural loop around such a cycle still is). Passes that need every cycle to be a loop call
`has_irreducible_control_flow` first and refuse such functions.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from isozyme.ssa.dominators import DominatorTree
from isozyme.ssa.ir import Block, Function


@dataclass(eq=False, repr=False)
class Loop:
    """A natural loop: a header that dominates the body, entered only through the header."""

    header: Block
    """The single entry block; it dominates every block of the loop."""
    latches: list[Block]
    """Blocks of the loop with a back edge to the header, in layout order."""
    blocks: list[Block]
    """The body: the header first, then the other blocks in layout order (inner loops' blocks included)."""
    entering_blocks: list[Block] = field(default_factory=list)
    """Reachable predecessors of the header outside the loop, in layout order."""
    parent: Loop | None = None
    """The innermost loop strictly containing this one; None for a top-level loop."""
    children: list[Loop] = field(default_factory=list)
    """The loops directly nested in this one, in reverse post-order of their headers."""
    depth: int = 1
    """Nesting depth: 1 for a top-level loop, parent's depth + 1 otherwise."""

    def __post_init__(self) -> None:
        self._members = frozenset(self.blocks)

    def contains(self, item: Block | Loop) -> bool:
        """Is the block in the body, or the loop this loop or nested (at any depth) in it?"""
        if isinstance(item, Block):
            return item in self._members
        loop: Loop | None = item
        while loop is not None:
            if loop is self:
                return True
            loop = loop.parent
        return False

    def __contains__(self, item: Block | Loop) -> bool:
        return self.contains(item)

    @property
    def exiting_blocks(self) -> list[Block]:
        """Blocks of the loop with a successor outside it, in the order of `blocks`."""
        return [block for block in self.blocks if any(s not in self._members for s in block.successors)]

    @property
    def exit_blocks(self) -> list[Block]:
        """Blocks outside the loop with a predecessor inside it, once each, in layout order."""
        targets = dict.fromkeys(succ for block in self.blocks for succ in block.successors
                                if succ not in self._members)
        if len(targets) < 2:  # most loops: no need to scan the function's layout
            return list(targets)
        function = self.header.function
        layout = function.blocks if function is not None else list(targets)
        return [block for block in layout if block in targets]

    @property
    def preheader(self) -> Block | None:
        """The header's only entering block, if the header is its only successor; else None."""
        if len(self.entering_blocks) != 1:
            return None
        candidate = self.entering_blocks[0]
        return candidate if candidate.successors == (self.header,) else None

    def __repr__(self) -> str:
        header = self.header.name or hex(id(self.header))
        return f"<Loop header={header} depth={self.depth} blocks={len(self.blocks)}>"


def back_edges(tree: DominatorTree) -> list[tuple[Block, Block]]:
    """Edges `(latch, header)` between reachable blocks whose header dominates the latch, in RPO of latches."""
    return [(block, succ) for block in tree.rpo for succ in dict.fromkeys(block.successors)
            if tree.dominates(succ, block)]


def has_irreducible_control_flow(function: Function, tree: DominatorTree | None = None) -> bool:
    """Does the reachable CFG hold a cycle that is not a natural loop?

    A CFG is reducible iff every retreating edge of a depth-first search (an edge to a block not after its
    source in the search's reverse post-order) goes to a block dominating its source (Hecht and Ullman).
    """
    tree = tree or DominatorTree(function)
    position = {block: index for index, block in enumerate(tree.rpo)}
    for block in tree.rpo:
        for succ in block.successors:
            if position[succ] <= position[block] and not tree.dominates(succ, block):
                return True
    return False


class LoopNest:
    """The natural loops of a function and their nesting (LLVM's LoopInfo)."""

    def __init__(self, function: Function, tree: DominatorTree | None = None) -> None:
        self.function = function
        """The analysed function."""
        self.tree = tree or DominatorTree(function)
        """The dominator tree the loops were found with."""
        self.loops: list[Loop] = []
        """Every loop, in reverse post-order of headers: a loop comes before the loops nested in it."""
        self._innermost: dict[Block, Loop] = {}
        self._layout = {block: index for index, block in enumerate(function.blocks)}
        """Each block's position in the function's layout: loop bodies and latches are listed in that order."""
        for header, latches in self._latches_by_header().items():
            self._add_loop(self._natural_loop(header, latches))

    def _latches_by_header(self) -> dict[Block, list[Block]]:
        """Headers in reverse post-order, each with its latches in layout order."""
        latches: dict[Block, list[Block]] = {}
        for latch, header in back_edges(self.tree):
            latches.setdefault(header, []).append(latch)
        position = {block: index for index, block in enumerate(self.tree.rpo)}
        return {header: sorted(latches[header], key=self._layout.__getitem__)
                for header in sorted(latches, key=position.__getitem__)}

    def _reachable_preds(self, block: Block) -> list[Block]:
        return [pred for pred in self.tree.preds[block] if self.tree.is_reachable(pred)]

    def _natural_loop(self, header: Block, latches: list[Block]) -> Loop:
        """The header and every block reaching a latch without passing through the header."""
        body = {header}
        worklist = [latch for latch in latches if latch is not header]
        while worklist:
            block = worklist.pop()
            if block in body:
                continue
            body.add(block)
            worklist.extend(pred for pred in self._reachable_preds(block) if pred not in body)
        ordered = [header, *sorted((block for block in body if block is not header), key=self._layout.__getitem__)]
        entering = [pred for pred in self._reachable_preds(header) if pred not in body]
        return Loop(header, latches, ordered, entering)

    def _add_loop(self, loop: Loop) -> None:
        """Link `loop` into the forest. Loops arrive outer first, since a header dominates nested headers."""
        loop.parent = self._innermost.get(loop.header)
        if loop.parent is not None:
            loop.depth = loop.parent.depth + 1
            loop.parent.children.append(loop)
        for block in loop.blocks:
            self._innermost[block] = loop
        self.loops.append(loop)

    @property
    def top_level(self) -> list[Loop]:
        """The loops not nested in another loop, in reverse post-order of their headers."""
        return [loop for loop in self.loops if loop.parent is None]

    def loop_of(self, block: Block) -> Loop | None:
        """The innermost loop containing `block`; None outside every loop (and for unreachable blocks)."""
        return self._innermost.get(block)

    def depth(self, block: Block) -> int:
        """How many loops contain `block` (0 outside every loop)."""
        loop = self.loop_of(block)
        return loop.depth if loop is not None else 0

    def is_header(self, block: Block) -> bool:
        loop = self.loop_of(block)
        return loop is not None and loop.header is block

    def __iter__(self) -> Iterator[Loop]:
        return iter(self.loops)

    def __len__(self) -> int:
        return len(self.loops)
