# The showcase of post-optimization AD (DESIGN section 4): for examples/norm.py, O2 hoists the call of
# mag(x, n) out of norm's loop (mag is readonly, its operands are loop-invariant, out cannot alias x).
# RUN: isozyme ir %S/../../../examples/norm.py:norm --stage opt | filecheck %s --check-prefix=NORM
# RUN: isozyme ir %s:norm_writing --stage opt | filecheck %s --check-prefix=WRITING
# RUN: isozyme ir %s:norm_writing --stage ssa | filecheck %s --check-prefix=SSA
import isozyme as iz
from isozyme import Array, f64, i64

# NORM-LABEL: func @mag(%x: f64[?], %n: i64) -> f64 argmemonly readonly {
# NORM-LABEL: func @norm(%out: f64[?], %x: f64[?], %n: i64) argmemonly {
# NORM:         %[[MAG:[a-z0-9_.]+]] = call @mag(%x, %n)
# NORM-NEXT:    br for.header
# NORM:       for.header:
# NORM-NOT:     call
# NORM:       for.body:
# NORM-NOT:     call
# NORM:         %{{[a-z0-9_.]+}} = fdiv %{{[a-z0-9_.]+}}, %[[MAG]]
# NORM-NOT:     call


# Negative: a callee that writes memory (it counts its calls in x[0]) stays in the loop.
@iz.kernel
def mag_counting(x: Array[f64], n: i64) -> f64:
    x[0] += 1.0
    s = 0.0
    for i in range(1, n):
        s += x[i] * x[i]
    return iz.sqrt(s)


# WRITING-LABEL: func @mag_counting(%x: f64[?], %n: i64) -> f64 argmemonly {
# (O2 inlines it instead; what matters is that its work stays in the loop body.)
# WRITING-LABEL: func @norm_writing(%out: f64[?], %x: f64[?], %n: i64) argmemonly {
# WRITING-NOT:     sqrt
# WRITING:       for.body:
# WRITING-NEXT:    %{{[a-z0-9_.]+}} = load %x[%i]
# WRITING:         store %{{[a-z0-9_.]+}}, %x[0]
# WRITING:         %{{[a-z0-9_.]+}} = sqrt
# WRITING:         store %{{[a-z0-9_.]+}}, %out[%i]
# SSA-LABEL:   func @norm_writing(
# SSA:         for.body:
# SSA:           call @mag_counting(%x, %n)
@iz.kernel
def norm_writing(out: Array[f64], x: Array[f64], n: i64):
    for i in range(n):
        out[i] = x[i] / mag_counting(x, n)
