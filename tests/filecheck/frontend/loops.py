# Loops lower to canonical counted loops: the trip count once in the preheader, a 0-based counter on
# the header stepped by 1 on the single latch, and the Python loop variable computed from it.
# RUN: isozyme ir %s | filecheck %s
import isozyme as iz
from isozyme import Array, f64, i64


# range(n): the counter is the loop variable itself.
# CHECK-LABEL: func @mag(%x: f64[?], %n: i64) -> f64 {
# CHECK:         %[[TRIP:[a-z0-9_.]+]] = imax %n, 0
# CHECK:       for.header:
# CHECK-NEXT:    %[[I:[a-z0-9_.]+]] = phi i64 [entry: 0, for.latch: %[[NEXT:[a-z0-9_.]+]]]
# CHECK-NEXT:    %[[S:[a-z0-9_.]+]] = phi f64 [entry: 0.0, for.latch: %[[S1:[a-z0-9_.]+]]]
# CHECK-NEXT:    %[[C:[a-z0-9_.]+]] = icmp.slt %[[I]], %[[TRIP]]
# CHECK-NEXT:    cbr %[[C]], for.body, for.end
# CHECK:         %[[S1]] = fadd %[[S]],
# CHECK:       for.latch:
# CHECK-NEXT:    %[[NEXT]] = iadd %[[I]], 1
# CHECK:         %[[R:[a-z0-9_.]+]] = sqrt %[[S]]
# CHECK-NEXT:    ret %[[R]]
@iz.kernel
def mag(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    return iz.sqrt(s)


# A constant negative step: trip = max((start - (stop + 1)) // -step + 1, 0) (`ssa/range_length.py`: it
# cannot wrap), i = start + k*step.
# CHECK-LABEL: func @backwards(%x: f64[?], %n: i64) -> f64 {
# CHECK:         %[[START:[a-z0-9_.]+]] = isub %n, 1
# CHECK-NEXT:    %[[Q:[a-z0-9_.]+]] = ifloordiv %[[START]], 2
# CHECK-NEXT:    %[[COUNT:[a-z0-9_.]+]] = iadd %[[Q]], 1
# CHECK-NEXT:    %{{[a-z0-9_.]+}} = imax %[[COUNT]], 0
# CHECK:         %[[K:[a-z0-9_.]+]] = phi i64
# CHECK:       for.body:
# CHECK-NEXT:    %[[OFF:[a-z0-9_.]+]] = imul %[[K]], -2
# CHECK-NEXT:    %i = iadd %[[START]], %[[OFF]]
@iz.kernel
def backwards(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n - 1, -1, -2):
        s += x[i]
    return s


# A step whose sign is only known at run time: asserted non-zero; the span, from the larger bound to the
# smaller, divided as an unsigned number by the step's magnitude (it cannot wrap: `ssa/range_length.py`),
# and a count over 2**63 - 1 an OverflowError.
# CHECK-LABEL: func @strided(%x: f64[?], %n: i64, %step: i64) -> f64 {
# CHECK:         %[[NZ:[a-z0-9_.]+]] = icmp.ne %step, 0
# CHECK-NEXT:    assert %[[NZ]], "range() step must not be zero"
# CHECK-NEXT:    %[[UP:[a-z0-9_.]+]] = icmp.sgt %step, 0
# CHECK-NEXT:    %[[HI:[a-z0-9_.]+]] = select %[[UP]], %n, 0
# CHECK-NEXT:    %[[LO:[a-z0-9_.]+]] = select %[[UP]], 0, %n
# CHECK-NEXT:    %[[NEG:[a-z0-9_.]+]] = ineg %step
# CHECK-NEXT:    %[[MAG:[a-z0-9_.]+]] = select %[[UP]], %step, %[[NEG]]
# CHECK-NEXT:    %[[SPAN:[a-z0-9_.]+]] = isub %[[HI]], %[[LO]]
# CHECK-NEXT:    %[[LAST:[a-z0-9_.]+]] = isub %[[SPAN]], 1
# CHECK-NEXT:    %[[Q:[a-z0-9_.]+]] = udiv %[[LAST]], %[[MAG]]
# CHECK-NEXT:    %[[COUNT:[a-z0-9_.]+]] = iadd %[[Q]], 1
# CHECK-NEXT:    %[[ANY:[a-z0-9_.]+]] = icmp.sgt %[[HI]], %[[LO]]
# CHECK-NEXT:    %[[RAW:[a-z0-9_.]+]] = select %[[ANY]], %[[COUNT]], 0
# CHECK-NEXT:    %[[FITS:[a-z0-9_.]+]] = icmp.sge %[[RAW]], 0
# CHECK-NEXT:    assert %[[FITS]], "range() has more than 2**63 - 1 iterations", OverflowError
# CHECK-NEXT:    %{{[a-z0-9_.]+}} = imax %[[RAW]], 0
# CHECK:       for.body:
# CHECK-NEXT:    %j = imul %{{[a-z0-9_.]+}}, %step
@iz.kernel
def strided(x: Array[f64], n: i64, step: i64) -> f64:
    s = 0.0
    for j in range(0, n, step):
        s -= x[j]
    return s


# Two bounds of unknown sign: b - a may wrap (range(2**63 - 1, -2**63) is empty, range(-1, 2**63 - 1) too
# long), so the count is b - a only where b > a, checked to fit.
# CHECK-LABEL: func @window(%x: f64[?], %a: i64, %b: i64) -> f64 {
# CHECK:         %[[SPAN:[a-z0-9_.]+]] = isub %b, %a
# CHECK-NEXT:    %[[ANY:[a-z0-9_.]+]] = icmp.sgt %b, %a
# CHECK-NEXT:    %[[RAW:[a-z0-9_.]+]] = select %[[ANY]], %[[SPAN]], 0
# CHECK-NEXT:    %[[FITS:[a-z0-9_.]+]] = icmp.sge %[[RAW]], 0
# CHECK-NEXT:    assert %[[FITS]], "range() has more than 2**63 - 1 iterations", OverflowError
# CHECK-NEXT:    %{{[a-z0-9_.]+}} = imax %[[RAW]], 0
@iz.kernel
def window(x: Array[f64], a: i64, b: i64) -> f64:
    s = 0.0
    for i in range(a, b):
        s += x[i]
    return s


# Must not check: extents and the counter of the enclosing loop bound the difference, and an argument n
# only needs max(n, 0) (shared with the loop over range(n)) where the start is not negative.
# CHECK-LABEL: func @triangle(%x: f64[?], %n: i64) -> f64 {
# CHECK-NOT:     assert
# CHECK:         %[[TRIP:[a-z0-9_.]+]] = imax %n, 0
# CHECK-NOT:     assert
# CHECK:         %[[ROW:[a-z0-9_.]+]] = iadd %i, 1
# CHECK-NEXT:    %[[CLAMPED:[a-z0-9_.]+]] = imax %n, 0
# CHECK-NEXT:    %[[ROWS:[a-z0-9_.]+]] = isub %[[CLAMPED]], %[[ROW]]
# CHECK-NEXT:    %{{[a-z0-9_.]+}} = imax %[[ROWS]], 0
# CHECK-NOT:     assert
# CHECK-NOT:     select
# CHECK:         ret
@iz.kernel
def triangle(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            s += x[i] * x[j]
        for j in range(1, len(x) - i, 3):
            s += x[j]
    return s


# while with break and else: break leaves past the else; the else returns.
# CHECK-LABEL: func @search(%x: f64[?], %n: i64, %t: f64) -> i64 {
# CHECK:       while.header:
# CHECK-NEXT:    %[[I:[a-z0-9_.]+]] = phi i64 [entry: 0, if.end: %[[I1:[a-z0-9_.]+]]]
# CHECK-NEXT:    %[[C:[a-z0-9_.]+]] = icmp.slt %[[I]], %n
# CHECK-NEXT:    cbr %[[C]], while.body, while.else
# CHECK:       if.then:
# CHECK-NEXT:    br while.end
# CHECK:         %[[I1]] = iadd %[[I]], 1
# CHECK:       while.else:
# CHECK-NEXT:    ret -1
# CHECK:       while.end:
# CHECK-NEXT:    ret %[[I]]
@iz.kernel
def search(x: Array[f64], n: i64, t: f64) -> i64:
    i = 0
    while i < n:
        if x[i] == t:
            break
        i += 1
    else:
        return -1
    return i


# `continue` goes to the latch, which merges the variables of both paths; prange flags the counter.
# CHECK-LABEL: func @skip_negative(%out: f64[?], %x: f64[?], %n: i64) {
# CHECK:         %{{[a-z0-9_.]+}} = phi i64 [entry: 0, for.latch: %{{[a-z0-9_.]+}}] parallel
# CHECK:       if.then:
# CHECK-NEXT:    br for.latch
# CHECK:       for.latch:
# CHECK-SAME:    ; preds if.then if.end
# CHECK-NOT:     phi
# CHECK:         ret
@iz.kernel
def skip_negative(out: Array[f64], x: Array[f64], n: i64):
    for i in iz.prange(n):
        if x[i] < 0.0:
            continue
        out[i] = x[i]


# A `while True` loop exits only through its return: no exit block, no branch on a constant.
# CHECK-LABEL: func @first_above(%x: f64[?], %t: f64) -> i64 {
# CHECK:       while.header:
# CHECK-NEXT:    %{{[a-z0-9_.]+}} = phi i64
# CHECK-NEXT:    br while.body
# CHECK-NOT:   while.end
@iz.kernel
def first_above(x: Array[f64], t: f64) -> i64:
    i = 0
    while True:
        if x[i] > t:
            return i
        i += 1
