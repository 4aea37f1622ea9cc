"""The reference interpreter: runs a `Function` on Python scalars and numpy arrays.

It is the semantic oracle of isozyme (STYLE.md 7): the backends are tested against it, and it is tested
against the undecorated Python kernels. What the scalar ops compute is the table of `semantics.py`
(re-exported here as `SEMANTICS` and `evaluate`); this module adds memory, calls and control flow.

    result = run_function(module["mag"], x, 1000)            # x: a float64 numpy array
    run_function(fn, out, x, 1000, step_limit=10_000)        # raise StepLimitExceeded after 10k steps

Execution model:
  - Arguments are checked: an array must be a numpy array of the element type's dtype and the parameter's
    rank, a scalar must be a Python or numpy number of the parameter's kind (bool for i1, an integer in
    range for i32/i64, any real number for floats) and is converted with `canonical_scalar`. Mismatches
    raise TypeError (OverflowError for out-of-range integers) naming the parameter. Arrays are passed by
    reference: stores are visible to the caller, and a callee sees the caller's arrays.
  - Entering a block from a predecessor evaluates its phis as one parallel assignment: every incoming
    value is read before any phi is assigned, so `%a = phi [.., %b]` and `%b = phi [.., %a]` swap.
  - `load`, `store`, `atomic_add` check every index against `0 <= i < extent` (negative indices are out
    of bounds, there is no Python wrap-around) and raise IndexError naming the index tuple and the shape.
  - `alloc` makes a new array (`alloc f64[%n, %m]`): zeros with the `zeroed` flag, otherwise filled with
    a value that makes reads of uninitialised memory visible: nan for floats, the dtype's minimum for
    integers, True for i1. A negative extent raises ValueError; a size in bytes over 2**63 - 1, or one
    numpy cannot allocate, MemoryError naming the shape and the size. An alloc whose array nothing uses
    only checks its shape (negative, over 2**63 - 1 bytes) and allocates nothing, as compiled code does:
    the optimizer deletes an unused alloc only where it proves that check passes (`docs/bad_input.md`).
  - `view f64[%n, %m] %arena, %offset` is an array sharing the bytes of the i64 array %arena from word
    %offset on (a numpy view, no copy), cleared with the `zeroed` flag; it fails as its alloc would: a
    negative extent raises ValueError, bytes outside the arena MemoryError (the arena counts an array
    too large for memory as 0 bytes, `optimize/memory_reuse.py`).
  - `grow %t, %n` on a `growable` alloc %t: when n exceeds the extent, %t is rebound to a new array of
    extent max(n, 2 * extent) holding the old elements first and then what a fresh alloc holds; otherwise
    (n <= extent, n negative) nothing happens. Bounds checks see the current extent. A grow numpy cannot
    allocate raises MemoryError, as compiled code does.
  - `assert %c, "msg"` raises AssertionError("msg") when %c is false (`assert %c, "msg", OverflowError`
    the exception named); `call` interprets the callee.
  - Run-time errors (ZeroDivisionError, ValueError, OverflowError, IndexError, AssertionError) start
    with the instruction's source location (`file:line:col: `) when it has one.
  - `step_limit` bounds the number of executed instructions (phis and terminators included), summed over
    all calls; exceeding it raises StepLimitExceeded naming the function and the block.
  - IR that cannot run (a missing terminator or phi entry, a use before definition) raises
    InterpreterError: run the verifier first for a precise diagnosis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from isozyme.ssa.flags import is_growable_alloc
from isozyme.ssa.ir import Block, Constant, Function, Instruction, Phi, Value, canonical_scalar
from isozyme.ssa.ops import ASSERT_ERRORS, Op
from isozyme.ssa.semantics import SEMANTICS, Scalar, apply_rule, evaluate
from isozyme.ssa.types import LARGEST_SIZE, ArrayType, ScalarType, allocation_failure

__all__ = ["SEMANTICS", "Interpreter", "InterpreterError", "StepLimitExceeded", "check_arguments", "evaluate",
           "located", "run_function"]

RuntimeValue = Scalar | np.ndarray
Env = dict[Value, RuntimeValue]
"""The values of the arguments and executed instructions of one function activation."""

RUNTIME_ERRORS = (ZeroDivisionError, ValueError, OverflowError)
"""The errors a scalar op may raise; the interpreter prefixes their message with the location."""


class InterpreterError(Exception):
    """The IR cannot be run (malformed in a way the verifier rejects)."""


class StepLimitExceeded(RuntimeError):
    """More instructions were executed than `step_limit` allows."""


def located(inst: Instruction, message: str) -> str:
    """`message` prefixed with the instruction's source location, when it has one."""
    return f"{inst.loc}: {message}" if inst.loc is not None else message


