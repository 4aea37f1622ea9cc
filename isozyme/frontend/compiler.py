"""From kernel definitions to an SSA module: parameters and return type from the annotations, the kernel
body through `KernelLowering`, and every kernel it calls compiled into the same module (each once; a
recursive call is a CompileError until the AD supports recursion).

Every name and attribute the lowering reads outside the kernels (globals, closure variables, builtins,
module attributes) is read through `ModuleCompiler.read_global` and `read_attribute`, which list them in
`static_reads`: with the kernels' source texts, they are all the lowering depends on (`runtime/source_key.py`
keys compiled code by them).

Type inference by iteration: when a loop turns a variable wider than it entered (`s = 0` then `s +=
x[i]`), `SSAConstruction` raises `WidenVariable` and the kernel is lowered again with that hint; each
round widens one variable at one block, so this ends after a few rounds.
"""

from __future__ import annotations

import ast

from isozyme.frontend.annotations import ArrayAnnotation, ScalarAnnotation
from isozyme.frontend.definitions import MISSING, KernelDefinition, StaticRead
from isozyme.frontend.diagnostics import CompileError, KernelSource
from isozyme.frontend.lowering import KernelLowering
from isozyme.frontend.ssa_construction import WidenVariable
from isozyme.ssa.builder import make_function
from isozyme.ssa.flags import CUSTOM_JVP_FLAG, CUSTOM_VJP_FLAG, NOINLINE, mark_checked
from isozyme.ssa.ir import Function, Module
from isozyme.ssa.types import VOID, Type

MAX_TYPE_ROUNDS = 64


