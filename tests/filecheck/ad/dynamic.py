# Reverse mode beyond counted loops (issue 7): diffe_f right after AD (`--stage grad`, opt=none, so the
# slots and tapes are still in memory and every push, pop and call can be seen).
# RUN: isozyme ir %s:running_product --stage grad --activity dup -O none | filecheck %s --check-prefix=WHILE
# RUN: isozyme ir %s:fresh_scratch --stage grad --activity dup -O none | filecheck %s --check-prefix=SCRATCH
# RUN: isozyme ir %s:stepped --stage grad --activity dup,const -O none | filecheck %s --check-prefix=SPLIT
# RUN: isozyme ir %s:clipped_norm --stage grad --activity dup -O none | filecheck %s --check-prefix=RULE
import isozyme as iz
from isozyme import Array, f64, i64


# A while loop: its trip count is unknown before it runs. p is pushed on a growable stack tape at every
# run of the header (grow, then store at the run count), the exit records the counter (%while.header.count)
# and the reverse loop counts down from it; the body's reverse reads the top of the stack, the header's
# reverse pops it.
# WHILE-LABEL: func @diffe_running_product(%x: f64[?], %d_x: f64[?], %differet: f64) -> f64 argmemonly {
# WHILE:         %tape.p = alloc f64[16] growable
# WHILE:         %while.header.runs = alloc i64[1]
# WHILE:       {{^}}while.header:
# WHILE:         %[[RUN:[a-z0-9_.]+]] = load %while.header.runs[0]
# WHILE-NEXT:    %[[NEED:[a-z0-9_.]+]] = iadd %[[RUN]], 1
# WHILE-NEXT:    grow %tape.{{[ip]}}, %[[NEED]]
# WHILE:         grow %tape.p, %{{[a-z0-9_.]+}}
# WHILE-NEXT:    store %p, %tape.p[%{{[a-z0-9_.]+}}]
# WHILE:         store %{{[a-z0-9_.]+}}, %while.header.runs[0]
# WHILE-NEXT:    cbr
# WHILE:         %while.header.count = phi i64
# WHILE:       {{^}}while.body.rev:
# WHILE:         %[[RUNS:[a-z0-9_.]+]] = load %while.header.runs[0]
# WHILE-NEXT:    %[[TOP:[a-z0-9_.]+]] = isub %[[RUNS]], 1
# WHILE-NEXT:    %{{[a-z0-9_.]+}} = load %tape.p[%[[TOP]]]
# WHILE:       {{^}}while.header.rev:
# WHILE:         %[[NOW:[a-z0-9_.]+]] = load %while.header.runs[0]
# WHILE-NEXT:    %[[POPPED:[a-z0-9_.]+]] = isub %[[NOW]], 1
# WHILE-NEXT:    store %[[POPPED]], %while.header.runs[0]
@iz.kernel
def running_product(x: Array[f64]) -> f64:
    p = 1.0
    i = 0
    while i < len(x) and p < 4.0:
        p = p * x[i]
        i += 1
    return p


# A fresh local array in every iteration: one shadow in the entry block, zeroed again by the reverse of
# each allocation (t[2] is read before it is written: its adjoint must not leak into the previous run). Its
# flag `private` says so: zero at the start and end of each run (OpenCL gives each work item a copy).
# SCRATCH-LABEL: func @diffe_fresh_scratch(
# SCRATCH:         %d_t = alloc f64[%{{[a-z0-9_.]+}}] private zeroed
# SCRATCH:       {{^}}for.body.rev:
# SCRATCH:       {{^}}for.body.rev.zero0.body:
# SCRATCH-NEXT:    store 0.0, %d_t[%zero.i0]
@iz.kernel
def fresh_scratch(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        t = iz.zeros(3, f64)
        t[0] = x[i] * x[i]
        t[1] = iz.sin(t[0]) + t[2]
        t[2] = t[1] * x[i]
        s += t[2]
    return s


# Split mode: a kernel that is not inlined and overwrites its argument. The forward pass calls
# augmented_relax.0, which tapes u (a slice of the growable tape per run of the loop body); the reverse
# calls reverse_relax.0 with u's extents, the tape and the run being reversed.
# SPLIT-LABEL: func @diffe_stepped(%u: f64[?], %d_u: f64[?], %steps: i64, %differet: f64) -> f64
# SPLIT:         %tape.u = alloc f64[16] growable
# SPLIT:         grow %tape.u, %{{[a-z0-9_.]+}}
# SPLIT-NEXT:    call @augmented_relax.0(%u, %tape.u, %{{[a-z0-9_.]+}})
# SPLIT:         call @reverse_relax.0(%{{[a-z0-9_.]+}}, %d_u, %tape.u, %{{[a-z0-9_.]+}})
# SPLIT-LABEL: func @augmented_relax.0(%u: f64[?], %tape.u: f64[?], %run: i64)
# SPLIT:         call @relax(%u)
# SPLIT-LABEL: func @diffe_relax(%u: f64[?], %d_u: f64[?]) argmemonly noinline split
# SPLIT-LABEL: func @relax(%u: f64[?]) argmemonly noinline vjp.diffe_relax
# SPLIT-LABEL: func @reverse_relax.0(%u.shape0: i64, %d_u: f64[?], %tape.u: f64[?], %run: i64) argmemonly noinline
# SPLIT:         %u.at_call = alloc f64[%u.shape0]
# SPLIT:         call @diffe_relax(%u.at_call, %d_u)
@iz.kernel(inline=False)
def relax(u: Array[f64]) -> None:
    for i in range(1, len(u) - 1):
        u[i] = 0.5 * u[i] + 0.25 * iz.sin(u[i - 1] + u[i + 1])


@iz.kernel
def stepped(u: Array[f64], steps: i64) -> f64:
    for _ in range(steps):
        relax(u)
    return u[0] * u[len(u) - 1] + u[1]


# A custom reverse rule: the call stays a call, its reverse is a call of the rule with the seed.
# RULE-LABEL: func @diffe_clipped_norm(%x: f64[?], %d_x: f64[?], %differet: f64) -> f64
# RULE:         %{{[a-z0-9_.]+}} = call @safe_norm(%x)
# RULE:         call @safe_norm_vjp(%x, %d_x, %{{[a-z0-9_.]+}})
# RULE-LABEL: func @safe_norm(%x: f64[?]) -> f64 {{.*}}noinline {{.*}}vjp.safe_norm_vjp
@iz.kernel
def safe_norm(x: Array[f64]) -> f64:
    s = 0.0
    for i in range(len(x)):
        s += x[i] * x[i]
    return iz.sqrt(s)


@safe_norm.defvjp
@iz.kernel
def safe_norm_vjp(x: Array[f64], d_x: Array[f64], differet: f64) -> None:
    r = safe_norm(x)
    if r > 0.0:
        for i in range(len(x)):
            d_x[i] += differet * x[i] / r


@iz.kernel
def clipped_norm(x: Array[f64]) -> f64:
    return min(safe_norm(x), 1.0)
