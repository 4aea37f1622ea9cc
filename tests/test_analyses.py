"""CFG, dominator and loop analyses on small hand-built CFGs, and against their definitions on random CFGs.

Every expected value below is reasoned by hand from the CFG drawn in the test (or computed by a brute-force
oracle from the textbook definition), never read back from the code under test. The depth-first search of
`cfg.post_order` visits successors in terminator order (`cbr`: true target first), which fixes the orders.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isozyme.ssa.builder import Builder, make_function
from isozyme.ssa.cfg import (
    post_order,
    predecessors,
    reachable_blocks,
    reachable_from,
    reverse_post_order,
    successors,
)
from isozyme.ssa.def_use import operands_first
from isozyme.ssa.dominators import DominatorTree, dominance_frontiers
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Use, Value
from isozyme.ssa.loops import Loop, LoopNest, back_edges, has_irreducible_control_flow
from isozyme.ssa.types import F64, I1, I64

Edges = dict[str, list[str]]


# --- building CFGs ------------------------------------------------------------------------------------------


def build_cfg(edges: Edges) -> tuple[Function, dict[str, Block]]:
    """`@f(%c: i1)` with one block per key, in key order (the first is the entry). A block ends in `ret`,
    `br` or `cbr %c` (true target first) for zero, one or two successors."""
    function = make_function("f", [("c", I1)])
    blocks = {name: function.add_block(name) for name in edges}
    for name, targets in edges.items():
        builder = Builder(blocks[name])
        if not targets:
            builder.ret()
        elif len(targets) == 1:
            builder.br(blocks[targets[0]])
        else:
            if_true, if_false = targets
            builder.cbr(function.args[0], blocks[if_true], blocks[if_false])
    return function, blocks


def names(blocks: Iterable[Block]) -> list[str]:
    return [block.name for block in blocks]  # type: ignore[misc]


def name_set(blocks: Iterable[Block]) -> set[str]:
    return set(names(blocks))


def idom_names(tree: DominatorTree) -> dict[str, str | None]:
    return {block.name: (idom.name if idom else None) for block, idom in tree.idom.items()}  # type: ignore[misc]


def frontier_names(function: Function) -> dict[str, set[str]]:
    return {block.name: name_set(df) for block, df in dominance_frontiers(function).items()}  # type: ignore[misc]


DIAMOND: Edges = {"entry": ["a", "b"], "a": ["m"], "b": ["m"], "m": []}

SIMPLE_LOOP: Edges = {"entry": ["header"], "header": ["body", "exit"], "body": ["header"], "exit": []}

NESTED: Edges = {
    "entry": ["oh"],
    "oh": ["ih", "exit"],      # outer header: test at the top
    "ih": ["ib", "olatch"],    # inner header
    "ib": ["ih"],              # inner latch
    "olatch": ["oh"],          # outer latch
    "exit": [],
}

SIBLINGS: Edges = {
    "entry": ["oh"],
    "oh": ["h1", "exit"],
    "h1": ["b1", "h2"],        # first inner loop, falls into the second
    "b1": ["h1"],
    "h2": ["b2", "olatch"],    # second inner loop
    "b2": ["h2"],
    "olatch": ["oh"],
    "exit": [],
}

# Exits from the header and from the body to two different blocks; exit2 is laid out before exit1.
TWO_EXITS: Edges = {
    "entry": ["h"], "h": ["b", "exit1"], "b": ["latch", "exit2"], "latch": ["h"], "exit2": [], "exit1": [],
}

# while cond: if ...: break
WHILE_BREAK: Edges = {"entry": ["cond"], "cond": ["body", "exit"], "body": ["exit", "latch"], "latch": ["cond"],
                      "exit": []}

SELF_LOOP: Edges = {"entry": ["s"], "s": ["s", "exit"], "exit": []}

# a and b jump into each other; each is entered from the entry: a cycle with two entries.
IRREDUCIBLE: Edges = {"entry": ["a", "b"], "a": ["b", "exit"], "b": ["a"], "exit": []}


# --- cfg.py -------------------------------------------------------------------------------------------------


def test_successors_follow_terminator_order() -> None:
    _, blocks = build_cfg(DIAMOND)
    assert names(successors(blocks["entry"])) == ["a", "b"]
    assert names(successors(blocks["a"])) == ["m"]
    assert successors(blocks["m"]) == ()


def test_predecessors_in_layout_order() -> None:
    function, blocks = build_cfg(NESTED)
    preds = {block.name: names(p) for block, p in predecessors(function).items()}
    assert preds == {"entry": [], "oh": ["entry", "olatch"], "ih": ["oh", "ib"], "ib": ["ih"],
                     "olatch": ["ih"], "exit": ["oh"]}


def test_post_order_and_reverse_post_order_of_a_diamond() -> None:
    # DFS: entry, a, m (done), a done, b (m seen) done, entry done.
    function, _ = build_cfg(DIAMOND)
    assert names(post_order(function)) == ["m", "a", "b", "entry"]
    assert names(reverse_post_order(function)) == ["entry", "b", "a", "m"]


def test_post_order_of_nested_loops() -> None:
    # DFS: entry, oh, ih, ib (ih seen) done, olatch (oh seen) done, ih done, exit done, oh done, entry done.
    function, _ = build_cfg(NESTED)
    assert names(post_order(function)) == ["ib", "olatch", "ih", "exit", "oh", "entry"]
    assert names(reverse_post_order(function)) == ["entry", "oh", "exit", "ih", "olatch", "ib"]


def test_unreachable_block_is_not_in_block_orders_but_is_a_predecessor() -> None:
    function, blocks = build_cfg({**SIMPLE_LOOP, "dead": ["header"]})
    assert names(reverse_post_order(function)) == ["entry", "header", "exit", "body"]
    assert "dead" not in names(post_order(function))
    assert reachable_blocks(function) == {blocks[n] for n in ("entry", "header", "body", "exit")}
    assert names(predecessors(function)[blocks["header"]]) == ["entry", "body", "dead"]


# --- dominators.py ------------------------------------------------------------------------------------------


def test_dominator_tree_of_a_diamond() -> None:
    function, blocks = build_cfg(DIAMOND)
    tree = DominatorTree(function)
    assert idom_names(tree) == {"entry": None, "a": "entry", "b": "entry", "m": "entry"}
    assert names(tree.children[blocks["entry"]]) == ["b", "a", "m"]  # reverse post-order
    assert {block.name: depth for block, depth in tree.depth.items()} == {"entry": 0, "a": 1, "b": 1, "m": 1}
    assert tree.dominates(blocks["entry"], blocks["m"])
    assert not tree.dominates(blocks["a"], blocks["m"])
    assert not tree.dominates(blocks["a"], blocks["b"])
    assert tree.dominates(blocks["m"], blocks["m"])
    assert not tree.strictly_dominates(blocks["m"], blocks["m"])
    assert tree.strictly_dominates(blocks["entry"], blocks["a"])
    assert not tree.dominates(blocks["m"], blocks["entry"])


def test_dominance_frontiers_of_a_diamond() -> None:
    function, _ = build_cfg(DIAMOND)
    assert frontier_names(function) == {"entry": set(), "a": {"m"}, "b": {"m"}, "m": set()}


def test_dominators_of_a_simple_loop() -> None:
    function, blocks = build_cfg(SIMPLE_LOOP)
    tree = DominatorTree(function)
    assert idom_names(tree) == {"entry": None, "header": "entry", "body": "header", "exit": "header"}
    assert tree.dominates(blocks["header"], blocks["body"])
    assert not tree.dominates(blocks["body"], blocks["header"])
    assert tree.depth[blocks["body"]] == 2
    # header dominates body, a predecessor of header, and does not strictly dominate itself.
    assert frontier_names(function) == {"entry": set(), "header": {"header"}, "body": {"header"}, "exit": set()}


def test_dominators_of_nested_loops() -> None:
    function, _ = build_cfg(NESTED)
    tree = DominatorTree(function)
    assert idom_names(tree) == {"entry": None, "oh": "entry", "ih": "oh", "ib": "ih", "olatch": "ih",
                                "exit": "oh"}
    # ih dominates ib (pred of ih) and olatch (pred of oh) but strictly dominates neither join.
    assert frontier_names(function) == {"entry": set(), "oh": {"oh"}, "ih": {"ih", "oh"}, "ib": {"ih"},
                                        "olatch": {"oh"}, "exit": set()}


def test_dominators_of_sibling_loops() -> None:
    function, _ = build_cfg(SIBLINGS)
    assert idom_names(DominatorTree(function)) == {"entry": None, "oh": "entry", "h1": "oh", "b1": "h1",
                                                   "h2": "h1", "b2": "h2", "olatch": "h2", "exit": "oh"}
    assert frontier_names(function) == {"entry": set(), "oh": {"oh"}, "h1": {"h1", "oh"}, "b1": {"h1"},
                                        "h2": {"h2", "oh"}, "b2": {"h2"}, "olatch": {"oh"}, "exit": set()}


def test_dominators_of_a_loop_with_two_exits() -> None:
    function, _ = build_cfg(TWO_EXITS)
    assert idom_names(DominatorTree(function)) == {"entry": None, "h": "entry", "b": "h", "latch": "b",
                                                   "exit2": "b", "exit1": "h"}
    assert frontier_names(function) == {"entry": set(), "h": {"h"}, "b": {"h"}, "latch": {"h"},
                                        "exit2": set(), "exit1": set()}


def test_dominators_of_a_while_loop_with_break() -> None:
    function, _ = build_cfg(WHILE_BREAK)
    assert idom_names(DominatorTree(function)) == {"entry": None, "cond": "entry", "body": "cond",
                                                   "latch": "body", "exit": "cond"}
    # body dominates latch (-> cond) and itself (-> exit, the break edge).
    assert frontier_names(function) == {"entry": set(), "cond": {"cond"}, "body": {"cond", "exit"},
                                        "latch": {"cond"}, "exit": set()}


def test_dominators_of_a_self_loop() -> None:
    function, blocks = build_cfg(SELF_LOOP)
    assert idom_names(DominatorTree(function)) == {"entry": None, "s": "entry", "exit": "s"}
    assert names(predecessors(function)[blocks["s"]]) == ["entry", "s"]
    assert frontier_names(function) == {"entry": set(), "s": {"s"}, "exit": set()}


def test_dominators_of_an_irreducible_cfg() -> None:
    function, blocks = build_cfg(IRREDUCIBLE)
    tree = DominatorTree(function)
    assert idom_names(tree) == {"entry": None, "a": "entry", "b": "entry", "exit": "a"}
    assert not tree.dominates(blocks["a"], blocks["b"])
    assert not tree.dominates(blocks["b"], blocks["a"])
    assert frontier_names(function) == {"entry": set(), "a": {"b"}, "b": {"a"}, "exit": set()}


def test_entry_with_a_back_edge_is_in_frontiers() -> None:
    # entry -> a -> entry: a dominates a, a predecessor of the entry, which it does not strictly dominate.
    function, blocks = build_cfg({"entry": ["a"], "a": ["entry", "exit"], "exit": []})
    assert frontier_names(function) == {"entry": {"entry"}, "a": {"entry"}, "exit": set()}
    nest = LoopNest(function)
    assert [loop.header for loop in nest] == [blocks["entry"]]
    assert nest.loops[0].preheader is None


def test_unreachable_blocks_are_dominated_by_everything() -> None:
    function, blocks = build_cfg({**DIAMOND, "dead": ["m"]})
    tree = DominatorTree(function)
    assert blocks["dead"] not in tree.idom
    assert not tree.is_reachable(blocks["dead"])
    assert tree.dominates(blocks["a"], blocks["dead"])
    assert not tree.dominates(blocks["dead"], blocks["a"])
    # The edge dead -> m does not make m a join for a and b any differently.
    assert tree.idom[blocks["m"]] is blocks["entry"]
    assert "dead" not in frontier_names(function)


DEPTH = 3000
"""Blocks in a row in the deep CFGs: three times Python's recursion limit."""


