"""Custom derivatives: a kernel's reverse rule written by the user (`kernel.defvjp(rule)`, DESIGN 1.3).

A kernel with a custom reverse rule is lowered with the flags `noinline` and `vjp.<rule>` (the frontend
lowers the rule into the same module), so neither the optimizer nor AD inlines its calls. Reverse mode
differentiates such a call with the rule instead of the callee's body (a safe norm at 0, opaque code):

- **The rule's signature** is that of `diffe_<f>` with every float parameter differentiated
  (`reverse.gradient_parameters` with Duplicated float arrays and Active float scalars): each parameter,
  then `d_<x>` after a float array (its shadow) or a float scalar (a one-element array receiving its
  adjoint), then `differet` when f returns a float. Its return value is ignored.
- **What it must do**, as `diffe_<f>` would: add the adjoint of each float array argument into its shadow
  (`+=`), store each float scalar's adjoint in its one-element array, and for an array f writes, take the
  cotangent found in its shadow (the seed) and zero it. It must not write f's array arguments.
- **When it runs**: in the reverse pass, at the reverse of the call, with the scalar arguments as they
  were at the call (taped when needed) and the arrays themselves. Those arrays must still hold what they
  held at the call: a user rule that reads an array which the calling kernel (or f itself) writes is a
  `DifferentiationError` naming the call; so is a rule that writes one of f's array arguments (split
  mode, below, tapes such arrays instead). A Const
  float array gets a zeroed scratch shadow for the rule to write into, zeroed again after the call; a
  scalar argument that is not active gets a scratch adjoint that is dropped.
- `autodiff` of a kernel that has a rule itself runs the kernel, then the rule.

A forward rule (`kernel.defjvp(rule)`, flag `jvp.<rule>`) has the signature of `fwddiffe_<f>` with every
float parameter Duplicated (`forward.forward_parameters`): each parameter, then its tangent `d_<x>` after a
float array (the tangent array) or a float scalar (a scalar), then `d_return`, a one-element array for the
return value's tangent, when f returns a float. It does what `fwddiffe_<f>` does: runs f (returns its value,
writes its arrays) and writes the tangents (of the return value, and of written arrays into their tangent
arrays). Forward mode replaces each call of f by a call of the rule; a Const float array gets a zeroed
scratch tangent array (allocated at the call), a Const float scalar the tangent 0.

Hessian-vector products (forward over reverse) differentiate the bodies of the reverse rules that
`diffe_<f>` calls, not the forward rules.

**Split mode** (Enzyme's `augmented_<g>`/`reverse_<g>`) differentiates the calls of a kernel g declared
`@iz.kernel(inline=False)`: its generated rule `diffe_<g>` (flags `split`, `noinline`; every float parameter
differentiated) recomputes g's forward pass from its arguments, then reverses it. The cache planner decides,
per call, what the recomputation needs taped (`split_snapshots`):

- nothing, when g writes none of its arrays and the calling kernel does not write those g reads (a readonly
  callee whose result matters by value): the reverse pass calls `diffe_<g>` on the arguments (scalars
  looked up, taped if needed);
- otherwise the arrays g writes, those it reads that the caller writes, and those the reverse pass cannot
  use (local arrays allocated in a loop or a branch; their extents are taped): the forward call becomes a call
  of `augmented_<g>.<positions>`, which copies those arrays (flattened) into growable tapes of the calling
  kernel, one slice per run of the call's block, then runs g; the reverse calls `reverse_<g>.<positions>`,
  which restores each taped array into a local copy (as it was at the call) and runs `diffe_<g>` on the
  copies (the recomputation writes the copies, never the kernel's arrays; the shadows are the kernel's).
  The tape is indexed like a stack tape (`cache.py`): it works in loops of unknown trip count too.

An array that g reads in one slab only (every load of it, and every atomic add, indexes axis 0 by one
integer parameter of g plus a constant, in g and in the kernels g passes it to: the residual stream
`xs[layer]` of a transformer layer that writes `xs[layer + 1]`) has only that slab taped and restored
(`read_slab`), and one that g writes but never reads has nothing taped; the rest of the copy is never read
by the recomputation, which may write it.

The tape of a split call is what g may overwrite, not every value g's reverse needs (those g recomputes):
Enzyme's recompute-versus-cache trade, taken at the call boundary. `reverse_<g>` and `diffe_<g>` stay calls
(`noinline`), so their local arrays are freed when they return, not when the kernel does.
"""

