# Forward mode (DESIGN 5): fwddiffe_f, a tangent right after every active value; no tapes, no reverse pass.
# RUN: isozyme ir %s:poly --stage fwd-opt --activity dup | filecheck %s --check-prefix=POLY
# RUN: isozyme ir %s:weighted --stage fwd-opt --activity dup,const,const | filecheck %s --check-prefix=WEIGHTED
# RUN: isozyme ir %s:sines --stage fwd-opt --activity dup,dup,const | filecheck %s --check-prefix=SINES
# RUN: isozyme ir %s:scratch --stage fwd --activity dup -O none | filecheck %s --check-prefix=SCRATCH
# RUN: isozyme ir %s:halve --stage fwd-opt --activity dup | filecheck %s --check-prefix=WHILE
import isozyme as iz
from isozyme import Array, f64, i64


# A scalar polynomial: straight-line code; the float argument's tangent is a scalar parameter, the return
# value's tangent goes to the one-element output %d_return, the primal value is returned.
# POLY-LABEL: func @fwddiffe_poly(%x: f64, %d_x: f64, %d_return: f64[?]) -> f64
# POLY-NOT:     alloc
# POLY-NOT:     br
# POLY:         %[[A:[a-z0-9_.]+]] = fmul %x, 3.0
# POLY-NEXT:    %[[DA:[a-z0-9_.]+]] = fmul %d_x, 3.0
# POLY-NEXT:    %[[B:[a-z0-9_.]+]] = fmul %[[A]], %x
# POLY-NEXT:    %[[DB1:[a-z0-9_.]+]] = fmul %[[DA]], %x
# POLY-NEXT:    %[[DB2:[a-z0-9_.]+]] = fmul %d_x, %[[A]]
# POLY-NEXT:    fadd %[[DB1]], %[[DB2]]
# POLY:         store %{{[a-z0-9_.]+}}, %d_return[0]
# POLY-NEXT:    ret
@iz.kernel
def poly(x: f64) -> f64:
    return 3.0 * x * x + 2.0 * x + 1.0


# A loop: the accumulator gets a tangent phi next to it; the Const array w has no shadow, so the tangent
# of w[i] * x[i] is the one term d_x[i] * w[i].
# WEIGHTED-LABEL: func @fwddiffe_weighted(%x: f64[?], %d_x: f64[?], %w: f64[?], %n: i64, %d_return: f64[?]) -> f64
# WEIGHTED-NOT:     alloc
# WEIGHTED:       {{^}}for.header:
# WEIGHTED:         %s = phi f64
# WEIGHTED-NEXT:    %d.s = phi f64 [for.body: %d.s.1, entry: 0.0]
# WEIGHTED:       {{^}}for.body:
# WEIGHTED-NEXT:    %[[W:[a-z0-9_.]+]] = load %w[%i]
# WEIGHTED-NEXT:    %[[X:[a-z0-9_.]+]] = load %x[%i]
# WEIGHTED-NEXT:    %[[DX:[a-z0-9_.]+]] = load %d_x[%i]
# WEIGHTED-NEXT:    fmul %[[W]], %[[X]]
# WEIGHTED-NEXT:    %[[DT:[a-z0-9_.]+]] = fmul %[[DX]], %[[W]]
# WEIGHTED-NOT:     d_w
# WEIGHTED:         %d.s.1 = fadd %d.s, %[[DT]]
# WEIGHTED:       {{^}}for.end:
# WEIGHTED:         %d.s.2 = phi f64
# WEIGHTED-NEXT:    store %d.s.2, %d_return[0]
@iz.kernel
def weighted(x: Array[f64], w: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += w[i] * x[i]
    return s


# A written array: the store of the primal value is followed by the store of its tangent into the shadow.
# No return value: no %d_return.
# SINES-LABEL: func @fwddiffe_sines(%out: f64[?], %d_out: f64[?], %x: f64[?], %d_x: f64[?], %a: f64) argmemonly
# SINES:         %[[X:[a-z0-9_.]+]] = load %x[%i]
# SINES-NEXT:    %[[DX:[a-z0-9_.]+]] = load %d_x[%i]
# SINES-NEXT:    %[[SIN:[a-z0-9_.]+]] = sin %[[X]]
# SINES-NEXT:    %[[COS:[a-z0-9_.]+]] = cos %[[X]]
# SINES-NEXT:    %[[DSIN:[a-z0-9_.]+]] = fmul %[[DX]], %[[COS]]
# SINES:         store %{{[a-z0-9_.]+}}, %out[%i]
# SINES-NEXT:    store %{{[a-z0-9_.]+}}, %d_out[%i]
# SINES-NOT:     d_return
@iz.kernel
def sines(out: Array[f64], x: Array[f64], a: f64):
    for i in range(len(x)):
        out[i] = a * iz.sin(x[i])


# An active local array gets a zeroed shadow of the same extent right after it (opt=none: as made by AD);
# loads and stores of t are mirrored on d_t.
# SCRATCH-LABEL: func @fwddiffe_scratch(%x: f64[?], %d_x: f64[?], %d_return: f64[?]) -> f64
# SCRATCH:         %t = alloc f64[%n] zeroed
# SCRATCH-NEXT:    %d_t = alloc f64[%n] zeroed
# SCRATCH:         store %{{[a-z0-9_.]+}}, %t[%i]
# SCRATCH-NEXT:    store %{{[a-z0-9_.]+}}, %d_t[%i]
# SCRATCH:         %[[T:[a-z0-9_.]+]] = load %t[%[[J:[a-z0-9_.]+]]]
# SCRATCH-NEXT:    load %d_t[%[[J]]]
@iz.kernel
def scratch(x: Array[f64]) -> f64:
    n = len(x)
    t = iz.zeros(n, f64)
    for i in range(n):
        t[i] = x[i] * x[i]
    s = 0.0
    for i in range(n):
        s += t[n - 1 - i] * x[i]
    return s


# A while loop whose trip count the data decides: forward mode records nothing (no tape, no counter).
# WHILE-LABEL: func @fwddiffe_halve(%x: f64, %d_x: f64, %d_return: f64[?]) -> f64
# WHILE-NOT:     alloc
# WHILE-NOT:     grow
# WHILE:         %s = phi f64 [while.body: %s.1, entry: %x]
# WHILE-NEXT:    %d.s = phi f64 [while.body: %d.s.1, entry: %d_x]
# WHILE:         %s.1 = fmul %s, 0.5
# WHILE-NEXT:    %d.s.1 = fmul %d.s, 0.5
# WHILE-NOT:     alloc
@iz.kernel
def halve(x: f64) -> f64:
    s = x
    while s > 1.0:
        s = 0.5 * s
    return s
