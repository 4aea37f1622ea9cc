"""The versions of the called functions in an OpenCL program: one per address-space signature of its calls.

    versions = FunctionVersions()
    name = versions.request(callee, ("__private", None))   # at a call: the C name to call
    for version in versions.drain():                        # render each requested version once
        ...

A pointer in OpenCL C names the address space it points into. OpenCL C 1.2 has no generic space, and OpenCL
C 3.0 makes it optional (`__opencl_c_generic_address_space`; NVIDIA's OpenCL 3.0 lacks it), so a function
whose parameter is `__global double*` cannot take a work item's private array (`__private double*`), and
casting one space to the other is undefined. Instead, a called function is rendered once per tuple of
address spaces its callers pass for its array parameters (a *version*): with every array parameter global
it keeps its plain name (`f_g`); otherwise its name gets `_AS` and one letter per array parameter, `g` or
`p` (`f_g_ASpg`: a private first array, a global second one). The versions are found from the calls:
rendering a version renders its calls, which request the versions they need, until none is pending (at
most 2^k versions of a function with k array parameters; in practice the few that occur).

Invariant: every call passes each array in the address space that the called version's parameter names.
An address space is written as the renderer's qualifier (`"__private"`) or None for the language's global
space, as `FunctionRenderer.spaces` holds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from isozyme.ssa.ir import Function
from isozyme.ssa.types import ArrayType

Spaces = tuple[str | None, ...]
"""The address space of each parameter (None for a scalar or a global array)."""


@dataclass(frozen=True)
class Version:
    """A called function with the address spaces of its parameters."""

    function: Function
    spaces: Spaces


@dataclass
class FunctionVersions:
    """The versions requested so far (each rendered once), in request order."""

    names: dict[Version, str] = field(default_factory=dict)
    """The C name of each requested version."""
    pending: list[Version] = field(default_factory=list)
    """Requested, not rendered yet."""

    def request(self, function: Function, spaces: Spaces) -> str:
        """The C name of `function` with these parameter spaces; rendered later if new."""
        version = Version(function, spaces)
        if version not in self.names:
            self.names[version] = version_name(function, spaces)
            self.pending.append(version)
        return self.names[version]

    def drain(self) -> list[Version]:
        """The pending versions, now taken as rendered (rendering them may request more: call again)."""
        taken, self.pending = self.pending, []
        return taken


def c_name(function: Function) -> str:
    """The C name of a function: `f_` and its name, each character outside [A-Za-z0-9] written `_<hex>_`
    (`augmented_g.0` is `f_augmented_5f_g_2e_0`: distinct names stay distinct)."""
    return "f_" + "".join(c if c.isascii() and c.isalnum() else f"_{ord(c):x}_" for c in function.name)


def version_name(function: Function, spaces: Spaces) -> str:
    """`c_name`, and for a version taking a non-global array `_AS` and a letter per array parameter (the
    first letter of its space's qualifier, `g` for global). `c_name` writes `_` only before lower-case hex
    digits, so `_AS` keeps every version's name distinct from every function's."""
    if all(space is None for space in spaces):
        return c_name(function)
    letters = "".join((space or "global").strip("_")[0] for arg, space in zip(function.args, spaces, strict=True)
                      if isinstance(arg.type, ArrayType))
    return f"{c_name(function)}_AS{letters}"
