"""SSA construction straight from the AST, after Braun et al., "Simple and Efficient Construction of Static
Single Assignment Form" (CC 2013).

The translator calls `write_variable` for every assignment and `read_variable` for every use; a block is
*sealed* once all its predecessors are known. Reading in an unsealed block (a loop header whose back edge
is not lowered yet) leaves an *incomplete phi* that gets its operands when the block is sealed (Algorithm
2 and 4 of the paper). Phis that turn out to merge a single value are removed on the spot (Algorithm 3,
`try_remove_trivial_phi`); values already handed out for them are found again through a forwarding map, so
no use of a removed phi survives. `check_complete` asserts the end state: every block sealed, no incomplete
phi left, every phi with one incoming per predecessor. The paper's algorithms recurse along chains of
predecessors (Algorithm 2) and of phi users (Algorithm 3), which grow with the program: here both run on
explicit stacks (`_run`, `try_remove_trivial_phi`), in the same order.

Typing. A phi needs a type when it is created, before its operands are read (that is how the algorithm
breaks cycles). It gets the type the variable has along the chain of first predecessors, which always leads
back toward the entry (a first edge into a block is never a back edge), or a *hint* from an earlier attempt.
When the operands need a wider type (`s = 0` before a loop, `s += x[i]` in it), the phi is retyped if
nothing uses it yet; otherwise `WidenVariable` asks the caller to lower the kernel again with the hint, as
type inference by iteration. Operands are converted at the end of their predecessor block.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable, Generator
from dataclasses import dataclass

from isozyme.ssa.ir import Block, Function, Phi, SourceLoc, Value
from isozyme.ssa.types import ArrayType, Type


@dataclass
class WidenVariable(Exception):
    """Lower again: variable `name` needs type `type` at the phi of block number `block_id`."""

    block_id: int
    name: str
    type: Type


class UndefinedVariable(Exception):
    """A variable read where some path to the read never assigns it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class TypeConflict(Exception):
    """A variable with incompatible types (an array and a scalar, two array types) on different paths."""

    def __init__(self, name: str, types: list[Type]) -> None:
        super().__init__(name)
        self.name, self.types = name, types


Unify = Callable[[Type, Type], Type | None]
"""The join of two types for a merge, None when they conflict."""
Convert = Callable[[Value, Type, Block], Value]
"""Converts a value to a type with instructions at the end of the given (terminated) block."""
Reads = Generator[tuple[str, Block], Value, Value]
"""A step of Algorithm 2 that yields (variable, block) for each value it needs from another block, is sent
that value back, and returns its result (`SSAConstruction._run` drives it)."""