from __future__ import annotations

from collections.abc import Callable

from isozyme.enzyme_ad.activity import ArgActivity
from isozyme.enzyme_ad.errors import DifferentiationError, unsupported
from isozyme.optimize.function_attributes import module_memory_effects
from isozyme.optimize.inline import inline_call
from isozyme.optimize.memory_effects import array_root
from isozyme.ssa.builder import Builder
from isozyme.ssa.flags import CUSTOM_JVP_FLAG, CUSTOM_VJP_FLAG, NOINLINE
from isozyme.ssa.ir import Argument, Constant, Function, Instruction, Module, Value
from isozyme.ssa.ops import Op
from isozyme.ssa.types import I64, VOID, ArrayType, Type

SPLIT_RULE = "split"
"""The flag of a rule generated for a kernel that is not inlined (`gradient.split_mode_rules`)."""


def custom_rule(function: Function, prefix: str = CUSTOM_VJP_FLAG) -> Function | None:
    """The reverse rule (the forward rule with `prefix=CUSTOM_JVP_FLAG`) registered for `function`, if any
    (a function of the same module)."""
    names = [flag[len(prefix):] for flag in function.flags if flag.startswith(prefix)]
    if not names:
        return None
    module = function.module
    rule = module.functions.get(names[0]) if module is not None else None
    if rule is None:
        raise DifferentiationError(f"the rule @{names[0]} of @{function.name} is not in the module")
    return rule


def custom_forward_rule(function: Function) -> Function | None:
    """The forward rule registered for `function` (`kernel.defjvp`), if any."""
    return custom_rule(function, CUSTOM_JVP_FLAG)


def reads_and_writes(function: Function) -> tuple[set[Argument], set[Argument]]:
    """The array parameters of `function` that it may read and that it may write, through any array value
    and any call (func-attrs' summary of the function)."""
    assert function.module is not None
    effects = module_memory_effects(function.module)[function]
    return {function.args[i] for i in effects.reads}, {function.args[i] for i in effects.writes}


def check_custom_call(call: Instruction, rule: Function, caller_writes: set[Value] | None) -> None:
    """The conditions of the module docstring under which the rule may run in the reverse pass."""
    callee: Function = call.callee  # type: ignore[assignment]
    if SPLIT_RULE in rule.flags:
        return  # split mode tapes what it needs (`split_snapshots`)
    rule_params = _primal_params(callee, rule)
    rule_reads, rule_writes = reads_and_writes(rule)
    _, callee_writes = reads_and_writes(callee)
    for index, (param, value) in enumerate(zip(callee.args, call.operands)):
        if not param.type.is_array:
            continue
        rule_param = rule_params[index]
        name = param.name or f"argument {index}"
        if rule_param in rule_writes:
            raise unsupported(call, f"the reverse rule @{rule.name} writes {name}, an array argument of "
                              f"@{callee.name}: a rule may write shadows only")
        if rule_param not in rule_reads:
            continue
        if param in callee_writes:
            raise unsupported(call, f"the reverse rule @{rule.name} reads {name}, which @{callee.name} "
                              "writes: the rule would see it as it is after the whole kernel ran")
        root = array_root(value)
        if caller_writes is None or root is None or root in caller_writes:
            raise unsupported(call, f"the reverse rule @{rule.name} reads {name}, which this kernel writes: "
                              "the rule would not see it as it was at the call")


def split_snapshots(call: Instruction, caller_writes: set[Value] | None,
                    available: Callable[[Value], bool]) -> list[int]:
    """The positions of the array arguments a split-mode call must tape (module docstring): those the
    callee writes, those it reads that the calling kernel writes (or may: an unknown root), and those the
    reverse pass cannot use itself (`available`: a local array allocated in a loop or a branch)."""
    callee: Function = call.callee  # type: ignore[assignment]
    reads, writes = reads_and_writes(callee)
    positions = []
    for index, (param, value) in enumerate(zip(callee.args, call.operands)):
        if not param.type.is_array:
            continue
        root = array_root(value)
        written = caller_writes is None or root is None or root in caller_writes
        if param in writes or (param in reads and written) or not available(value):
            positions.append(index)
    return positions