def test_dominators_of_a_long_chain_of_diamonds() -> None:
    """`if`s in a row: each join's idom is the block that branched, each arm's frontier is its join."""
    edges: Edges = {}
    for k in range(DEPTH):
        edges |= {f"c{k}": [f"t{k}", f"f{k}"], f"t{k}": [f"c{k + 1}"], f"f{k}": [f"c{k + 1}"]}
    edges[f"c{DEPTH}"] = []
    function, blocks = build_cfg(edges)
    tree = DominatorTree(function)
    idoms = idom_names(tree)
    assert all(idoms[f"c{k + 1}"] == idoms[f"t{k}"] == f"c{k}" for k in range(DEPTH))
    assert tree.depth[blocks[f"c{DEPTH}"]] == DEPTH and tree.dominates(blocks["c0"], blocks[f"c{DEPTH}"])
    frontiers = frontier_names(function)
    assert all(frontiers[f"t{k}"] == frontiers[f"f{k}"] == {f"c{k + 1}"} for k in range(DEPTH))


def test_dominators_of_a_join_of_a_long_chain() -> None:
    """`a and b and ...`: a chain of blocks that each may leave to one join."""
    edges: Edges = {f"b{k}": [f"b{k + 1}", "join"] for k in range(DEPTH)}
    edges |= {f"b{DEPTH}": ["join"], "join": []}
    function, blocks = build_cfg(edges)
    tree = DominatorTree(function)
    assert tree.idom[blocks["join"]] is blocks["b0"] and tree.depth[blocks[f"b{DEPTH}"]] == DEPTH
    assert all(frontier == {"join"} for name, frontier in frontier_names(function).items()
               if name not in ("b0", "join"))


