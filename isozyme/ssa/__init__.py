"""The SSA IR: types, the op table, IR classes, builder, printer, parser, verifier, analyses and the
reference interpreter (DESIGN section 3). Imports no other isozyme package.

Modules in layer order, highest first: a `- ` line starts a layer, the lines under it are the other modules of
that layer, which import each other not at all; each module imports only modules of lower layers
(`lint-imports` checks it against the contracts in `pyproject.toml`).
- `range_length`: the trip count of `range(a, b, s)` for any i64 bounds, as the frontend emits it
- `trip_count`: the trip count of a loop, as a value or a formula of loop-invariant values
  `verifier`: the IR's invariants (types, dominance, phis, terminators, flags)
  `interpreter`: the reference interpreter
  `parser`: the text form read back
  `dot`: Graphviz drawings of a function's CFG
  `reductions`: the header phis a loop only adds to (its iterations may run in any order)
- `loops`: natural loops and the loop nest
  `printer`: the text form (`print_function`, `print_module`)
- `dominators`: the dominator tree and dominance frontiers (Lengauer-Tarjan)
  `builder`: making instructions at an insertion point
- `cfg`: successors, predecessors and block orders
  `def_use`: walks over operands and users without recursion
  `semantics`: what each op computes (the interpreter and constant folding share it)
  `flags`: the flags passes and backends read, and the local-array predicates
- `ir`: values, instructions, phis, blocks, functions and modules, with their use lists
- `ops`: the op enum and its property table
- `types`: scalar and array types
"""

from isozyme.ssa.builder import Builder, make_function
from isozyme.ssa.dominators import DominatorTree, dominance_frontiers
from isozyme.ssa.interpreter import run_function
from isozyme.ssa.ir import Argument, Block, Constant, Function, Instruction, IRError, Module, Phi, SourceLoc, Use, Value
from isozyme.ssa.loops import Loop, LoopNest
from isozyme.ssa.ops import OP_INFO, Op, OpInfo
from isozyme.ssa.parser import ParseError, parse_function, parse_module
from isozyme.ssa.printer import print_function, print_module
from isozyme.ssa.trip_count import TripCount, UnknownTripCount, analyze_trip_count, loop_runs_at_least_once
from isozyme.ssa.types import F32, F64, I1, I32, I64, VOID, ArrayType, ScalarType, Type
from isozyme.ssa.verifier import VerificationError, verify

__all__ = [
    "Argument", "ArrayType", "Block", "Builder", "Constant", "DominatorTree", "F32", "F64", "Function", "I1",
    "I32", "I64", "IRError", "Instruction", "Loop", "LoopNest", "Module", "OP_INFO", "Op", "OpInfo",
    "ParseError", "Phi", "ScalarType", "SourceLoc", "Type", "Use", "VOID", "Value", "VerificationError",
    "dominance_frontiers", "make_function", "parse_function", "parse_module", "print_function",
    "print_module", "run_function", "verify",
    "TripCount", "UnknownTripCount", "analyze_trip_count", "loop_runs_at_least_once",
]
