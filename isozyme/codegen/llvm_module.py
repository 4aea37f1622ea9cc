"""The LLVM module being built for one SSA module: what the functions of the LLVM backend share.

`ModuleEmitter` declares one internal LLVM function per SSA function before any body is emitted (so a call
can name any function, in any order), declares each C library function, intrinsic and helper once however
many instructions use it, and collects the module's error sites in the order their numbers say. A function
returning an array is refused here, before anything is emitted (`CodegenError`).
"""

from __future__ import annotations

from llvmlite import ir

from isozyme.codegen.abi import CodegenError, CodegenOptions
from isozyme.codegen.error_sites import ErrorSite
from isozyme.codegen.llvm_types import F32, F64, POINTER, RECORD_POINTER, flat_parameter_types, register_type
from isozyme.codegen.llvm_vector_math import approximate_functions, declare_approximate, keep
from isozyme.ssa.ir import Function, Module


class ModuleEmitter:
    """Emits the functions of one SSA module into one LLVM module; holds what they share."""

    def __init__(self, module: Module, options: CodegenOptions, symbol_prefix: str) -> None:
        self.ssa = module
        self.options = options
        self.prefix = symbol_prefix
        self.llvm = ir.Module(name=symbol_prefix.rstrip("_") or "isozyme")
        self.sites: list[ErrorSite] = []
        self.functions: dict[Function, ir.Function] = {}
        self._declared: dict[str, ir.Function] = {}
        self.entry: Function | None = None
        self._slot: ir.GlobalVariable | None = None
        self._vector_math: list[ir.Function] = []

    def symbol(self, function: Function) -> str:
        return f"{self.prefix}{function.name}"

    def declare_all(self, entry: Function) -> None:
        self.entry = entry
        for function in self.ssa:
            if function.return_type.is_array:
                raise CodegenError(f"@{function.name} returns an array, which compiled code cannot do")
            params = [t for arg in function.args for t in flat_parameter_types(arg.type)]
            return_type = ir.VoidType() if function.return_type.is_void else register_type(function.return_type)
            fn_type = ir.FunctionType(return_type, [*params, RECORD_POINTER])
            llvm_fn = ir.Function(self.llvm, fn_type, self.symbol(function))
            llvm_fn.linkage = "internal"
            if function is entry:  # distinct array arguments do not overlap (checked at the call)
                for arg in llvm_fn.args:
                    if isinstance(arg.type, ir.PointerType):
                        arg.add_attribute("noalias")
            self.functions[function] = llvm_fn

    def libm(self, name: str, arity: int = 1) -> ir.Function:
        """A C library function `double name(double, ...)`; with "afn" in the options' `fastmath`,
        `readnone` with its vector versions, for the loop vectorizer (`llvm_vector_math.py`)."""
        declared = name in self._declared
        function = self.declare(name, ir.FunctionType(F64, [F64] * arity))
        if not declared and approximate_functions(self.options.fastmath):
            self._vector_math += declare_approximate(self.llvm, function, name, arity)
        return function

    def finish(self) -> str:
        """The module's LLVM IR, once every function is emitted."""
        keep(self.llvm, self._vector_math)
        return str(self.llvm)

    def intrinsic(self, name: str, ty: ir.Type, arity: int = 1) -> ir.Function:
        """The LLVM intrinsic `name` on `ty` (e.g. `llvm.floor.f64`), taking `arity` operands of `ty`."""
        suffix = "f32" if ty == F32 else "f64"
        return self.declare(f"{name}.{suffix}", ir.FunctionType(ty, [ty] * arity))

    def declare(self, name: str, fn_type: ir.FunctionType) -> ir.Function:
        if name not in self._declared:
            self._declared[name] = ir.Function(self.llvm, fn_type, name)
        return self._declared[name]

    @property
    def slot_symbol(self) -> str:
        """`ptr {prefix}parallel_slot()`: the address of the module's pointer to the thread pool's state,
        which the runtime sets when it loads the module (`llvm_parallel.py`, `runtime/thread_pool.py`)."""
        return f"{self.prefix}parallel_slot"

    def parallel_slot(self) -> ir.GlobalVariable:
        """The module's pointer to the thread pool's state (null: no pool; loops run on the caller)."""
        if self._slot is None:
            self._slot = ir.GlobalVariable(self.llvm, POINTER, f"{self.prefix}parallel")
            self._slot.linkage = "internal"
            self._slot.initializer = ir.Constant(POINTER, None)
            accessor = ir.Function(self.llvm, ir.FunctionType(POINTER, []), self.slot_symbol)
            builder = ir.IRBuilder(accessor.append_basic_block("entry"))
            builder.ret(builder.bitcast(self._slot, POINTER))
        return self._slot

    @property
    def threaded(self) -> bool:
        """Does the module run loops on the thread pool (and export `slot_symbol`)?"""
        return self._slot is not None