# --- def_use.py ---------------------------------------------------------------------------------------------


def test_operands_first_walks_a_long_chain_without_recursion() -> None:
    """Each value once, after its operands; values in `done` neither yielded nor walked through."""
    function = make_function("chain", [("x", F64)], F64)
    b = Builder(function.add_block("entry"))
    chain: list[Value] = [function.args[0]]
    for _ in range(DEPTH):
        chain.append(b.fadd(chain[-1], chain[-1]))  # each operand twice: visited once
    b.ret(chain[-1])
    order = list(operands_first(chain[-1], lambda value: getattr(value, "operands", ())))
    assert order == chain
    half = DEPTH // 2
    assert list(operands_first(chain[-1], lambda value: getattr(value, "operands", ()), set(chain[:half]))) \
        == chain[half:]
    assert list(operands_first(chain[-1], lambda value: getattr(value, "operands", ()), {chain[-1]})) == []


# --- dominates_use and instruction_dominates -----------------------------------------------------------------


def use_of(value: Value, user: Instruction, index: int = 0) -> Use:
    return [use for use in value.uses if use.user is user][index]


def counting_loop() -> tuple[Function, dict[str, Block], dict[str, Instruction]]:
    """entry: br header; header: %i = phi [entry: 0, body: %i.next]; cbr %i < %n, body, exit; body:
    %i.next = iadd %i, 1; br header; exit: ret %i."""
    function = make_function("count", [("n", I64)], I64)
    blocks = {name: function.add_block(name) for name in ("entry", "header", "body", "exit")}
    b = Builder(blocks["entry"])
    b.br(blocks["header"])
    i = b.at_end(blocks["header"]).phi(I64, name="i")
    cond = b.icmp_slt(i, function.args[0], name="cond")
    b.cbr(cond, blocks["body"], blocks["exit"])
    i_next = b.at_end(blocks["body"]).iadd(i, 1, name="i.next")
    b.br(blocks["header"])
    i.add_incoming(blocks["entry"], Constant(I64, 0))
    i.add_incoming(blocks["body"], i_next)
    ret = b.at_end(blocks["exit"]).ret(i)
    return function, blocks, {"i": i, "cond": cond, "i.next": i_next, "ret": ret}


