"""Walks along def-use chains, without recursion.

A chain of values each computed from the one before is as long as the program that computes it: a
10,000-term sum is 10,000 `fadd`s deep. So no analysis follows operands by recursion, whose depth Python
limits to about 1,000 frames; it evaluates the values in the order `operands_first` gives, each from its
operands' results, which are known by then.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator

from isozyme.ssa.ir import Value


def operands_first(root: Value, inputs: Callable[[Value], Iterable[Value]],
                   done: Container[Value] = ()) -> Iterator[Value]:
    """`root` and the values reachable from it through `inputs` (the operands an evaluation reads), each
    once and after the values it reaches: the order in which a recursive evaluation would finish them.
    Values in `done` (already evaluated) are neither yielded nor walked through; the caller may add to it
    as values come. A value met again while its own inputs are being walked (a cycle, which only a phi
    closes) is not waited for, so `inputs` stops at phis when results are computed from operands'."""
    if root in done:
        return
    entered = {root}
    stack: list[tuple[Value, Iterator[Value]]] = [(root, iter(inputs(root)))]
    while stack:
        value, pending = stack[-1]
        for operand in pending:
            if operand not in entered and operand not in done:
                entered.add(operand)
                stack.append((operand, iter(inputs(operand))))
                break
        else:
            stack.pop()
            yield value
