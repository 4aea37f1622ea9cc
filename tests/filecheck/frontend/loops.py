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


# A constant negative step: trip = max(0, (stop - start + step + 1) // step), i = start + k*step.
# CHECK-LABEL: func @backwards(%x: f64[?], %n: i64) -> f64 {
# CHECK:         %[[START:[a-z0-9_.]+]] = isub %n, 1
# CHECK-NEXT:    %[[DIST:[a-z0-9_.]+]] = isub -1, %[[START]]
# CHECK-NEXT:    %[[ADJ:[a-z0-9_.]+]] = iadd %[[DIST]], -1
# CHECK-NEXT:    %[[Q:[a-z0-9_.]+]] = ifloordiv %[[ADJ]], -2
# CHECK-NEXT:    %{{[a-z0-9_.]+}} = imax %[[Q]], 0
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


# A step whose sign is only known at run time: asserted non-zero, its sign chosen by a select.
# CHECK-LABEL: func @strided(%x: f64[?], %n: i64, %step: i64) -> f64 {
# CHECK:         %[[NZ:[a-z0-9_.]+]] = icmp.ne %step, 0
# CHECK-NEXT:    assert %[[NZ]], "range() step must not be zero"
# CHECK-NEXT:    %[[POS:[a-z0-9_.]+]] = icmp.sgt %step, 0
# CHECK-NEXT:    %[[SIGN:[a-z0-9_.]+]] = select %[[POS]], 1, -1
# CHECK-NEXT:    %[[ADJ:[a-z0-9_.]+]] = isub %step, %[[SIGN]]
# CHECK-NEXT:    %[[DIST:[a-z0-9_.]+]] = iadd %n, %[[ADJ]]
# CHECK-NEXT:    %[[Q:[a-z0-9_.]+]] = ifloordiv %[[DIST]], %step
# CHECK-NEXT:    %{{[a-z0-9_.]+}} = imax %[[Q]], 0
# CHECK:       for.body:
# CHECK-NEXT:    %j = imul %{{[a-z0-9_.]+}}, %step
@iz.kernel
def strided(x: Array[f64], n: i64, step: i64) -> f64:
    s = 0.0
    for j in range(0, n, step):
        s -= x[j]
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