def test_phi_operand_is_used_at_the_end_of_its_incoming_block() -> None:
    function, _, values = counting_loop()
    tree = DominatorTree(function)
    i, i_next = values["i"], values["i.next"]
    # body does not dominate header, so %i.next does not dominate the phi instruction itself...
    assert not tree.instruction_dominates(i_next, i)
    # ...but the phi reads it on the edge body -> header, where it is available.
    assert tree.dominates_use(i_next, use_of(i_next, i))


def test_instruction_dominance_in_a_loop() -> None:
    function, _, values = counting_loop()
    tree = DominatorTree(function)
    i, cond, i_next, ret = values["i"], values["cond"], values["i.next"], values["ret"]
    assert tree.instruction_dominates(i, cond)           # same block, earlier
    assert not tree.instruction_dominates(cond, i)       # same block, later
    assert not tree.instruction_dominates(i, i)
    assert tree.instruction_dominates(i, i_next)         # header dominates body
    assert tree.instruction_dominates(cond, ret)         # header dominates exit
    assert not tree.instruction_dominates(i_next, ret)   # body does not dominate exit
    assert tree.dominates_use(i, use_of(i, cond))
    assert tree.dominates_use(i, use_of(i, ret))
    n = function.args[0]
    assert tree.dominates_use(n, use_of(n, cond))        # arguments are available everywhere