# --- arguments --------------------------------------------------------------------------------------


def check_array(where: str, ty: ArrayType, value: object, name: str = "x") -> np.ndarray:
    """`value` if it is a numpy array of `ty`'s dtype and rank; TypeError naming `where` otherwise (`name`:
    the argument's, in the advice to convert an array of the right dtype in the other byte order)."""
    dtype = ty.element.numpy_dtype
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{where} must be a {ty.rank}-D {dtype.name} array, got {type(value).__name__}")
    if value.dtype != dtype:
        advice = f"; pass a native-order array, e.g. {name}.astype(np.{dtype.name})" \
            if value.dtype.newbyteorder("=") == dtype else ""
        raise TypeError(f"{where} must have dtype {dtype.name}, got {dtype_text(value.dtype)}{advice}")
    if value.ndim != ty.rank:
        raise TypeError(f"{where} must be a {ty.rank}-D array, got {value.ndim}-D")
    return value


def dtype_text(dtype: np.dtype) -> str:
    """The dtype's name, with its byte order where that is not the machine's (a big-endian `>f8` is named
    float64 too, but is not this machine's float64)."""
    if dtype.isnative:
        return dtype.name
    order = {">": "big-endian", "<": "little-endian"}[dtype.byteorder]
    return f"{dtype.name} in {order} byte order ({dtype.str})"


_SCALAR_KINDS: dict[str, tuple[type, ...]] = {
    "bool": (bool, np.bool_),
    "int": (int, np.integer, np.bool_),
    "float": (int, float, np.integer, np.floating, np.bool_),
}
"""The Python and numpy scalar types that a parameter of each `ScalarKind` accepts (an integer parameter
takes no float: no silent truncation)."""


def check_scalar(where: str, ty: ScalarType, value: object) -> Scalar:
    """`value` as a canonical scalar of `ty`; TypeError (wrong kind) or OverflowError (an integer outside an
    integer type's range, or too large for a float type: it has no inf to round to, and Python's `float()`
    refuses it too). A float rounds to the type as numpy rounds it (1e300 is inf as an f32)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if not isinstance(value, _SCALAR_KINDS[ty.kind.value]):
        raise TypeError(f"{where} must be a {ty} scalar, got {type(value).__name__} {value!r}")
    if isinstance(value, np.generic):
        value = value.item()
    if ty.is_int:
        low, high = -(1 << (ty.bits - 1)), (1 << (ty.bits - 1)) - 1
        if not low <= int(value) <= high:
            raise OverflowError(f"{where}: {_integer_text(int(value))} does not fit in {ty} (from {low} to {high})")
        return int(value)
    if ty.is_float and isinstance(value, int) and not isinstance(value, bool):
        try:
            converted = canonical_scalar(ty, value)
        except OverflowError:
            converted = math.inf
        if math.isinf(converted):  # type: ignore[arg-type]
            raise OverflowError(f"{where}: {_integer_text(value)} is too large for {ty} (largest finite value "
                                f"{float(np.finfo(ty.numpy_dtype).max):g})")
        return converted
    return canonical_scalar(ty, value)  # type: ignore[arg-type]


def _integer_text(value: int) -> str:
    """`value` in decimal, or its order of magnitude where that would be long (`str` refuses ints of more
    than 4300 digits)."""
    if abs(value) < 10**24:
        return str(value)
    return f"an integer of about {'-' if value < 0 else ''}10**{int(abs(value).bit_length() * math.log10(2))}"


def check_arguments(function: Function, args: Sequence[object]) -> list[RuntimeValue]:
    """The runtime values of `args` for `function`'s parameters (module docstring: what is checked)."""
    if len(args) != len(function.args):
        raise TypeError(f"@{function.name} takes {len(function.args)} argument(s), got {len(args)}")
    values: list[RuntimeValue] = []
    for param, value in zip(function.args, args, strict=True):
        name = f"parameter %{param.name or param.index} of @{function.name}"
        if isinstance(param.type, ArrayType):
            values.append(check_array(name, param.type, value, param.name or "x"))
        elif isinstance(param.type, ScalarType):
            values.append(check_scalar(name, param.type, value))
        else:
            raise InterpreterError(f"parameter {name} has type {param.type}")
    return values


# --- the interpreter --------------------------------------------------------------------------------


