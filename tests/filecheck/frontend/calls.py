# Calls of other kernels stay `call` instructions; the callee is compiled into the same module, each
# once. Module-level and closed-over numbers are frozen constants.
# RUN: isozyme ir %s:norm | filecheck %s --check-prefix=NORM
# RUN: isozyme ir %s:twice | filecheck %s --check-prefix=TWICE
# RUN: isozyme ir %s:scaled | filecheck %s --check-prefix=CLOSURE
import isozyme as iz
from isozyme import Array, f64, i64

RATE = 0.5


@iz.kernel
def mag(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    return iz.sqrt(s)


# The callee comes first in the module; the call stays inside the loop (O2 hoists it, not the frontend).
# NORM-LABEL: func @mag(%x: f64[?], %n: i64) -> f64 {
# NORM-LABEL: func @norm(%out: f64[?], %x: f64[?], %n: i64) {
# NORM:       for.body:
# NORM-NEXT:    %[[XI:[a-z0-9_.]+]] = load %x[%i]
# NORM-NEXT:    %[[M:[a-z0-9_.]+]] = call @mag(%x, %n)
# NORM-NEXT:    %[[Q:[a-z0-9_.]+]] = fdiv %[[XI]], %[[M]]
# NORM-NEXT:    store %[[Q]], %out[%i]
@iz.kernel
def norm(out: Array[f64], x: Array[f64], n: i64):
    for i in range(n):
        out[i] = x[i] / mag(x, n)


@iz.kernel
def axpy(y: Array[f64], a: f64, x: Array[f64], n: i64):
    for i in range(n):
        y[i] += a * x[i]


# Keyword arguments bind by name; an i64 argument converts to an f64 parameter; the module constant folds.
# TWICE-LABEL: func @axpy(
# TWICE-NOT:   func @axpy(
# TWICE-LABEL: func @twice(%y: f64[?], %x: f64[?], %n: i64) {
# TWICE-NEXT:  entry:
# TWICE-NEXT:    call @axpy(%y, 0.5, %x, %n)
# TWICE-NEXT:    %[[A:[a-z0-9_.]+]] = sitofp %n to f64
# TWICE-NEXT:    call @axpy(%y, %[[A]], %x, %n)
@iz.kernel
def twice(y: Array[f64], x: Array[f64], n: i64):
    axpy(y, RATE, x, n)
    axpy(x=x, n=n, y=y, a=n)


def make_scaled(factor):
    @iz.kernel
    def scaled(x: Array[f64], n: i64):
        for i in range(n):
            x[i] *= factor
    return scaled


scaled = make_scaled(3.0)

# CLOSURE-LABEL: func @scaled(%x: f64[?], %n: i64) {
# CLOSURE:         %[[V:[a-z0-9_.]+]] = load %x[%i]
# CLOSURE-NEXT:    %[[P:[a-z0-9_.]+]] = fmul %[[V]], 3.0
# CLOSURE-NEXT:    store %[[P]], %x[%i]