def test_phi_operand_from_a_block_the_definition_does_not_dominate() -> None:
    function = make_function("f", [("c", I1), ("y", F64)], F64)
    blocks = {name: function.add_block(name) for name in ("entry", "a", "b", "m")}
    b = Builder(blocks["entry"])
    b.cbr(function.args[0], blocks["a"], blocks["b"])
    x = b.at_end(blocks["a"]).fadd(function.args[1], 1.0, name="x")
    b.br(blocks["m"])
    b.at_end(blocks["b"]).br(blocks["m"])
    phi = b.at_end(blocks["m"]).phi(F64, [(blocks["a"], x), (blocks["b"], x)], name="p")
    b.ret(phi)
    tree = DominatorTree(function)
    assert tree.dominates_use(x, use_of(x, phi, 0))      # incoming from a: x is defined there
    assert not tree.dominates_use(x, use_of(x, phi, 1))  # incoming from b: a does not dominate b


# --- loops.py -----------------------------------------------------------------------------------------------


def only_loop(nest: LoopNest) -> Loop:
    assert len(nest) == 1
    return nest.loops[0]


def test_no_loops_in_a_diamond() -> None:
    function, blocks = build_cfg(DIAMOND)
    nest = LoopNest(function)
    assert nest.loops == [] and nest.top_level == []
    assert all(nest.loop_of(block) is None and nest.depth(block) == 0 for block in blocks.values())
    assert not has_irreducible_control_flow(function)


def test_simple_loop() -> None:
    function, blocks = build_cfg(SIMPLE_LOOP)
    loop = only_loop(LoopNest(function))
    assert loop.header is blocks["header"]
    assert names(loop.latches) == ["body"]
    assert names(loop.blocks) == ["header", "body"]
    assert names(loop.exiting_blocks) == ["header"]
    assert names(loop.exit_blocks) == ["exit"]
    assert loop.preheader is blocks["entry"]
    assert loop.parent is None and loop.children == [] and loop.depth == 1
    assert loop.contains(blocks["body"]) and blocks["header"] in loop
    assert not loop.contains(blocks["exit"]) and not loop.contains(blocks["entry"])
    assert back_edges(DominatorTree(function)) == [(blocks["body"], blocks["header"])]


def test_nested_loops() -> None:
    function, blocks = build_cfg(NESTED)
    nest = LoopNest(function)
    outer, inner = nest.loops
    assert (outer.header, inner.header) == (blocks["oh"], blocks["ih"])
    assert names(outer.blocks) == ["oh", "ih", "ib", "olatch"]
    assert names(inner.blocks) == ["ih", "ib"]
    assert names(outer.latches) == ["olatch"] and names(inner.latches) == ["ib"]
    assert inner.parent is outer and outer.parent is None
    assert outer.children == [inner] and inner.children == []
    assert (outer.depth, inner.depth) == (1, 2)
    assert nest.top_level == [outer]
    assert outer.contains(inner) and outer.contains(outer) and not inner.contains(outer)


def test_nested_loop_exits_and_preheaders() -> None:
    function, blocks = build_cfg(NESTED)
    outer, inner = LoopNest(function).loops
    assert names(inner.exiting_blocks) == ["ih"] and names(inner.exit_blocks) == ["olatch"]
    assert names(outer.exiting_blocks) == ["oh"] and names(outer.exit_blocks) == ["exit"]
    assert outer.preheader is blocks["entry"]
    # The inner header's only outside predecessor, oh, also branches to exit: no preheader.
    assert names(inner.entering_blocks) == ["oh"]
    assert inner.preheader is None


def test_loop_of_and_depth_in_nested_loops() -> None:
    function, blocks = build_cfg(NESTED)
    nest = LoopNest(function)
    outer, inner = nest.loops
    expected = {"entry": (None, 0), "oh": (outer, 1), "ih": (inner, 2), "ib": (inner, 2), "olatch": (outer, 1),
                "exit": (None, 0)}
    for name, (loop, depth) in expected.items():
        assert nest.loop_of(blocks[name]) is loop, name
        assert nest.depth(blocks[name]) == depth, name