@dataclass
class _Layout:
    """A block split for execution: its phis, and the instructions after them."""

    phis: list[Phi]
    body: list[Instruction]


@dataclass
class _Return:
    """Control leaves the function with `value` (None for `ret` without operand)."""

    value: RuntimeValue | None


@dataclass
class Interpreter:
    """The state of one run: the step budget and a cache of block layouts."""

    step_limit: int | None = None
    """How many instructions may run in all, None for no limit."""
    steps: int = 0
    """How many instructions have run so far."""
    _layouts: dict[Block, _Layout] = field(default_factory=dict)
    handlers: dict[Op, Handler] = field(default_factory=lambda: dict(_HANDLERS))
    """How each non-terminator op executes (a checking interpreter wraps some: `runtime/race_detector.py`)."""

    def call(self, function: Function, args: Sequence[RuntimeValue]) -> RuntimeValue | None:
        """Run `function` on checked runtime values; its return value, None for void functions."""
        if not function.blocks:
            raise InterpreterError(f"@{function.name} has no blocks")
        env: Env = dict(zip(function.args, args, strict=True))
        block, pred = function.entry, None
        while True:
            outcome = self._step(block, pred, env)
            if isinstance(outcome, _Return):
                return outcome.value
            block, pred = outcome, block

    def _step(self, block: Block, pred: Block | None, env: Env) -> Block | _Return:
        """Run `block`, entered from `pred`: its phis, then its body; where control goes next."""
        self._enter(block, pred, env)
        return self._run_body(block, env)

    def _layout(self, block: Block) -> _Layout:
        layout = self._layouts.get(block)
        if layout is None:
            phis = block.phis
            layout = self._layouts[block] = _Layout(phis, block.instructions[len(phis):])
        return layout

    def _count(self, block: Block, count: int = 1) -> None:
        self.steps += count
        if self.step_limit is not None and self.steps > self.step_limit:
            function = block.function.name if block.function is not None else "?"
            raise StepLimitExceeded(f"step limit of {self.step_limit} exceeded in @{function}, "
                                    f"block {block.name or hex(id(block))}")

    def _enter(self, block: Block, pred: Block | None, env: Env) -> None:
        """Assign the phis of `block` for the edge from `pred`, all reads before all writes."""
        phis = self._layout(block).phis
        if not phis:
            return
        if pred is None:
            raise InterpreterError(f"the entry block {block.name} of @{_fname(block)} has phis")
        self._count(block, len(phis))
        incoming = [read(env, _incoming(phi, pred)) for phi in phis]
        env.update(zip(phis, incoming, strict=True))

    def _run_body(self, block: Block, env: Env) -> Block | _Return:
        """Execute the non-phi instructions of `block`; where control goes next."""
        for inst in self._layout(block).body:
            self._count(block)
            transfer = _TRANSFERS.get(inst.op)
            if transfer is not None:
                return transfer(inst, env)
            handler = self.handlers.get(inst.op)
            if handler is None:
                raise InterpreterError(f"cannot execute {inst.op} in the body of block {block.name}")
            result = handler(self, inst, env)
            if not inst.type.is_void:
                env[inst] = result
        raise InterpreterError(f"block {block.name} of @{_fname(block)} has no terminator")


def _fname(block: Block) -> str:
    return block.function.name if block.function is not None else "?"


def _incoming(phi: Phi, pred: Block) -> Value:
    try:
        return phi.incoming_value(pred)
    except KeyError:
        raise InterpreterError(f"phi %{phi.name} has no incoming value from block {pred.name}") from None


def read(env: Env, value: Value) -> RuntimeValue:
    """The runtime value of an operand: a constant's value, or what `env` holds."""
    if isinstance(value, Constant):
        return value.value
    try:
        return env[value]
    except KeyError:
        raise InterpreterError(f"value %{value.name} is used before it is defined") from None


def _operands(inst: Instruction, env: Env) -> list[RuntimeValue]:
    return [read(env, operand) for operand in inst.operands]


# --- instruction handlers ---------------------------------------------------------------------------

Handler = Callable[[Interpreter, Instruction, Env], RuntimeValue | None]


def _exec_scalar(interp: Interpreter, inst: Instruction, env: Env) -> Scalar:
    try:
        return apply_rule(SEMANTICS[inst.op], inst.type, _operands(inst, env))  # type: ignore[arg-type]
    except RUNTIME_ERRORS as error:
        raise type(error)(located(inst, f"{inst.op}: {error}")) from error


