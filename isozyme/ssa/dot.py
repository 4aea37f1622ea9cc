"""Graphviz diagrams of the control-flow graph: `python -m isozyme ir FILE.py:kernel --dot cfg.dot`.

One cluster per function; each basic block is a node listing its label and its instructions (as the
printer writes them, left-aligned); each `br` is an edge, each `cbr` two edges labelled `true` and
`false`. Blocks of a reverse pass are filled in another colour than the primal blocks. The rule
(`is_adjoint_block`): reverse mode (enzyme_ad/reverse.py) names the reverse of block B `B.rev`, the blocks
on its reversed edges `B.rev.P` and `B.rev.notK`, and the block that returns `exit`; so a block of a
`diffe_`/`reverse_` function whose label has a `.rev` component after the first (`for.body.rev`,
`mag.for.header.rev.mag.for.body`, `for.header.rev.1` once the printer made it unique), or is `exit`, is
an adjoint block. The optimizer keeps one label when it merges blocks, so a merged block is coloured by
the label it kept; a forward-mode `fwddiffe_` function has no adjoint blocks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from isozyme.ssa.ir import Block, Function
from isozyme.ssa.printer import Namer, print_instruction

PRIMAL_COLOR = "#dbe9f6"
"""Fill of primal blocks (light blue)."""
ADJOINT_COLOR = "#fde0c5"
"""Fill of the reverse pass's blocks (light orange)."""
_REVERSE_LABEL = re.compile(r"\.rev(\.|$)")
_REVERSE_FUNCTIONS = ("diffe_", "reverse_")


def is_adjoint_block(function: Function, label: str) -> bool:
    """Whether the block printed as `label` belongs to the reverse pass of a reverse-mode derivative."""
    if not function.name.startswith(_REVERSE_FUNCTIONS):
        return False
    return label == "exit" or _REVERSE_LABEL.search(label) is not None


def escape(text: str) -> str:
    """`text` inside a double-quoted dot string, each line ended by `\\l` (left-aligned)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return "".join(line + "\\l" for line in escaped.split("\n"))


def _node_id(index: int, namer: Namer, block: Block) -> str:
    return f'"f{index}.{namer.block(block)}"'


def function_dot(function: Function, index: int = 0) -> list[str]:
    """The lines of one `subgraph cluster_<index>` holding `function`'s blocks and edges."""
    namer = Namer(function)
    lines = [f"  subgraph cluster_{index} {{", f'    label="@{function.name}";', '    fontname="monospace";']
    for block in function.blocks:
        label = namer.block(block)
        body = [f"{label}:"] + ["  " + print_instruction(inst, namer) for inst in block.instructions]
        color = ADJOINT_COLOR if is_adjoint_block(function, label) else PRIMAL_COLOR
        shape = "box, peripheries=2" if block is function.blocks[0] else "box"  # the entry: a double frame
        lines.append(f'    {_node_id(index, namer, block)} [label="{escape(chr(10).join(body))}", '
                     f'fillcolor="{color}", shape={shape}];')
    for block in function.blocks:
        terminator = block.terminator
        if terminator is None:
            continue
        targets = terminator.successors
        labels = ["true", "false"] if len(targets) == 2 else [""] * len(targets)
        for target, edge_label in zip(targets, labels):
            attributes = f' [label="{edge_label}"]' if edge_label else ""
            lines.append(f"    {_node_id(index, namer, block)} -> {_node_id(index, namer, target)}{attributes};")
    lines.append("  }")
    return lines


def cfg_dot(functions: Iterable[Function], title: str = "isozyme") -> str:
    """A `digraph` of `functions` (a Module, say), one cluster each, ending with a newline."""
    lines = [f'digraph "{title.replace(chr(34), "")}" {{', '  node [style=filled, fontname="monospace", fontsize=10];',
             '  edge [fontname="monospace", fontsize=9];']
    for index, function in enumerate(functions):
        lines.extend(function_dot(function, index))
    lines.append("}")
    return "\n".join(lines) + "\n"