def test_sibling_loops_inside_an_outer_loop() -> None:
    function, blocks = build_cfg(SIBLINGS)
    nest = LoopNest(function)
    assert [names([loop.header]) for loop in nest] == [["oh"], ["h1"], ["h2"]]
    outer, first, second = nest.loops
    assert outer.children == [first, second]
    assert first.parent is outer and second.parent is outer
    assert first.depth == second.depth == 2
    assert names(outer.blocks) == ["oh", "h1", "b1", "h2", "b2", "olatch"]
    assert names(first.blocks) == ["h1", "b1"] and names(second.blocks) == ["h2", "b2"]
    assert not first.contains(second) and not second.contains(first)
    assert names(first.exit_blocks) == ["h2"] and names(second.exit_blocks) == ["olatch"]
    assert first.preheader is None    # oh also branches to exit
    assert second.preheader is None   # h1 also branches to b1
    assert nest.loop_of(blocks["b2"]) is second and nest.loop_of(blocks["olatch"]) is outer
    assert nest.depth(blocks["b1"]) == 2 and nest.depth(blocks["exit"]) == 0


def test_loop_with_two_exits_lists_exits_in_layout_order() -> None:
    function, blocks = build_cfg(TWO_EXITS)
    loop = only_loop(LoopNest(function))
    assert names(loop.blocks) == ["h", "b", "latch"]
    assert names(loop.exiting_blocks) == ["h", "b"]
    assert names(loop.exit_blocks) == ["exit2", "exit1"]  # layout order, not discovery order
    assert loop.preheader is blocks["entry"]


def test_while_loop_with_break_has_one_exit_block() -> None:
    function, blocks = build_cfg(WHILE_BREAK)
    loop = only_loop(LoopNest(function))
    assert loop.header is blocks["cond"]
    assert names(loop.latches) == ["latch"]
    assert names(loop.blocks) == ["cond", "body", "latch"]
    assert names(loop.exiting_blocks) == ["cond", "body"]
    assert names(loop.exit_blocks) == ["exit"]            # reached from two exiting blocks, listed once
    assert loop.preheader is blocks["entry"]


def test_self_loop() -> None:
    function, blocks = build_cfg(SELF_LOOP)
    loop = only_loop(LoopNest(function))
    assert loop.header is blocks["s"]
    assert loop.latches == [blocks["s"]] and loop.blocks == [blocks["s"]]
    assert loop.exiting_blocks == [blocks["s"]] and names(loop.exit_blocks) == ["exit"]
    assert loop.preheader is blocks["entry"]


def test_latches_of_one_header_make_one_loop_in_layout_order() -> None:
    function, blocks = build_cfg({"entry": ["h"], "h": ["a", "exit"], "a": ["l1", "l2"], "l2": ["h"],
                                  "l1": ["h"], "exit": []})
    loop = only_loop(LoopNest(function))
    assert names(loop.latches) == ["l2", "l1"]
    assert names(loop.blocks) == ["h", "a", "l2", "l1"]


def test_preheader_needs_a_single_outside_predecessor() -> None:
    # The header is entered from both arms of a diamond: two entering blocks, no preheader.
    function, blocks = build_cfg({"entry": ["a", "b"], "a": ["h"], "b": ["h"], "h": ["body", "exit"],
                                  "body": ["h"], "exit": []})
    loop = only_loop(LoopNest(function))
    assert names(loop.entering_blocks) == ["a", "b"]
    assert loop.preheader is None


def test_unreachable_predecessor_of_a_header_is_ignored() -> None:
    function, blocks = build_cfg({**SIMPLE_LOOP, "dead": ["header"]})
    nest = LoopNest(function)
    loop = only_loop(nest)
    assert names(loop.blocks) == ["header", "body"]
    assert loop.preheader is blocks["entry"]
    assert nest.loop_of(blocks["dead"]) is None


def test_irreducible_cycle_is_not_a_loop() -> None:
    function, blocks = build_cfg(IRREDUCIBLE)
    nest = LoopNest(function)
    assert nest.loops == []
    assert nest.loop_of(blocks["a"]) is None
    assert has_irreducible_control_flow(function)


def test_irreducible_cycle_inside_a_natural_loop() -> None:
    # The outer loop h..latch is natural; inside it, a and b form a cycle entered at both.
    edges: Edges = {"entry": ["h"], "h": ["a", "b"], "a": ["b", "latch"], "b": ["a", "latch"],
                    "latch": ["h", "exit"], "exit": []}
    function, blocks = build_cfg(edges)
    loop = only_loop(LoopNest(function))
    assert loop.header is blocks["h"]
    assert names(loop.blocks) == ["h", "a", "b", "latch"]
    assert has_irreducible_control_flow(function)


@pytest.mark.parametrize("edges", [DIAMOND, SIMPLE_LOOP, NESTED, SIBLINGS, TWO_EXITS, WHILE_BREAK, SELF_LOOP])
def test_reducible_cfgs(edges: Edges) -> None:
    function, _ = build_cfg(edges)
    assert not has_irreducible_control_flow(function)