def _checked_index(inst: Instruction, array: np.ndarray, indices: Sequence[int]) -> tuple[int, ...]:
    """The index tuple, after checking it has one in-bounds index per dimension."""
    index = tuple(indices)
    if len(index) != array.ndim:
        raise InterpreterError(f"{inst.op} with {len(index)} index(es) into a {array.ndim}-D array")
    if not all(0 <= i < extent for i, extent in zip(index, array.shape, strict=True)):
        raise IndexError(located(inst, f"{inst.op}: index {index} is out of bounds for an array of shape "
                                       f"{array.shape}"))
    return index


def _exec_load(interp: Interpreter, inst: Instruction, env: Env) -> Scalar:
    array, *indices = _operands(inst, env)
    return array[_checked_index(inst, array, indices)].item()  # type: ignore[index, arg-type]


def _exec_store(interp: Interpreter, inst: Instruction, env: Env) -> None:
    value, array, *indices = _operands(inst, env)
    array[_checked_index(inst, array, indices)] = value  # type: ignore[index, arg-type]


_ADD_OF_KIND = {"int": Op.IADD, "float": Op.FADD}
"""The addition an `atomic_add` performs, by the element's kind."""


def _exec_atomic_add(interp: Interpreter, inst: Instruction, env: Env) -> None:
    value, array, *indices = _operands(inst, env)
    element: ScalarType = inst.operands[1].type.element  # type: ignore[attr-defined]
    if element.kind.value not in _ADD_OF_KIND:
        raise InterpreterError(f"atomic_add on an array of {element}")
    index = _checked_index(inst, array, indices)  # type: ignore[arg-type]
    rule = SEMANTICS[_ADD_OF_KIND[element.kind.value]]
    array[index] = apply_rule(rule, element, [array[index].item(), value])  # type: ignore[index]


def _exec_dim(interp: Interpreter, inst: Instruction, env: Env) -> int:
    (array,) = _operands(inst, env)
    axis = inst.attrs.get("axis")
    if not isinstance(axis, int) or not 0 <= axis < array.ndim:  # type: ignore[union-attr]
        raise InterpreterError(f"dim axis {axis!r} of a {array.ndim}-D array")  # type: ignore[union-attr]
    return int(array.shape[axis])  # type: ignore[union-attr]


def uninitialized_fill(element: ScalarType) -> Scalar:
    """What a non-`zeroed` alloc holds: a value that makes reads of uninitialised memory stand out."""
    if element.is_float:
        return float("nan")
    if element.is_int:
        return int(np.iinfo(element.numpy_dtype).min)
    return True


def fresh_memory(alloc: Instruction, shape: tuple[int, ...]) -> np.ndarray:
    """A new array of `alloc`'s element type and `shape`, as the alloc fills it: zeros when `zeroed`."""
    element = alloc.type.element  # type: ignore[attr-defined]
    if "zeroed" in alloc.flags:
        return np.zeros(shape, dtype=element.numpy_dtype)
    return np.full(shape, uninitialized_fill(element), dtype=element.numpy_dtype)


def _exec_alloc(interp: Interpreter, inst: Instruction, env: Env) -> np.ndarray | None:
    """A fresh array; an alloc whose array nothing uses only checks its shape (module docstring)."""
    shape: tuple[int, ...] = tuple(_operands(inst, env))  # type: ignore[assignment]
    _check_shape(inst, shape)
    if not inst.uses:
        return None
    try:
        return fresh_memory(inst, shape)
    except (MemoryError, ValueError):  # numpy: "array is too big", or no memory
        raise MemoryError(located(inst, f"alloc: {_too_large(inst, shape)}")) from None


def _check_shape(inst: Instruction, shape: tuple[int, ...]) -> None:
    """ValueError for a negative extent, MemoryError for a size in bytes that overflows 64 bits."""
    if any(extent < 0 for extent in shape):
        raise ValueError(located(inst, f"alloc: negative extent in shape {shape}"))
    if math.prod(shape) * inst.type.element.numpy_dtype.itemsize > LARGEST_SIZE:  # type: ignore[attr-defined]
        raise MemoryError(located(inst, f"alloc: {_too_large(inst, shape)}"))


def _too_large(inst: Instruction, shape: tuple[int, ...]) -> str:
    element = inst.type.element  # type: ignore[attr-defined]
    return allocation_failure(shape, str(element), element.numpy_dtype.itemsize)


