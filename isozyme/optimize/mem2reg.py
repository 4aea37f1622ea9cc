"""mem2reg: promote local arrays accessed only at constant indices to SSA values.

After mem2reg no promotable `alloc` is left. An alloc is promotable when its extents are non-negative
constants and each of its uses is a `dim` of it, or a `load`, `store` or `atomic_add` of it at constant
in-bounds indices, and it is not `growable` (a tape whose extent `grow` changes). Each element used then
becomes a variable of its own (scalar replacement), so the slot `%acc = alloc f64[1] zeroed` that AD's
adjoint accumulators use becomes a plain f64 value. An alloc with any other use (a call or a phi taking the
array, a variable or out-of-bounds index) is left alone.

Construction follows Cytron et al. ("Efficiently computing static single assignment form", 1991): phis go
at the iterated dominance frontier of the blocks that define an element (its stores and atomic adds, and
the alloc, which initializes it every time it runs), where the element is live on entry (pruned SSA, as
LLVM's mem2reg does), then one walk down the dominator tree carries each element's current value. The
alloc sets it to the interpreter's fill of fresh memory (`uninitialized_fill`: nan, the integer minimum,
true) or to zero when it is `zeroed`; a load takes the current value, a store replaces it, an atomic add
becomes an add of the current value and the addend (in that order, as the interpreter computes it), and
a dim becomes the constant extent. Phis that turn out unused, or trivial
(every incoming value is one value or the phi itself), are removed again, as in Braun et al. 2013.

Blocks unreachable from the entry are not on the walk: their loads read the fill value, their stores go.
Requires verified SSA; keeps it valid, and the interpreter computes bit-identical results.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass, field

from isozyme.ssa.cfg import post_order
from isozyme.ssa.dominators import DominatorTree, dominance_frontiers
from isozyme.ssa.flags import is_growable_alloc
from isozyme.ssa.interpreter import uninitialized_fill
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Phi, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import I64, ArrayType, ScalarKind, ScalarType

Element = tuple[int, ...]
Variable = tuple[Instruction, Element]
"""One promoted element: its alloc and its index."""

ARRAY_OPERAND: dict[Op, int] = {Op.LOAD: 0, Op.STORE: 1, Op.ATOMIC_ADD: 1}
"""For each element access, the position of the array operand; its indices follow it."""

DEFINES: frozenset[Op] = frozenset({Op.STORE, Op.ATOMIC_ADD})
"""Accesses that give the element a new value."""

ADD_OF_KIND: dict[ScalarKind, Op] = {ScalarKind.INT: Op.IADD, ScalarKind.FLOAT: Op.FADD}
"""The addition an `atomic_add` performs, by the element's kind."""


def accessed_element(inst: Instruction) -> Element | None:
    """The constant index tuple of a load, store or atomic add; None when an index is not constant."""
    indices = inst.operands[ARRAY_OPERAND[inst.op] + 1:]
    if not all(isinstance(index, Constant) for index in indices):
        return None
    return tuple(index.value for index in indices)  # type: ignore[attr-defined, misc]


def _shape(alloc: Instruction) -> tuple[int, ...] | None:
    if not all(isinstance(e, Constant) and e.value >= 0 for e in alloc.operands):  # type: ignore[attr-defined]
        return None
    return tuple(extent.value for extent in alloc.operands)  # type: ignore[attr-defined, misc]


def promotable_elements(alloc: Instruction) -> set[Element] | None:
    """The elements of `alloc` that are accessed, if it is promotable (module docstring); else None."""
    shape = _shape(alloc)
    if shape is None or is_growable_alloc(alloc):
        return None
    elements: set[Element] = set()
    for use in alloc.uses:
        user = use.user
        if user.op is Op.DIM:
            continue
        if ARRAY_OPERAND.get(user.op) != use.index:
            return None
        element = accessed_element(user)
        if element is None or not all(0 <= i < extent for i, extent in zip(element, shape)):
            return None
        elements.add(element)
    return elements