class ModuleCompiler:
    """Lowers a root kernel and its callees into one module."""

    def __init__(self) -> None:
        self.static_reads: list[StaticRead] = []
        """Every read outside the kernels, in the order the lowering made them (module docstring)."""
        self.module = Module()
        self.functions: dict[KernelDefinition, Function] = {}
        self.in_progress: list[KernelDefinition] = []
        self.names: dict[KernelDefinition, str] = {}
        """Function name of each kernel: its Python name, made unique (`helper_2`) across modules."""

    def read_global(self, definition: KernelDefinition, name: str) -> object:
        """What `name` means in `definition`'s scope (`KernelDefinition.lookup`), recorded."""
        value = definition.lookup(name)
        self.static_reads.append(StaticRead(definition, name, value))
        return value

    def read_attribute(self, definition: KernelDefinition, base_path: str, base: object, attribute: str) -> object:
        """`base.attribute` (MISSING when absent), where `base` is what `base_path` means in `definition`'s
        scope; recorded."""
        value = getattr(base, attribute, MISSING)
        self.static_reads.append(StaticRead(definition, f"{base_path}.{attribute}", value))
        return value

    def function_for(self, definition: KernelDefinition, caller: KernelSource | None = None,
                     call: ast.AST | None = None) -> Function:
        """The SSA function of `definition`, lowering it (and its callees) on first use."""
        if definition in self.functions:
            return self.functions[definition]
        if definition in self.in_progress:
            cycle = " -> ".join(d.name for d in self.in_progress[self.in_progress.index(definition):])
            message = (f"recursive call of kernel '{definition.name}' ({cycle} -> {definition.name}): recursion "
                       "is not supported in kernels")
            raise caller.error(call, message) if caller and call else CompileError(message)
        self.in_progress.append(definition)
        self.names[definition] = self._unique_name(definition.name)
        try:
            function = self._lower_with_type_rounds(definition)
        finally:
            self.in_progress.pop()
        self.module.add(function)
        self.functions[definition] = function
        if definition.options.get("inline") is False:
            function.flags.add(NOINLINE)
        if definition.options.get("boundscheck"):  # checked wherever its code goes (inlined too)
            mark_checked(function)
        for option, flag in (("custom_vjp", CUSTOM_VJP_FLAG), ("custom_jvp", CUSTOM_JVP_FLAG)):
            rule = definition.options.get(option)
            if rule is not None:  # a custom derivative: lowered into the module, named by a flag (enzyme_ad/custom.py)
                rule_function = self.function_for(rule.__isozyme_definition__)  # type: ignore[attr-defined]
                function.flags |= {NOINLINE, f"{flag}{rule_function.name}"}
        return function

    def _lower_with_type_rounds(self, definition: KernelDefinition) -> Function:
        hints: dict[tuple[int, str], Type] = {}
        for _ in range(MAX_TYPE_ROUNDS):
            function = self._signature(definition)
            lowering = KernelLowering(definition, function, self, hints)
            try:
                return lowering.lower()
            except WidenVariable as widen:
                hints[(widen.block_id, widen.name)] = widen.type
            except (CompileError, RecursionError):
                raise
            except Exception as error:  # a frontend bug: still a CompileError at the construct, no traceback
                raise lowering.error(lowering.current_node, f"internal compiler error ({type(error).__name__}: "
                                     f"{error}) while compiling this construct; please report it") from None
        raise CompileError(f"internal error: type inference of kernel '{definition.name}' did not settle")

    def _signature(self, definition: KernelDefinition) -> Function:
        source = definition.source
        tree = source.tree
        args = tree.args
        for unsupported, what in ((args.vararg, "*args"), (args.kwarg, "**kwargs")):
            if unsupported is not None:
                raise source.error(unsupported, f"{what} parameters are not supported in kernels")
        if args.kwonlyargs or args.posonlyargs or args.defaults:
            node = (args.kwonlyargs or args.posonlyargs or args.defaults)[0]
            raise source.error(node, "kernel parameters are plain positional parameters without defaults")
        params = [(arg.arg, self._parameter_type(definition, arg)) for arg in args.args]
        return make_function(self.names[definition], params, self._return_type(definition))

    def _parameter_type(self, definition: KernelDefinition, arg: ast.arg) -> Type:
        if arg.annotation is None:
            raise definition.source.error(arg, f"parameter '{arg.arg}' of kernel '{definition.name}' needs a type "
                                               "annotation (f32 f64 i32 i64 boolean or Array[dtype, ndim])")
        annotation = self._annotation(definition, arg.annotation)
        if not isinstance(annotation, ScalarAnnotation | ArrayAnnotation):
            raise definition.source.error(arg.annotation, f"unsupported annotation '{ast.unparse(arg.annotation)}' "
                                                          f"of parameter '{arg.arg}'")
        return annotation.ssa

    def _return_type(self, definition: KernelDefinition) -> Type:
        node = definition.source.tree.returns
        if node is None or isinstance(node, ast.Constant) and node.value is None:
            return VOID
        annotation = self._annotation(definition, node)
        if isinstance(annotation, ArrayAnnotation):
            raise definition.source.error(node, "kernels return scalars only; write results into an array parameter")
        if not isinstance(annotation, ScalarAnnotation):
            raise definition.source.error(node, f"unsupported return annotation '{ast.unparse(node)}'")
        return annotation.ssa

    def _annotation(self, definition: KernelDefinition, node: ast.expr) -> object:
        """Evaluate an annotation expression (`f64`, `iz.f64`, `Array[f64, 2]`) in the kernel's scope."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                raise definition.source.error(node, f"unsupported annotation {node.value!r}") from None
        if isinstance(node, ast.Name):
            return self.read_global(definition, node.id)
        if isinstance(node, ast.Attribute):
            base = self._annotation(definition, node.value)
            return self.read_attribute(definition, ast.unparse(node.value), base, node.attr)
        if isinstance(node, ast.Subscript):
            base = self._annotation(definition, node.value)
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            items = [p.value if isinstance(p, ast.Constant) else self._annotation(definition, p) for p in parts]
            try:
                return base[tuple(items) if len(items) > 1 else items[0]]  # type: ignore[index]
            except (TypeError, KeyError) as error:
                raise definition.source.error(node, f"bad annotation '{ast.unparse(node)}': {error}") from None
        return MISSING

    def _unique_name(self, name: str) -> str:
        taken = set(self.names.values())
        if name not in taken:
            return name
        suffix = 2
        while f"{name}_{suffix}" in taken:
            suffix += 1
        return f"{name}_{suffix}"


def lower_kernel(definition: KernelDefinition,
                 static_reads: list[StaticRead] | None = None) -> tuple[Module, Function]:
    """The SSA module of a kernel (with every kernel it calls) and the kernel's function in it; the reads
    outside the kernels are appended to `static_reads` when it is given."""
    compiler = ModuleCompiler()
    function = compiler.function_for(definition)
    if static_reads is not None:
        static_reads += compiler.static_reads
    return compiler.module, function