Slab = tuple[int, int]
"""(position of an i64 parameter p of g, constant c): g reads its array only at `[p + c, ...]`."""


NOT_READ: Slab = (-1, 0)
"""The slab of an array the function writes but never reads: none (nothing is taped; the copy that the
recomputation writes starts undefined)."""


def read_slab(param: Argument) -> Slab | None:
    """The slab of `param` (an array parameter of its function) that the function reads (module
    docstring), `NOT_READ` when it reads none, or None: when a read (a load or an atomic add of it) indexes
    axis 0 otherwise, or it is used but through stores, dims and calls that pass it on (whose callees'
    reads count, mapped back through the call's arguments), or reads are in several slabs."""
    slabs = _read_slabs(param, 0)
    if slabs is None or len(slabs) > 1:
        return None
    return next(iter(slabs)) if slabs else NOT_READ


def _read_slabs(param: Argument, depth: int) -> set[Slab] | None:
    """The slabs (in terms of the parameters of `param`'s function) read of `param`; None: not known."""
    slabs: set[Slab] = set()
    for user in param.users:
        if user.op is Op.DIM:
            continue
        if user.op is Op.CALL:
            found = _slabs_through_call(user, param, depth)
            if found is None:
                return None
            slabs |= found
            continue
        if user.op not in (Op.LOAD, Op.STORE, Op.ATOMIC_ADD):
            return None
        array_at = 0 if user.op is Op.LOAD else 1
        if user.operands[array_at] is not param or user.operands.count(param) != 1:
            return None
        if user.op is Op.STORE:
            continue  # a write: the recomputation writes the copy wherever g does
        slab = _parameter_plus_constant(user.operands[array_at + 1])
        if slab is None:
            return None
        slabs.add(slab)
    return slabs


def _slabs_through_call(call: Instruction, param: Argument, depth: int) -> set[Slab] | None:
    """The slabs of `param` that `call` reads, from its callee's reads of the parameter it is passed as."""
    callee = call.callee
    if not isinstance(callee, Function) or depth >= 8 or call.operands.count(param) != 1:
        return None
    if custom_rule(callee) is not None:  # its reverse rule, which diffe_<g> calls, may read any slab
        return None
    inner = _read_slabs(callee.args[call.operands.index(param)], depth + 1)
    if inner is None:
        return None
    slabs: set[Slab] = set()
    for position, constant in inner:
        outer = _parameter_plus_constant(call.operands[position])
        if outer is None:
            return None
        slabs.add((outer[0], outer[1] + constant))
    return slabs


def _parameter_plus_constant(index: Value) -> Slab | None:
    if isinstance(index, Argument) and index.type == I64:
        return index.index, 0
    if not isinstance(index, Instruction) or index.op not in (Op.IADD, Op.ISUB):
        return None
    left, right = index.operands
    if index.op is Op.IADD and isinstance(left, Constant):
        left, right = right, left
    if isinstance(left, Argument) and left.type == I64 and isinstance(right, Constant):
        return left.index, right.value if index.op is Op.IADD else -right.value  # type: ignore[return-value]
    return None


def snapshot_slabs(callee: Function, positions: list[int]) -> dict[int, Slab]:
    """For each position at which split mode tapes an array, its read slab when it has one (`read_slab`)."""
    slabs = {position: read_slab(callee.args[position]) for position in positions}
    return {position: slab for position, slab in slabs.items() if slab is not None}