def initial_value(alloc: Instruction) -> Constant:
    """What every element of a fresh `alloc` holds: zero when `zeroed`, else the interpreter's fill."""
    element: ScalarType = alloc.type.element  # type: ignore[attr-defined]
    return Constant(element, 0 if "zeroed" in alloc.flags else uninitialized_fill(element))


def iterated_frontier(blocks: set[Block], frontiers: dict[Block, set[Block]],
                      live: Container[Block] | None = None) -> set[Block]:
    """DF+(blocks): the blocks where the definitions in `blocks` need phis; only those in `live`, when it is
    given, and the walk goes on only from those (a phi where the variable is dead is never needed)."""
    result: set[Block] = set()
    worklist = list(blocks)
    while worklist:
        for block in frontiers.get(worklist.pop(), ()):
            if block not in result and (live is None or block in live):
                result.add(block)
                worklist.append(block)
    return result


class _LiveIn:
    """Where each variable is live on entry to a block: the blocks that read it before defining it, and,
    back from those, the predecessors up to its definitions. Solved for all variables at once, a bit per
    variable (those read before being defined somewhere) in one integer per block: after AD, thousands of
    adjoint slots are each live across thousands of blocks (from their zeroing in the entry block on)."""

    def __init__(self, reads_first: dict[Variable, list[Block]], defines: dict[Variable, set[Block]],
                 function: Function) -> None:
        self.bits = {variable: 1 << bit for bit, variable in enumerate(reads_first)}
        uses: dict[Block, int] = {}
        kills: dict[Block, int] = {}
        for variable, bit in self.bits.items():
            for block in reads_first[variable]:
                uses[block] = uses.get(block, 0) | bit
            for block in defines[variable]:
                kills[block] = kills.get(block, 0) | bit
        self.sets: dict[Block, int] = {}
        order = post_order(function)  # successors first: one round settles all but loops
        changed = True
        while changed:
            changed = False
            for block in order:
                out = 0
                for succ in block.successors:
                    out |= self.sets.get(succ, 0)
                live = uses.get(block, 0) | (out & ~kills.get(block, 0))
                if live != self.sets.get(block, 0):
                    self.sets[block] = live
                    changed = True

    def blocks_of(self, variable: Variable) -> _LiveBlocks:
        return _LiveBlocks(self.sets, self.bits.get(variable, 0))


@dataclass(frozen=True)
class _LiveBlocks:
    """The blocks where one variable is live on entry (`_LiveIn`), as a container."""

    sets: dict[Block, int]
    bit: int

    def __contains__(self, block: object) -> bool:
        return bool(self.sets.get(block, 0) & self.bit)  # type: ignore[call-overload]


class _CurrentValues:
    """The value of each variable where the renaming walk is. A definition is undone when the walk leaves
    the dominator subtree it was made in: one table for the whole walk, where a copy per block would cost
    the number of variables (thousands of adjoint slots after AD) times the number of blocks."""

    def __init__(self, initial: dict[Variable, Value]) -> None:
        self.values = initial
        self.log: list[tuple[Variable, Value]] = []
        """(variable, its value before a definition)"""

    def __getitem__(self, variable: Variable) -> Value:
        return self.values[variable]

    def __setitem__(self, variable: Variable, value: Value) -> None:
        self.log.append((variable, self.values[variable]))
        self.values[variable] = value

    def mark(self) -> int:
        return len(self.log)

    def undo(self, mark: int) -> None:
        """Back to the values at `mark`."""
        while len(self.log) > mark:
            variable, before = self.log.pop()
            self.values[variable] = before


