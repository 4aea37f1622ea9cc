# Reverse mode (DESIGN 5): diffe_f after the optimization that follows AD (`--stage grad-opt`, opt=post).
# RUN: isozyme ir %s:poly --stage grad-opt --activity active | filecheck %s --check-prefix=POLY
# RUN: isozyme ir %s:relu3 --stage grad-opt --activity dup,const | filecheck %s --check-prefix=RELU3
# RUN: isozyme ir %s:total --stage grad-opt --activity dup,const | filecheck %s --check-prefix=SUM
# RUN: isozyme ir %s:product --stage grad-opt --activity dup,const | filecheck %s --check-prefix=PRODUCT
# RUN: isozyme ir %s:clipped --stage grad-opt --activity dup,const | filecheck %s --check-prefix=BRANCH
# RUN: isozyme ir %s:rows --stage grad-opt --activity dup | filecheck %s --check-prefix=NESTED
import isozyme as iz
from isozyme import Array, f64, i64


# A scalar polynomial: straight-line code, the adjoint stored into the Active output, nothing cached.
# POLY-LABEL: func @diffe_poly(%x: f64, %d_x: f64[?], %differet: f64) -> f64
# POLY-NOT:     alloc
# POLY-NOT:     br
# POLY:         fmul %differet, %x
# POLY:         store %{{[a-z0-9_.]+}}, %d_x[0]
# POLY-NEXT:    ret
@iz.kernel
def poly(x: f64) -> f64:
    return 3.0 * x * x + 2.0 * x + 1.0


# relu3: the reverse of the branch goes where the forward pass went, on the condition recomputed from
# x (x is never written, so neither the load nor the comparison needs a tape).
# RELU3-LABEL: func @diffe_relu3(%x: f64[?], %d_x: f64[?], %n: i64, %differet: f64) -> f64
# RELU3-NOT:     alloc
# RELU3:       {{^}}for.header.rev:
# RELU3:         %for.header.rev.index = isub %for.header.rev.iter, 1
# RELU3:       {{^}}for.header.rev.if.end:
# RELU3-NEXT:    %[[X:[a-z0-9_.]+]] = load %x[%for.header.rev.index]
# RELU3-NEXT:    %[[C:[a-z0-9_.]+]] = fcmp.ogt %[[X]], 0.0
# RELU3-NEXT:    cbr %[[C]], if.end.rev.if.then, for.body.rev
@iz.kernel
def relu3(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        if x[i] > 0.0:
            s += x[i] * x[i] * x[i]
    return s


# A sum: the adjoint of every x[i] is the seed. No tape; the reverse loop counts down.
# SUM-LABEL: func @diffe_total(%x: f64[?], %d_x: f64[?], %n: i64, %differet: f64) -> f64
# SUM-NOT:     alloc
# SUM:       {{^}}for.header.rev:
# SUM-NEXT:    %for.header.rev.iter = phi i64 [for.header.rev.for.body: %for.header.rev.index, for.end: %trip]
# SUM:         %for.header.rev.index = isub %for.header.rev.iter, 1
# SUM:         %[[D:[a-z0-9_.]+]] = load %d_x[%for.header.rev.index]
# SUM-NEXT:    %[[SUM:[a-z0-9_.]+]] = fadd %[[D]], %differet
# SUM-NEXT:    store %[[SUM]], %d_x[%for.header.rev.index]
# SUM-NOT:     alloc
@iz.kernel
def total(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        s += x[i]
    return s


# A product: d x[i] needs the partial product p before iteration i, a loop-carried value: it is taped,
# one element per header run (n + 1), stored in the forward loop, loaded in the reverse one.
# PRODUCT-LABEL: func @diffe_product(
# PRODUCT:         %[[SIZE:[a-z0-9_.]+]] = iadd %trip, 1
# PRODUCT-NEXT:    %tape.p = alloc f64[%[[SIZE]]]
# PRODUCT:       {{^}}for.header:
# PRODUCT:         %p = phi f64
# PRODUCT-NEXT:    store %p, %tape.p[%i]
# PRODUCT:       {{^}}for.header.rev.for.body:
# PRODUCT:         %[[P:[a-z0-9_.]+]] = load %tape.p[%for.header.rev.index]
# PRODUCT-NEXT:    %[[DX:[a-z0-9_.]+]] = fmul %d.p, %[[P]]
# PRODUCT:         store %{{[a-z0-9_.]+}}, %d_x[%for.header.rev.index]
@iz.kernel
def product(x: Array[f64], n: i64) -> f64:
    p = 1.0
    for i in range(n):
        p *= x[i]
    return p


# A branch inside a loop: the reverse branch recomputes the condition; only s (needed by s * x[i]) is
# taped.
# BRANCH-LABEL: func @diffe_clipped(
# BRANCH:         %tape.s = alloc f64[
# BRANCH-NOT:     alloc
# BRANCH:       {{^}}for.header.rev.if.end:
# BRANCH-NEXT:    %[[X:[a-z0-9_.]+]] = load %x[%for.header.rev.index]
# BRANCH-NEXT:    %[[C:[a-z0-9_.]+]] = fcmp.olt %[[X]], 1.0
# BRANCH-NEXT:    cbr %[[C]], if.end.rev.if.then, {{[a-z0-9_.]+}}
@iz.kernel
def clipped(x: Array[f64], n: i64) -> f64:
    s = 0.0
    for i in range(n):
        if x[i] < 1.0:
            s = s * x[i]
        else:
            s = s + 1.0
    return s


# A nested loop: exp(a[i, j]) is taped once per inner iteration, in a tape of rows * cols elements at
# i * cols + j; the reverse loops nest the other way round, both counting down.
# NESTED-LABEL: func @diffe_rows(%a: f64[?,?], %d_a: f64[?,?], %differet: f64) -> f64
# NESTED:         %[[ROWS:trip[a-z0-9_.]*]] = imax
# NESTED:         %[[COLS:trip[a-z0-9_.]*]] = imax
# NESTED-NEXT:    %[[SIZE:[a-z0-9_.]+]] = imul %[[ROWS]], %[[COLS]]
# NESTED-NEXT:    %tape.v = alloc f64[%[[SIZE]]]
# NESTED:         %[[E:[a-z0-9_.]+]] = exp %{{[a-z0-9_.]+}}
# NESTED-NEXT:    %[[AT:[a-z0-9_.]+]] = iadd %{{[a-z0-9_.]+}}, %j
# NESTED-NEXT:    store %[[E]], %tape.v[%[[AT]]]
# NESTED:       {{^}}for.header.rev:
# NESTED:         %for.header.rev.index = isub
# NESTED:         load %tape.v[
# NESTED:         store %{{[a-z0-9_.]+}}, %d_a[%for.header.rev.index.1, %for.header.rev.index]
# NESTED:       {{^}}for.header.rev.1:
# NESTED:         %for.header.rev.index.1 = isub
@iz.kernel
def rows(a: Array[f64, 2]) -> f64:
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            s += iz.exp(a[i, j])
    return s