def augmented_function(module: Module, callee: Function, positions: list[int],
                       slabs: dict[int, Slab] | None = None) -> Function:
    """`augmented_<g>`: tapes the arrays at `positions` (flattened, row-major, each into its own tape at
    `run * size`; only the slab g reads of those in `slabs`, at `run * slab size`), then runs g and returns
    its value. Its parameters: g's, one tape per position, `run`."""
    slabs = slabs or {}
    name = _split_name("augmented", callee, positions, slabs)
    if name in module:
        return module[name]
    args, tapes, offset = _split_signature(callee.args, callee, positions)
    function = module.add(Function(name, args, callee.return_type, loc=callee.loc))
    builder = Builder(function.add_block("entry"), callee.loc)
    for position, tape in zip(positions, tapes):
        slab = _slab_index(builder, args, slabs.get(position))  # type: ignore[arg-type]
        _copy(builder, args[position], tape, offset, into_tape=True, slab=slab)
    result = builder.call(callee, *args[:len(callee.args)])
    builder.ret(None if callee.return_type.is_void else result)
    return function


def reverse_function(module: Module, callee: Function, rule: Function, positions: list[int],
                     slabs: dict[int, Slab] | None = None) -> Function:
    """`reverse_<g>`: the parameters of its rule `diffe_<g>`, except that each array at `positions` is given
    by its extents (`<x>.shape<k>`), then one tape per position and `run`; restores each taped array (the
    slab g reads, for those in `slabs`), as it was when g was called, into a local copy of those extents
    and runs the rule on the copies (the recomputation of g writes the copies, never the kernel's arrays)."""
    slabs = slabs or {}
    name = _split_name("reverse", callee, positions, slabs)
    if name in module:
        return module[name]
    rule_positions = [_primal_params(callee, rule)[p].index for p in positions]
    params: list[Argument] = []
    shapes: dict[int, list[Argument]] = {}
    for index, arg in enumerate(rule.args):
        if index in rule_positions:
            shapes[index] = [Argument(I64, name=f"{arg.name}.shape{axis}") for axis in range(arg.type.rank)]  # type: ignore[attr-defined]
            params += shapes[index]
        else:
            params.append(Argument(arg.type, name=arg.name))
    _, tapes, run = _split_signature([], callee, positions)
    function = module.add(Function(name, [*params, *tapes, run], VOID, flags={NOINLINE}, loc=callee.loc))
    builder = Builder(function.add_block("entry"), callee.loc)  # kept a call: the copies are freed at its return
    operands: list[Value] = []
    given = iter(params)
    for index, arg in enumerate(rule.args):
        if index not in shapes:
            operands.append(next(given))
            continue
        extents = [next(given) for _ in shapes[index]]
        operands.append(builder.alloc(arg.type.element, *extents, name=f"{arg.name}.at_call"))  # type: ignore[attr-defined]
    in_callee_order = [operands[param.index] for param in _primal_params(callee, rule)]
    for position, index, tape in zip(positions, rule_positions, tapes):
        slab = _slab_index(builder, in_callee_order, slabs.get(position))  # type: ignore[arg-type]
        _copy(builder, operands[index], tape, run, into_tape=False, slab=slab)
    builder.call(rule, *operands)
    builder.ret()
    return function


def _split_name(kind: str, callee: Function, positions: list[int], slabs: dict[int, Slab]) -> str:
    return f"{kind}_{callee.name}" + "".join(f".{p}" + ("s" if p in slabs else "") for p in positions)


def _split_signature(params: list[Argument], callee: Function, positions: list[int]
                     ) -> tuple[list[Argument], list[Argument], Argument]:
    args = [Argument(arg.type, name=arg.name) for arg in params]
    tapes = [Argument(ArrayType(callee.args[p].type.element, 1), name=f"tape.{callee.args[p].name or p}")  # type: ignore[attr-defined]
             for p in positions]
    run = Argument(I64, name="run")
    return [*args, *tapes, run], tapes, run


def _slab_index(builder: Builder, params: list[Value], slab: Slab | None) -> Value | None:
    """The index along axis 0 of the slab g reads, from g's parameters (or the rule's, in g's order)."""
    if slab is None:
        return None
    position, constant = slab
    if slab == NOT_READ:
        return Constant(I64, -1)  # out of bounds: `_copy` copies nothing
    return builder.iadd(params[position], Constant(I64, constant)) if constant else params[position]