class SSAConstruction:
    """Braun et al.'s variable tracking for one function under construction."""

    def __init__(self, function: Function, unify: Unify, convert: Convert,
                 hints: dict[tuple[int, str], Type], display: dict[str, str]) -> None:
        self.function = function
        self.unify, self.convert, self.hints, self.display = unify, convert, hints, display
        self.current_def: dict[str, dict[Block, Value]] = defaultdict(dict)
        self.incomplete_phis: dict[Block, dict[str, Phi]] = defaultdict(dict)
        self.sealed: set[Block] = set()
        self.preds: dict[Block, list[Block]] = {}
        self.block_ids: dict[Block, int] = {}
        self.forward: dict[Value, Value] = {}
        """Removed trivial phis -> the value that replaced them."""
        self.phi_var: dict[Phi, str] = {}
        self.array_phis: dict[Phi, None] = {}
        """Array-typed phis found non-trivial, in order (a dict as an ordered set)."""
        self.site: ast.AST | None = None
        """The AST node being read (set by the translator): new phis remember it for diagnostics."""
        self.loc: SourceLoc | None = None
        """Its source location, stamped on new phis."""
        self.phi_sites: dict[Phi, ast.AST | None] = {}

    # --- blocks and edges -----------------------------------------------------------------------------

    def new_block(self, name: str) -> Block:
        block = self.function.add_block(name)
        self.preds[block] = []
        self.block_ids[block] = len(self.block_ids)
        return block

    def add_edge(self, source: Block, target: Block) -> None:
        """Record the edge source -> target (the caller emitted the branch)."""
        self.preds[target].append(source)

    # --- Algorithm 1: local value numbering -----------------------------------------------------------

    def write_variable(self, name: str, block: Block, value: Value) -> None:
        self.current_def[name][block] = value

    def read_variable(self, name: str, block: Block) -> Value:
        value = self.current_def[name].get(block)
        if value is not None:
            return self.resolve(value)
        return self._run(self._read_variable_recursive(name, block))

    def resolve(self, value: Value) -> Value:
        """Follow the forwarding of removed trivial phis."""
        while value in self.forward:
            value = self.forward[value]
        return value

    def is_defined(self, name: str) -> bool:
        return bool(self.current_def.get(name))

    # --- Algorithm 2: global value numbering ----------------------------------------------------------

    def _run(self, steps: Reads) -> Value:
        """Run a step of Algorithm 2 and the reads it asks for on an explicit stack: the paper's recursion
        follows chains of predecessors, which are as long as the program (a read after 2,000 `if`s walks
        back through all of them)."""
        stack = [steps]
        sent: Value | None = None
        while True:
            try:
                name, block = stack[-1].send(sent)  # type: ignore[arg-type]
            except StopIteration as finished:
                stack.pop()
                if not stack:
                    return finished.value
                sent = finished.value
                continue
            known = self.current_def[name].get(block)
            if known is not None:
                sent = self.resolve(known)
            else:
                stack.append(self._read_variable_recursive(name, block))
                sent = None

    def _read_variable_recursive(self, name: str, block: Block) -> Reads:
        preds = self.preds[block]
        if block not in self.sealed:
            value: Value = self._new_phi(name, block)
            self.incomplete_phis[block][name] = value  # type: ignore[assignment]
        elif len(preds) == 1:
            value = yield name, preds[0]
        elif not preds:
            raise UndefinedVariable(name)
        else:
            phi = self._new_phi(name, block)
            self.write_variable(name, block, phi)  # breaks cycles through loops
            value = yield from self._add_phi_operands(name, phi)
        # Removing a trivial phi may make another trivial in turn (its users are revisited), so the value
        # just computed may already be forwarded: resolve it before anyone holds on to it.
        value = self.resolve(value)
        self.write_variable(name, block, value)
        return value

    def _new_phi(self, name: str, block: Block) -> Phi:
        ty = self.hints.get((self.block_ids[block], name)) or self._first_path_type(name, block)
        phi = Phi(ty, name=self.display.get(name, name), loc=self.loc)
        block.insert(block.first_non_phi_index(), phi)
        self.phi_var[phi] = name
        self.phi_sites[phi] = self.site
        return phi

    def _first_path_type(self, name: str, block: Block) -> Type:
        """The variable's type at the end of the first-predecessor chain (module docstring)."""
        seen = set()
        while block not in seen:
            seen.add(block)
            value = self.current_def[name].get(block)
            if value is not None:
                return self.resolve(value).type
            if not self.preds[block]:
                break
            block = self.preds[block][0]
        raise UndefinedVariable(name)

    def _add_phi_operands(self, name: str, phi: Phi) -> Reads:
        block = phi.block
        assert block is not None
        read = []
        for pred in self.preds[block]:
            read.append((pred, (yield name, pred)))
        incoming = [(pred, self.resolve(value)) for pred, value in read]
        self._retype(name, phi, [value for _, value in incoming if value is not phi])
        for pred, value in incoming:
            if value is not phi and value.type != phi.type:
                value = self.convert(value, phi.type, pred)
            phi.add_incoming(pred, value)
        return self.try_remove_trivial_phi(phi)

    def _retype(self, name: str, phi: Phi, values: list[Value]) -> None:
        joined: Type | None = phi.type
        for value in values:
            joined = self.unify(joined, value.type) if joined is not None else None
            if joined is None:
                raise TypeConflict(name, [phi.type, *(v.type for v in values)])
        if joined == phi.type:
            return
        if any(use.user is not phi for use in phi.uses):
            raise WidenVariable(self.block_ids[phi.block], name, joined)  # type: ignore[index]
        phi.type = joined

    # --- Algorithm 3: trivial phi removal -------------------------------------------------------------

    def try_remove_trivial_phi(self, phi: Phi) -> Value:
        """The value that replaces `phi` when it merges only one value besides itself, else `phi`.
        Removing a phi may make the phis using it trivial in turn: the paper revisits them recursively,
        here they are visited depth-first from a stack (a chain of phis is as long as the program)."""
        same = self._trivial_value(phi)
        if same is None:
            return phi
        work = self._remove_trivial_phi(phi, same)
        while work:
            user = work.pop()
            if user.block is None or user in self.forward:
                continue
            user_same = self._trivial_value(user)
            if user_same is not None:
                work += self._remove_trivial_phi(user, user_same)
        return same

    def _trivial_value(self, phi: Phi) -> Value | None:
        """The one value `phi` merges besides itself; None when it merges several."""
        same: Value | None = None
        for _, operand in phi.incoming:
            operand = self.resolve(operand)
            if operand is same or operand is phi:
                continue
            if same is not None:
                if isinstance(phi.type, ArrayType):
                    self.array_phis[phi] = None
                return None
            same = operand
        if same is None:
            raise UndefinedVariable(self.phi_var[phi])  # only reachable through itself
        return same

    def _remove_trivial_phi(self, phi: Phi, same: Value) -> list[Phi]:
        """Replace `phi` by `same`; the phis that used it, to revisit, the first one last."""
        users = [use.user for use in phi.uses if use.user is not phi]
        phi.replace_all_uses_with(same)
        self.forward[phi] = same
        phi.drop_operands()
        phi.remove_from_block()
        return [user for user in reversed(users) if isinstance(user, Phi)]

    # --- Algorithm 4: sealing -------------------------------------------------------------------------

    def seal_block(self, block: Block) -> None:
        for name, phi in list(self.incomplete_phis.pop(block, {}).items()):
            self._run(self._add_phi_operands(name, phi))
        self.sealed.add(block)

    def check_complete(self) -> list[str]:
        """Problems left in the construction (none when it is complete)."""
        problems = [f"block {b.name} was never sealed" for b in self.function.blocks if b not in self.sealed]
        problems += [f"incomplete phi for '{n}' in {b.name}" for b, phis in self.incomplete_phis.items() for n in phis]
        for block in self.function.blocks:
            for phi in block.phis:
                if [b for b, _ in phi.incoming] != self.preds[block]:
                    problems.append(f"phi %{phi.name} in {block.name} does not match the predecessors")
        return problems

    def surviving_array_phis(self) -> list[Phi]:
        """Array-typed phis that merge different arrays (the translator rejects them)."""
        return [phi for phi in self.array_phis if phi.block is not None and phi not in self.forward]
