# Arrays: loads and stores with one i64 index per dimension, local arrays as `alloc`, shapes as `dim`,
# constant negative indices counted from the end.
# RUN: isozyme ir %s | filecheck %s
import isozyme as iz
from isozyme import Array, f32, f64, i32, i64


# CHECK-LABEL: func @matvec(%y: f64[?], %A: f64[?,?], %x: f64[?]) {
# CHECK:         %[[ROWS:[a-z0-9_.]+]] = dim %A, 0
# CHECK-NEXT:    %[[COLS:[a-z0-9_.]+]] = dim %A, 1
# CHECK:         %{{[a-z0-9_.]+}} = load %A[%i, %j]
@iz.kernel
def matvec(y: Array[f64], A: Array[f64, 2], x: Array[f64]):
    rows = A.shape[0]
    cols = A.shape[1]
    for i in range(rows):
        acc = 0.0
        for j in range(cols):
            acc += A[i, j] * x[j]
        y[i] = acc


# A zeroed 2-D local array, an f32 store narrowing an f64 value, an i32 index widened, x[-1].
# CHECK-LABEL: func @locals(%n: i64, %k: i32, %x: f32[?]) -> f64 {
# CHECK-NEXT:  entry:
# CHECK-NEXT:    %tmp = alloc f64[%n, 2] zeroed
# CHECK-NEXT:    %[[K:[a-z0-9_.]+]] = sext %k to i64
# CHECK-NEXT:    store 1.5, %tmp[%[[K]], 1]
# CHECK-NEXT:    %[[V:[a-z0-9_.]+]] = load %tmp[0, 1]
# CHECK-NEXT:    %[[N:[a-z0-9_.]+]] = fptrunc %[[V]] to f32
# CHECK-NEXT:    store %[[N]], %x[0]
# CHECK-NEXT:    %[[END:[a-z0-9_.]+]] = dim %x, 0
# CHECK-NEXT:    %[[LAST:[a-z0-9_.]+]] = iadd %[[END]], -1
# CHECK-NEXT:    %{{[a-z0-9_.]+}} = load %x[%[[LAST]]]
# CHECK:         %scratch = alloc i64[%n]
# CHECK-NOT:     zeroed
@iz.kernel
def locals(n: i64, k: i32, x: Array[f32]) -> f64:
    tmp = iz.zeros((n, 2), f64)
    tmp[k, 1] = 1.5
    x[0] = tmp[0, 1]
    last = x[-1]
    scratch = iz.empty(n, i64)
    scratch[0] = 7
    return last + scratch[0]


# Augmented assignment on an element loads, computes and stores once, with the index computed once.
# CHECK-LABEL: func @bump(%x: f64[?], %i: i64) {
# CHECK-NEXT:  entry:
# CHECK-NEXT:    %[[J:[a-z0-9_.]+]] = iadd %i, 1
# CHECK-NEXT:    %[[OLD:[a-z0-9_.]+]] = load %x[%[[J]]]
# CHECK-NEXT:    %[[NEW:[a-z0-9_.]+]] = fadd %[[OLD]], 2.0
# CHECK-NEXT:    store %[[NEW]], %x[%[[J]]]
# CHECK-NEXT:    ret
@iz.kernel
def bump(x: Array[f64], i: i64):
    x[i + 1] += 2