def _exec_view(interp: Interpreter, inst: Instruction, env: Env) -> np.ndarray:
    """The arena's bytes from word `offset` on, reinterpreted as the view's array (no copy)."""
    *extents, arena, offset = _operands(inst, env)
    shape: tuple[int, ...] = tuple(extents)  # type: ignore[assignment]
    _check_shape(inst, shape)
    element = inst.type.element.numpy_dtype  # type: ignore[attr-defined]
    start = 8 * offset  # type: ignore[operator]
    end = start + element.itemsize * math.prod(shape)
    words = arena.view(np.uint8)  # type: ignore[union-attr]
    if start < 0 or end > words.size:  # the arena counts a buffer too large for memory as 0 bytes
        raise MemoryError(located(inst, f"alloc: {_too_large(inst, shape)}"))
    array = words[start:end].view(element).reshape(shape)
    if "zeroed" in inst.flags:
        array[...] = 0
    return array


def _exec_grow(interp: Interpreter, inst: Instruction, env: Env) -> None:
    """At least `count` elements: the extent becomes max(count, 2 * extent) when count exceeds it."""
    alloc, count = inst.operands
    if not is_growable_alloc(alloc):
        raise InterpreterError(f"grow of %{alloc.name}, which is not a growable alloc")
    array, wanted = read(env, alloc), read(env, count)
    extent = array.shape[0]  # type: ignore[union-attr]
    if wanted <= extent:  # type: ignore[operator]
        return
    new_extent = max(wanted, 2 * extent)  # type: ignore[call-overload]
    try:
        grown = fresh_memory(alloc, (new_extent,))  # type: ignore[arg-type]
    except (MemoryError, ValueError):  # numpy: "array is too big", or no memory
        raise MemoryError(located(inst, f"grow: {_too_large(alloc, (new_extent,))}")) from None  # type: ignore[arg-type]
    grown[:extent] = array
    env[alloc] = grown  # only the alloc's own value reaches a growable array (verifier.py)


def _exec_call(interp: Interpreter, inst: Instruction, env: Env) -> RuntimeValue | None:
    callee = inst.attrs.get("callee")
    if not isinstance(callee, Function):
        raise InterpreterError(f"call without a callee function: {callee!r}")
    return interp.call(callee, _operands(inst, env))


def _exec_assert(interp: Interpreter, inst: Instruction, env: Env) -> None:
    (condition,) = _operands(inst, env)
    if not condition:
        error = ASSERT_ERRORS[str(inst.attrs.get("error", "AssertionError"))]
        raise error(located(inst, str(inst.attrs.get("message") or "assertion failed")))


_HANDLERS: dict[Op, Handler] = {
    **{op: _exec_scalar for op in SEMANTICS},
    Op.LOAD: _exec_load,
    Op.STORE: _exec_store,
    Op.ATOMIC_ADD: _exec_atomic_add,
    Op.DIM: _exec_dim,
    Op.ALLOC: _exec_alloc,
    Op.VIEW: _exec_view,
    Op.GROW: _exec_grow,
    Op.CALL: _exec_call,
    Op.ASSERT: _exec_assert,
}
"""How each non-terminator op executes; the result is stored for non-void instructions."""


# --- control transfers ------------------------------------------------------------------------------


def _transfer_br(inst: Instruction, env: Env) -> Block:
    return inst.successors[0]


def _transfer_cbr(inst: Instruction, env: Env) -> Block:
    if_true, if_false = inst.successors
    return if_true if read(env, inst.operands[0]) else if_false


def _transfer_ret(inst: Instruction, env: Env) -> _Return:
    return _Return(read(env, inst.operands[0]) if inst.operands else None)


_TRANSFERS: dict[Op, Callable[[Instruction, Env], Block | _Return]] = {
    Op.BR: _transfer_br,
    Op.CBR: _transfer_cbr,
    Op.RET: _transfer_ret,
}
"""Where each terminator sends control: a successor block or out of the function."""

_unexecutable = set(Op) - set(_HANDLERS) - set(_TRANSFERS) - {Op.PHI}
assert not _unexecutable, f"ops the interpreter cannot execute: {sorted(map(str, _unexecutable))}"


# --- entry point ------------------------------------------------------------------------------------


def run_function(function: Function, *args: object, step_limit: int | None = None) -> Scalar | None:
    """Interpret `function` on `args` (numpy arrays and Python scalars); its return value.

    The result is the canonical Python scalar of the return type (module `semantics`), or None for a
    void function. Take a function of a module with `module["name"]`. `step_limit` bounds the number of
    executed instructions over the whole run, calls included (StepLimitExceeded).
    """
    values = check_arguments(function, args)
    with np.errstate(all="ignore"):
        result = Interpreter(step_limit).call(function, values)
    return result  # type: ignore[return-value]