@dataclass
class _Promotion:
    """The state of one run over a function: the variables, their phis and the renaming walk."""

    function: Function
    tree: DominatorTree
    elements: dict[Instruction, list[Element]]
    """Promoted allocs and their accessed elements."""
    initial: dict[Variable, Constant] = field(default_factory=dict)
    """One shared constant per variable: its value after the alloc."""
    phis: dict[Phi, Variable] = field(default_factory=dict)
    """The phis placed here, with their variable."""

    def place_phis(self) -> None:
        """Phis at the iterated dominance frontier of each variable's definitions, where it is live (pruned
        SSA, as LLVM's mem2reg: after AD, thousands of adjoint slots each defined in a few blocks would
        otherwise get phis at every join of a long CFG, only for most to be removed again)."""
        frontiers = dominance_frontiers(self.function, self.tree)
        layout = {block: index for index, block in enumerate(self.function.blocks)}
        reads_first, defines = self._accesses_by_block()
        live_in = _LiveIn(reads_first, defines, self.function)
        next_phi_at: dict[Block, int] = {}  # where the next phi of a block goes
        for alloc, elements in self.elements.items():
            for element in elements:
                variable = (alloc, element)
                self.initial[variable] = initial_value(alloc)
                live = live_in.blocks_of(variable)
                for block in sorted(iterated_frontier(defines[variable], frontiers, live), key=layout.__getitem__):
                    phi = Phi(self.initial[variable].type, name=_phi_name(alloc, element), loc=alloc.loc)
                    index = next_phi_at[block] if block in next_phi_at else block.first_non_phi_index()
                    block.insert(index, phi)
                    next_phi_at[block] = index + 1
                    self.phis[phi] = variable

    def _accesses_by_block(self) -> tuple[dict[Variable, list[Block]], dict[Variable, set[Block]]]:
        """For each variable, the blocks whose first access to it reads it (a load or an atomic add before
        any store), and the blocks that define it (the alloc's, and those with stores or atomic adds)."""
        reads_first: dict[Variable, list[Block]] = {}
        defines: dict[Variable, set[Block]] = {}
        for alloc, elements in self.elements.items():
            for element in elements:
                defines[(alloc, element)] = {alloc.block}  # type: ignore[arg-type]
        seen: set[tuple[Variable, Block]] = set()
        for block in self.function.blocks:
            for inst in block.instructions:
                if inst.op not in ARRAY_OPERAND or _array_of(inst) not in self.elements:
                    continue
                variable = _variable(inst)
                if (variable, block) not in seen:
                    seen.add((variable, block))
                    if inst.op is not Op.STORE and block is not variable[0].block:  # the alloc comes first
                        reads_first.setdefault(variable, []).append(block)
                if inst.op in DEFINES:
                    defines[variable].add(block)
        return reads_first, defines

    def rename(self) -> None:
        """Walk the dominator tree, then the unreachable blocks, rewriting accesses to promoted allocs."""
        current = _CurrentValues(dict(self.initial))
        # (block, None) to visit it; (block, mark) to leave its subtree, undoing its definitions
        stack: list[tuple[Block, int | None]] = [(self.function.entry, None)]
        while stack:
            block, mark = stack.pop()
            if mark is not None:
                current.undo(mark)
                continue
            stack.append((block, current.mark()))
            self.visit(block, current)
            stack.extend((child, None) for child in reversed(self.tree.children[block]))
        for block in self.function.blocks:
            if not self.tree.is_reachable(block):
                self.visit(block, _CurrentValues(dict(self.initial)))

    def visit(self, block: Block, current: _CurrentValues) -> None:
        for phi in block.phis:
            if phi in self.phis:
                current[self.phis[phi]] = phi
        for inst in list(block.instructions):
            if inst.op is Op.ALLOC and inst in self.elements:
                for element in self.elements[inst]:
                    current[(inst, element)] = self.initial[(inst, element)]
            elif inst.op in REWRITES and _array_of(inst) in self.elements:
                REWRITES[inst.op](inst, current)
        for successor in block.successors:
            for phi in successor.phis:
                if phi in self.phis:
                    phi.add_incoming(block, current[self.phis[phi]])


def _array_of(inst: Instruction) -> Value:
    return inst.operands[0] if inst.op is Op.DIM else inst.operands[ARRAY_OPERAND[inst.op]]