def test_loop_repr_does_not_recurse_through_parent() -> None:
    function, _ = build_cfg(NESTED)
    _, inner = LoopNest(function).loops
    assert repr(inner) == "<Loop header=ih depth=2 blocks=2>"


# --- random CFGs against the definitions --------------------------------------------------------------------


@st.composite
def random_cfgs(draw: st.DrawFn) -> Edges:
    """Up to 9 blocks b0..bN, each with 0, 1 or 2 distinct successors (edges into the entry allowed)."""
    count = draw(st.integers(1, 9))
    edges: Edges = {}
    for index in range(count):
        width = draw(st.sampled_from([0, 1, 1, 2, 2, 2]))
        targets = draw(st.lists(st.integers(0, count - 1), min_size=0, max_size=width, unique=True))
        edges[f"b{index}"] = [f"b{target}" for target in targets]
    return edges


def reach(edges: Edges, start: str, removed: str | None = None) -> set[str]:
    """Blocks reachable from `start` without entering `removed` (empty if start is removed)."""
    if start == removed:
        return set()
    seen, stack = {start}, [start]
    while stack:
        for succ in edges[stack.pop()]:
            if succ != removed and succ not in seen:
                seen.add(succ)
                stack.append(succ)
    return seen


def brute_dominators(edges: Edges) -> dict[str, set[str]]:
    """dom(b) for reachable b: the blocks whose removal makes b unreachable from the entry (and b itself)."""
    entry = next(iter(edges))
    reachable = reach(edges, entry)
    return {b: {a for a in reachable if a == b or b not in reach(edges, entry, removed=a)} for b in reachable}


def brute_predecessors(edges: Edges) -> dict[str, set[str]]:
    preds: dict[str, set[str]] = {name: set() for name in edges}
    for name, targets in edges.items():
        for target in targets:
            preds[target].add(name)
    return preds


@settings(max_examples=300, deadline=None)
@given(random_cfgs())
def test_dominator_tree_matches_definition(edges: Edges) -> None:
    function, blocks = build_cfg(edges)
    tree = DominatorTree(function)
    dom = brute_dominators(edges)
    assert name_set(tree.rpo) == set(dom)
    for b in dom:
        strict = dom[b] - {b}
        # The immediate dominator is the strict dominator that all other strict dominators dominate.
        idom = [d for d in strict if strict <= dom[d]]
        assert (tree.idom[blocks[b]].name if tree.idom[blocks[b]] else None) == (idom[0] if idom else None)
        assert tree.depth[blocks[b]] == len(strict)
        for a in dom:
            assert tree.dominates(blocks[a], blocks[b]) == (a in dom[b]), (a, b)
            assert tree.strictly_dominates(blocks[a], blocks[b]) == (a in strict), (a, b)


@settings(max_examples=300, deadline=None)
@given(random_cfgs())
def test_dominance_frontiers_match_definition(edges: Edges) -> None:
    function, _ = build_cfg(edges)
    dom = brute_dominators(edges)
    preds = brute_predecessors(edges)
    expected = {a: {b for b in dom if any(a in dom[p] for p in preds[b] if p in dom) and not (a != b and a in dom[b])}
                for a in dom}
    assert frontier_names(function) == expected


@given(random_cfgs())
def test_nearest_common_dominator_and_reachable_from_match_definitions(edges: Edges) -> None:
    function, blocks = build_cfg(edges)
    tree = DominatorTree(function)
    dom = brute_dominators(edges)
    for a in dom:
        for b in dom:
            common = dom[a] & dom[b]  # every block dominating both; the nearest is dominated by all of them
            nearest = [d for d in common if common <= dom[d]]
            assert tree.nearest_common_dominator(blocks[a], blocks[b]).name == nearest[0]
    for name in edges:
        after = set().union(*(reach(edges, s) for s in edges[name])) if edges[name] else set()
        assert name_set(reachable_from(blocks[name])) == after
        for avoided in edges:  # paths that do not pass through `avoided`
            after = set().union(*(reach(edges, s, avoided) for s in edges[name])) if edges[name] else set()
            assert name_set(reachable_from(blocks[name], avoiding=blocks[avoided])) == after


