# A value the forward pass stores into an array that nothing overwrites afterwards, at an element of its
# own in every iteration, is reloaded from that array by the reverse pass instead of taped (cache.py).
# RUN: isozyme ir %s:stored_sigmoid --stage grad-opt --activity dup,dup | filecheck %s --check-prefix=STORED
# RUN: isozyme ir %s:stored_textbook_sigmoid --stage grad-opt --activity dup,dup | filecheck %s --check-prefix=TEXTBOOK
# RUN: isozyme ir %s:overwritten --stage grad-opt --activity dup,dup | filecheck %s --check-prefix=OVERWRITTEN
# RUN: isozyme ir %s:same_element --stage grad-opt --activity dup,dup | filecheck %s --check-prefix=SAME
import isozyme as iz
from isozyme import Array, f64


# h[j, b] = sigmoid(z[j, b]): the reverse reloads y from h[j, b] for sigmoid' = y * (1 - y) and for the
# adjoint of y * y; no tape is allocated.
# STORED-LABEL: func @diffe_stored_sigmoid(
# STORED-NOT:     alloc
# STORED:         %[[Y:[a-z0-9_.]+]] = sigmoid
# STORED-NEXT:    store %[[Y]], %h[%{{[a-z0-9_.]+}}, %{{[a-z0-9_.]+}}]
# STORED-NOT:     alloc
# STORED:         %[[R:[a-z0-9_.]+]] = load %h[%{{[a-z0-9_.]+}}.rev.index{{[.0-9]*}}, %{{[a-z0-9_.]+}}.rev.index{{[.0-9]*}}]
# STORED:         fsub 1.0, %[[R]]
# STORED-NOT:     alloc
@iz.kernel
def stored_sigmoid(h: Array[f64, 2], z: Array[f64, 2]) -> f64:
    s = 0.0
    for j in range(z.shape[0]):
        for b in range(z.shape[1]):
            y = iz.sigmoid(z[j, b])
            h[j, b] = y
            s += y * y
    return s


# The textbook formula, as examples/mlp.py's bias_sigmoid writes it: O2 makes it a sigmoid before AD
# (instcombine), whose value is then reloaded from h; no tape of exp(-z).
# TEXTBOOK-LABEL: func @diffe_stored_textbook_sigmoid(
# TEXTBOOK-NOT:     alloc
# TEXTBOOK-NOT:     exp
# TEXTBOOK:         %[[Y:[a-z0-9_.]+]] = sigmoid
# TEXTBOOK-NOT:     alloc
# TEXTBOOK:         %[[R:[a-z0-9_.]+]] = load %h[%{{[a-z0-9_.]+}}.rev.index{{[.0-9]*}}, %{{[a-z0-9_.]+}}.rev.index{{[.0-9]*}}]
# TEXTBOOK:         fsub 1.0, %[[R]]
# TEXTBOOK-NOT:     alloc
@iz.kernel
def stored_textbook_sigmoid(h: Array[f64, 2], z: Array[f64, 2]) -> f64:
    for j in range(z.shape[0]):
        for b in range(z.shape[1]):
            h[j, b] = 1.0 / (1.0 + iz.exp(-z[j, b]))
    return 0.0


# Must not reload: a second loop overwrites h, so h[j, b] no longer holds y when the reverse runs. y is
# taped.
# OVERWRITTEN-LABEL: func @diffe_overwritten(
# OVERWRITTEN:         %[[TAPE:tape[a-z0-9_.]*]] = alloc f64
# OVERWRITTEN:         %[[Y:[a-z0-9_.]+]] = sigmoid
# OVERWRITTEN:         store %[[Y]], %[[TAPE]][
# OVERWRITTEN:         load %[[TAPE]][
@iz.kernel
def overwritten(h: Array[f64, 2], z: Array[f64, 2]) -> f64:
    s = 0.0
    for j in range(z.shape[0]):
        for b in range(z.shape[1]):
            y = iz.sigmoid(z[j, b])
            h[j, b] = y
            s += y * y
    for j in range(z.shape[0]):
        for b in range(z.shape[1]):
            h[j, b] = 0.5 * z[j, b]
    return s


# Must not reload: h[j] is rewritten in every iteration of the inner loop over b, so it holds only the
# last b's y. y is taped.
# SAME-LABEL: func @diffe_same_element(
# SAME:         %[[TAPE:tape[a-z0-9_.]*]] = alloc f64
# SAME:         %[[Y:[a-z0-9_.]+]] = sigmoid
# SAME:         store %[[Y]], %[[TAPE]][
# SAME:         load %[[TAPE]][
@iz.kernel
def same_element(h: Array[f64], z: Array[f64, 2]) -> f64:
    s = 0.0
    for j in range(z.shape[0]):
        for b in range(z.shape[1]):
            y = iz.sigmoid(z[j, b])
            h[j] = y
            s += y * y
    return s