def _phi_name(alloc: Instruction, element: Element) -> str | None:
    if alloc.name is None or alloc.type.rank == 1 and alloc.operands[0].value == 1:  # type: ignore[attr-defined]
        return alloc.name
    return ".".join([alloc.name, *map(str, element)])


def _variable(inst: Instruction) -> Variable:
    return _array_of(inst), accessed_element(inst)  # type: ignore[return-value]


def _rewrite_load(inst: Instruction, current: _CurrentValues) -> None:
    value = current[_variable(inst)]
    if "parallel" in inst.flags and isinstance(value, Phi) and value.block is inst.block:
        value.flags.add("parallel")  # the reverse counter of a prange loop (enzyme_ad/reverse.py)
    inst.replace_all_uses_with(value)
    inst.erase()


def _rewrite_store(inst: Instruction, current: _CurrentValues) -> None:
    current[_variable(inst)] = inst.operands[0]
    inst.erase()


def _rewrite_atomic_add(inst: Instruction, current: _CurrentValues) -> None:
    variable = _variable(inst)
    old, addend = current[variable], inst.operands[0]
    total = Instruction(old.type, op=ADD_OF_KIND[old.type.kind], operands=(old, addend),  # type: ignore[attr-defined]
                        name=variable[0].name, loc=inst.loc)
    inst.block.insert_before(inst, total)  # type: ignore[union-attr]
    current[variable] = total
    inst.erase()


def _rewrite_dim(inst: Instruction, current: _CurrentValues) -> None:
    extent = _array_of(inst).operands[inst.attrs["axis"]]  # type: ignore[index, union-attr]
    inst.replace_all_uses_with(Constant(I64, extent.value))  # type: ignore[attr-defined]
    inst.erase()


REWRITES: dict[Op, Callable[[Instruction, _CurrentValues], None]] = {
    Op.LOAD: _rewrite_load,
    Op.STORE: _rewrite_store,
    Op.ATOMIC_ADD: _rewrite_atomic_add,
    Op.DIM: _rewrite_dim,
}
"""How each use of a promoted alloc is rewritten, given the current value of every variable."""


def _identity(value: Value) -> object:
    """Equal for one value, and for constants of one type printing alike (two `1.0` are one value)."""
    return (value.type, repr(value.value)) if isinstance(value, Constant) else id(value)


def _trivial_value(phi: Phi) -> Value | None:
    """The one value a phi merges besides itself, if there is exactly one."""
    others = {_identity(value): value for value in phi.operands if value is not phi}
    return next(iter(others.values())) if len(others) == 1 else None


def _delete(phi: Phi) -> None:
    phi.drop_operands()
    phi.remove_from_block()


def remove_useless_phis(phis: list[Phi]) -> None:
    """Delete the trivial phis among `phis`, then those that nothing outside them uses."""
    changed = True
    while changed:
        changed = False
        for phi in phis:
            value = _trivial_value(phi) if phi.block is not None else None
            if value is not None:
                phi.replace_all_uses_with(value)
                _delete(phi)
                changed = True
    placed = {phi for phi in phis if phi.block is not None}
    live = [phi for phi in placed if any(user not in placed for user in phi.users)]
    marked = set(live)
    while live:
        for operand in live.pop().operands:
            if operand in placed and operand not in marked:
                marked.add(operand)  # type: ignore[arg-type]
                live.append(operand)  # type: ignore[arg-type]
    for phi in placed - marked:
        phi.drop_operands()
    for phi in placed - marked:
        phi.remove_from_block()


def mem2reg(function: Function) -> bool:
    """Promote every promotable alloc of `function`; True if any was promoted."""
    elements = {}
    for inst in function.instructions():
        if inst.op is Op.ALLOC and isinstance(inst.type, ArrayType):
            found = promotable_elements(inst)
            if found is not None:
                elements[inst] = sorted(found)
    if not elements:
        return False
    promotion = _Promotion(function, DominatorTree(function), elements)
    promotion.place_phis()
    promotion.rename()
    remove_useless_phis(list(promotion.phis))
    for alloc in elements:
        alloc.erase()
    return True