@settings(max_examples=200, deadline=None)
@given(random_cfgs())
def test_reverse_post_order_is_a_dfs_order(edges: Edges) -> None:
    function, _ = build_cfg(edges)
    entry = next(iter(edges))
    rpo = names(reverse_post_order(function))
    assert sorted(rpo) == sorted(reach(edges, entry)) and rpo[0] == entry
    assert names(post_order(function)) == rpo[::-1]
    position = {name: index for index, name in enumerate(rpo)}
    dom = brute_dominators(edges)
    preds = brute_predecessors(edges)
    for b in rpo[1:]:
        # Every block after the entry has its DFS parent, a predecessor, before it...
        assert any(position[p] < position[b] for p in preds[b] if p in position)
        # ...and all its dominators before it.
        assert all(position[d] <= position[b] for d in dom[b])


def brute_loops(edges: Edges) -> dict[str, tuple[set[str], set[str]]]:
    """Header -> (latches, body): latches are predecessors the header dominates; the body is the header and
    every block that reaches a latch without passing through the header."""
    dom = brute_dominators(edges)
    loops = {}
    for header in dom:
        latches = {latch for latch in dom if header in edges[latch] and header in dom[latch]}
        if latches:
            body = {b for b in dom if b == header or latches & reach(edges, b, removed=header)}
            loops[header] = (latches, body)
    return loops


def is_reducible_by_t1_t2(edges: Edges) -> bool:
    """Hecht and Ullman: a flow graph is reducible iff T1 (drop a self-loop) and T2 (merge a block with a
    single predecessor into it) shrink it to one node."""
    entry = next(iter(edges))
    nodes = reach(edges, entry)
    succs = {n: {s for s in edges[n] if s in nodes} for n in nodes}
    changed = True
    while changed:
        changed = False
        for n in succs:
            succs[n].discard(n)                                          # T1
        for n in list(succs):
            preds = [p for p in succs if n in succs[p]]
            if n != entry and len(preds) == 1:                           # T2
                succs[preds[0]] |= succs.pop(n)
                succs[preds[0]].discard(n)
                changed = True
                break
    return len(succs) == 1


@settings(max_examples=300, deadline=None)
@given(random_cfgs())
def test_loops_match_definition(edges: Edges) -> None:
    function, blocks = build_cfg(edges)
    nest = LoopNest(function)
    expected = brute_loops(edges)
    assert [loop.header.name for loop in nest] == [h for h in names(reverse_post_order(function)) if h in expected]
    for loop in nest:
        latches, body = expected[loop.header.name]  # type: ignore[index]
        assert name_set(loop.latches) == latches
        assert name_set(loop.blocks) == body and len(loop.blocks) == len(body)
        assert name_set(loop.exiting_blocks) == {b for b in body if set(edges[b]) - body}
        assert name_set(loop.exit_blocks) == {s for b in body for s in edges[b]} - body
        assert len(loop.exit_blocks) == len(set(loop.exit_blocks))
    # Nesting: a block's loop is the smallest containing it, a loop's parent the smallest strictly containing it.
    for name, block in blocks.items():
        containing = [h for h, (_, body) in expected.items() if name in body]
        innermost = min(containing, key=lambda h: len(expected[h][1]), default=None)
        found = nest.loop_of(block)
        assert (found.header.name if found else None) == innermost
        assert nest.depth(block) == len(containing)
    for loop in nest:
        parent = loop.parent
        outer = [h for h, (_, body) in expected.items() if h != loop.header.name and loop.header.name in body]
        assert (parent.header.name if parent else None) == min(outer, key=lambda h: len(expected[h][1]),
                                                                    default=None)
        assert all(child.parent is loop for child in loop.children)


@settings(max_examples=300, deadline=None)
@given(random_cfgs())
def test_irreducibility_matches_t1_t2_reduction(edges: Edges) -> None:
    function, _ = build_cfg(edges)
    assert has_irreducible_control_flow(function) == (not is_reducible_by_t1_t2(edges))


@settings(max_examples=200, deadline=None)
@given(random_cfgs())
def test_preheader_matches_definition(edges: Edges) -> None:
    function, blocks = build_cfg(edges)
    dom = brute_dominators(edges)
    preds = brute_predecessors(edges)
    for loop in LoopNest(function):
        header = loop.header.name
        outside = sorted((p for p in preds[header] if p in dom and p not in name_set(loop.blocks)),
                         key=list(edges).index)
        expected = outside[0] if len(outside) == 1 and edges[outside[0]] == [header] else None
        assert (loop.preheader.name if loop.preheader else None) == expected
