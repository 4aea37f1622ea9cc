"""Control-flow graph queries: successors, predecessors, reachability and block orders.

Computed on demand from the terminators, so they are never stale. Edges are between distinct block pairs
(the verifier forbids a `cbr` whose two targets are the same block), so predecessor lists have no repeats.
"""

from __future__ import annotations

from isozyme.ssa.ir import Block, Function


def successors(block: Block) -> tuple[Block, ...]:
    """The blocks control may go to from `block`, in terminator order."""
    return block.successors


def predecessors(function: Function) -> dict[Block, list[Block]]:
    """For each block, the blocks with an edge into it, in layout order (unreachable ones included)."""
    preds: dict[Block, list[Block]] = {block: [] for block in function.blocks}
    for block in function.blocks:
        for succ in dict.fromkeys(block.successors):
            preds.setdefault(succ, []).append(block)
    return preds


def post_order(function: Function) -> list[Block]:
    """Blocks reachable from the entry, each after all its DFS successors (iterative DFS)."""
    if not function.blocks:
        return []
    order: list[Block] = []
    visited = {function.entry}
    stack = [(function.entry, iter(function.entry.successors))]
    while stack:
        block, pending = stack[-1]
        for succ in pending:
            if succ not in visited:
                visited.add(succ)
                stack.append((succ, iter(succ.successors)))
                break
        else:
            stack.pop()
            order.append(block)
    return order


def reverse_post_order(function: Function) -> list[Block]:
    """Reachable blocks, each before its successors except along back edges: the order of dataflow."""
    return post_order(function)[::-1]


def reachable_blocks(function: Function) -> set[Block]:
    return set(post_order(function))


def reachable_from(block: Block, avoiding: Block | None = None) -> set[Block]:
    """The blocks reachable from `block` by one edge or more (`block` itself only when it is in a cycle),
    on paths that do not pass through `avoiding` (which is then never in the set)."""
    seen: set[Block] = set()
    work = list(block.successors)
    while work:
        current = work.pop()
        if current not in seen and current is not avoiding:
            seen.add(current)
            work.extend(current.successors)
    return seen
