"""isozyme: Enzyme-style automatic differentiation of annotated Python kernels (DESIGN section 1).

    import isozyme as iz
    from isozyme import f64, i64, Array

    @iz.kernel
    def mag(x: Array[f64], n: i64) -> f64:
        ...
"""

from isozyme import testing  # iz.testing: gradcheck, assert_ir, the lit runner
from isozyme.enzyme_ad.errors import DifferentiationError
from isozyme.frontend.annotations import Array, boolean, f32, f64, i32, i64
from isozyme.frontend.diagnostics import CompileError
from isozyme.frontend.intrinsics import MATH_FUNCTIONS, empty, ndrange, prange, zeros
from isozyme.runtime.autodiff import Active, Const, Duplicated, autodiff, fwddiff, grad, hvp
from isozyme.runtime.device_array import DeviceArray, to_device
from isozyme.runtime.inspection import show_cache, show_ir
from isozyme.runtime.kernel import Kernel, kernel
from isozyme.runtime.memory_report import show_memory
from isozyme.runtime.profiler import profile
from isozyme.runtime.thread_pool import get_num_threads, set_num_threads
from isozyme.runtime.version import VERSION

sqrt = MATH_FUNCTIONS["sqrt"]
exp = MATH_FUNCTIONS["exp"]
log = MATH_FUNCTIONS["log"]
log1p = MATH_FUNCTIONS["log1p"]
expm1 = MATH_FUNCTIONS["expm1"]
sin = MATH_FUNCTIONS["sin"]
cos = MATH_FUNCTIONS["cos"]
tan = MATH_FUNCTIONS["tan"]
tanh = MATH_FUNCTIONS["tanh"]
sigmoid = MATH_FUNCTIONS["sigmoid"]
sinh = MATH_FUNCTIONS["sinh"]
cosh = MATH_FUNCTIONS["cosh"]
asin = MATH_FUNCTIONS["asin"]
acos = MATH_FUNCTIONS["acos"]
atan = MATH_FUNCTIONS["atan"]
atan2 = MATH_FUNCTIONS["atan2"]
pow = MATH_FUNCTIONS["pow"]  # noqa: A001 - the kernel language's name
fabs = MATH_FUNCTIONS["fabs"]
floor = MATH_FUNCTIONS["floor"]
ceil = MATH_FUNCTIONS["ceil"]
erf = MATH_FUNCTIONS["erf"]

__version__ = VERSION


def compare(kernel: Kernel, *args: object, **options: object) -> object:
    """The bench on your kernel (`python -m isozyme bench FILE.py:kernel --args ...` in Python): the primal
    and the gradients of the optimized program (post) and of the program as written (pre) timed, their IR
    sizes per stage, every result checked (pre against post, finite differences, the Python function). Returns
    the row (`.timings`, `.speedup`, `.ratio`, `.ir_sizes`, `.checks`); options and checks as
    `isozyme.kernel_comparison.compare` documents them. Imported at the first call: a tool, not the compiler."""
    from isozyme.kernel_comparison import compare as compare_kernel

    return compare_kernel(kernel, *args, **options)  # type: ignore[arg-type]


__all__ = [
    "Active", "Array", "CompileError", "Const", "DeviceArray", "DifferentiationError", "Duplicated", "Kernel",
    "acos", "asin", "atan", "atan2", "autodiff", "boolean", "ceil", "compare", "cos", "cosh", "empty", "erf", "exp",
    "expm1", "f32", "f64", "fabs", "floor", "fwddiff", "get_num_threads", "grad", "hvp", "i32", "i64", "kernel",
    "log", "log1p", "ndrange", "pow", "prange", "profile", "set_num_threads", "show_cache", "show_ir", "show_memory",
    "sigmoid", "sin", "sinh", "sqrt", "tan", "tanh", "testing", "to_device", "zeros",
]