def _copy(builder: Builder, array: Value, tape: Value, run: Value, into_tape: bool,
          slab: Value | None = None) -> None:
    """array[i0, i1, ...] <-> tape[run * size + row-major position], over the whole array; with `slab`,
    over array[slab, ...] only (at run * slab size; nothing when the slab is out of bounds, where g's own
    access will fail)."""
    extents = [builder.dim(array, axis) for axis in range(array.type.rank)]  # type: ignore[attr-defined]
    if slab is None:
        offset = builder.imul(run, array_size(builder, array))
    else:
        offset = builder.imul(run, slab_size(builder, array))
        inside = builder.and_(builder.icmp_sge(slab, Constant(I64, 0)), builder.icmp_slt(slab, extents[0]))
        extents = [builder.select(inside, Constant(I64, 1), Constant(I64, 0)), *extents[1:]]

    def body(b: Builder, indices: list[Value]) -> None:
        if slab is not None:
            indices = [slab, *indices[1:]]
        position = indices[0] if slab is None else Constant(I64, 0)
        for index, extent in zip(indices[1:], extents[1:]):
            position = b.iadd(b.imul(position, extent), index)
        at = b.iadd(offset, position)
        if into_tape:
            b.store(b.load(array, *indices), tape, at)
        else:
            b.store(b.load(tape, at), array, *indices)
    builder.loop_nest(extents, body, name="tape" if into_tape else "restore")


def array_size(builder: Builder, array: Value) -> Value:
    """The number of elements of `array`."""
    size: Value = builder.dim(array, 0)
    for axis in range(1, array.type.rank):  # type: ignore[attr-defined]
        size = builder.imul(size, builder.dim(array, axis))
    return size


def slab_size(builder: Builder, array: Value, slab: Slab | None = None) -> Value:
    """The number of elements of `array[i, ...]` (0 for `NOT_READ`: a tape of nothing)."""
    if slab == NOT_READ:
        return Constant(I64, 0)
    size: Value = Constant(I64, 1)
    for axis in range(1, array.type.rank):  # type: ignore[attr-defined]
        size = builder.imul(size, builder.dim(array, axis))
    return size


def _primal_params(callee: Function, rule: Function) -> list[Argument]:
    """The rule's parameters that take the callee's arguments, in the callee's order."""
    params, position = [], 0
    for param in callee.args:
        params.append(rule.args[position])
        position += 2 if param.type.is_float or (param.type.is_array and param.type.element.is_float) else 1  # type: ignore[attr-defined]
    return params


def differentiated_activities(types: list[Type]) -> tuple[ArgActivity, ...]:
    """The activities of a rule's signature: Duplicated float arrays, Active float scalars, the rest Const."""
    def activity(ty: Type) -> ArgActivity:
        if ty.is_array:
            return ArgActivity.DUP if ty.element.is_float else ArgActivity.CONST  # type: ignore[attr-defined]
        return ArgActivity.ACTIVE if ty.is_float else ArgActivity.CONST
    return tuple(activity(ty) for ty in types)


def clone_function(module: Module, function: Function, name: str) -> Function:
    """A copy of `function` named `name` in `module` (its body inlined into a new function: the copy keeps
    the names and source lines)."""
    args = [Argument(arg.type, name=arg.name) for arg in function.args]
    clone = module.add(Function(name, args, function.return_type, loc=function.loc))
    builder = Builder(clone.add_block("entry"), function.loc)
    result = builder.call(function, *args)
    builder.ret(None if function.return_type.is_void else result)
    inline_call(result)
    return clone


def wrap_for_custom_rule(module: Module, function: Function) -> Function:
    """A kernel with a rule of its own, differentiated directly: a function of the same name and signature
    that calls it (renamed `<f>.primal`), so that the call is differentiated with the rule."""
    name = function.name
    del module.functions[name]
    function.name = f"{name}.primal"
    module.add(function)
    args = [Argument(arg.type, name=arg.name) for arg in function.args]
    wrapper = Function(name, args, function.return_type, loc=function.loc)
    module.add(wrapper)
    builder = Builder(wrapper.add_block("entry"), function.loc)
    result = builder.call(function, *args)
    builder.ret(None if function.return_type.is_void else result)
    return wrapper
