# Expressions: Python's typing (weak literals, int/float promotion, true division), short-circuit
# boolean operators and chained comparisons as control flow, conditional expressions as phis.
# RUN: isozyme ir %s | filecheck %s
import math

import isozyme as iz
from isozyme import boolean, f32, f64, i32, i64


# Literals are weak: `a * 2.0` stays f32; an i64 joins f32 as f32; `/` of f32 by an int literal is f32.
# CHECK-LABEL: func @weak(%a: f32, %k: i64) -> f32 {
# CHECK-NEXT:  entry:
# CHECK-NEXT:    %[[M:[a-z0-9_.]+]] = fmul %a, 2.0:f32
# CHECK-NEXT:    %[[K:[a-z0-9_.]+]] = sitofp %k to f32
# CHECK-NEXT:    %b = fadd %[[M]], %[[K]]
# CHECK-NEXT:    %[[D:[a-z0-9_.]+]] = fdiv %b, 3.0:f32
# CHECK-NEXT:    ret %[[D]]
@iz.kernel
def weak(a: f32, k: i64) -> f32:
    b = a * 2.0 + k
    return b / 3


# Integers: `/` converts both to f64; `//` and `%` stay integer ops; i32 + literal stays i32; i32 + i64 is i64.
# CHECK-LABEL: func @ints(%p: i64, %q: i64, %r: i32) -> f64 {
# CHECK:         %[[P:[a-z0-9_.]+]] = sitofp %p to f64
# CHECK-NEXT:    %[[Q:[a-z0-9_.]+]] = sitofp %q to f64
# CHECK-NEXT:    %t = fdiv %[[P]], %[[Q]]
# CHECK-NEXT:    %f = ifloordiv %p, %q
# CHECK-NEXT:    %m = ifloormod %p, %q
# CHECK-NEXT:    %s = iadd %r, 1:i32
# CHECK-NEXT:    %[[W:[a-z0-9_.]+]] = sext %s to i64
# CHECK-NEXT:    %w = iadd %[[W]], %p
@iz.kernel
def ints(p: i64, q: i64, r: i32) -> f64:
    t = p / q
    f = p // q
    m = p % q
    s = r + 1
    w = s + p
    return t + f + m + w


# `and` in a condition branches; as a value it is a phi of the operands (Python returns an operand).
# A chained comparison evaluates its middle operand once and branches between the comparisons.
# CHECK-LABEL: func @logic(%a: f64, %b: f64) -> i1 {
# CHECK:         %[[A:[a-z0-9_.]+]] = fcmp.ogt %a, 0.0
# CHECK-NEXT:    cbr %[[A]], and.rhs, and.end
# CHECK:       and.end:
# CHECK-NEXT:    %[[AND:[a-z0-9_.]+]] = phi i1 [entry: %[[A]], and.rhs: %{{[a-z0-9_.]+}}]
# CHECK-NEXT:    cbr %[[AND]], or.end, or.rhs
# CHECK:       or.rhs:
# CHECK-NEXT:    %[[LO:[a-z0-9_.]+]] = fcmp.olt 0.0, %a
# CHECK-NEXT:    cbr %[[LO]], cmp.next, cmp.false
# CHECK:       cmp.next:
# CHECK-NEXT:    %{{[a-z0-9_.]+}} = fcmp.olt %a, %b
# CHECK:       or.end:
# CHECK-NEXT:    %[[OR:[a-z0-9_.]+]] = phi i1
# CHECK-NEXT:    ret %[[OR]]
@iz.kernel
def logic(a: f64, b: f64) -> boolean:
    return a > 0 and b > 0 or 0 < a < b


# `x or y` on numbers returns a number: the merge widens the int operand to f64 in its block.
# CHECK-LABEL: func @either(%k: i64, %y: f64) -> f64 {
# CHECK:         %[[T:[a-z0-9_.]+]] = icmp.ne %k, 0
# CHECK-NEXT:    %[[KF:[a-z0-9_.]+]] = sitofp %k to f64
# CHECK-NEXT:    cbr %[[T]], or.end, or.rhs
# CHECK:       or.end:
# CHECK-NEXT:    %{{[a-z0-9_.]+}} = phi f64 [entry: %[[KF]], or.rhs: %y]
@iz.kernel
def either(k: i64, y: f64) -> f64:
    return k or y


# A conditional expression evaluates only the branch taken.
# CHECK-LABEL: func @relu3(%x: f64) -> f64 {
# CHECK:         cbr %{{[a-z0-9_.]+}}, cond.true, cond.false
# CHECK:       cond.true:
# CHECK-NEXT:    %[[CUBE:[a-z0-9_.]+]] = pow %x, 3.0
# CHECK:       cond.end:
# CHECK-NEXT:    %{{[a-z0-9_.]+}} = phi f64 [cond.true: %[[CUBE]], cond.false: 0.0]
@iz.kernel
def relu3(x: f64) -> f64:
    return x ** 3 if x > 0 else 0.0


# math.floor returns an int, as in Python; iz.floor a float; int() truncates; abs and min/max by type.
# CHECK-LABEL: func @builtins(%x: f64, %k: i64) -> f64 {
# CHECK:         %[[F:[a-z0-9_.]+]] = floor %x
# CHECK-NEXT:    %a = fptosi %[[F]] to i64
# CHECK-NEXT:    %b = floor %x
# CHECK-NEXT:    %c = fptosi %x to i64
# CHECK-NEXT:    %d = iabs %k
# CHECK-NEXT:    %[[M:[a-z0-9_.]+]] = fmin %x, 1.0
# CHECK-NEXT:    %e = fmin %[[M]], -2.0
# CHECK-NEXT:    %g = imax %k, 3
@iz.kernel
def builtins(x: f64, k: i64) -> f64:
    a = math.floor(x)
    b = iz.floor(x)
    c = int(x)
    d = abs(k)
    e = min(x, 1.0, -2.0)
    g = max(k, 3)
    return a + b + c + d + e + g


# Constant subexpressions fold; an integer power by a constant is repeated squaring.
# CHECK-LABEL: func @folded(%k: i64) -> i64 {
# CHECK-NEXT:  entry:
# CHECK-NEXT:    %[[K2:[a-z0-9_.]+]] = imul %k, %k
# CHECK-NEXT:    %[[K4:[a-z0-9_.]+]] = imul %[[K2]], %[[K2]]
# CHECK-NEXT:    %[[K5:[a-z0-9_.]+]] = imul %k, %[[K4]]
# CHECK-NEXT:    %{{[a-z0-9_.]+}} = iadd %[[K5]], 10
@iz.kernel
def folded(k: i64) -> i64:
    return k ** 5 + (2 * 3 + 4)
