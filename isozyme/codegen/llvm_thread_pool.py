"""The thread pool that runs the `prange` loops of LLVM code on every core: one LLVM module per process.

    text = pool_ir()              # compiled once per process (`runtime/thread_pool.py`)
    state = pool_init()           # the mutex and condition variables (no thread yet); the state's address
    run(&state, task, ctx, n)     # task(ctx, 0) ... task(ctx, n - 1), on the caller and the pool's threads

The pool is written in LLVM IR over POSIX threads (`pthread_create`, a mutex and two condition variables,
opaque buffers of `SYNC_BYTES` each, initialized by `pthread_*_init`), so it needs no C compiler and runs
wherever the compiled kernels run. A kernel reaches it through the pool's state, whose address the runtime
writes into the kernel module's `parallel` slot (`llvm_parallel.py`); the state's first three words are
what a kernel reads: the address of `run`, the thread count (the most tasks a loop is split into) and the
least work worth a task (`TASK_WORK`).

On x86-64 a job carries the caller's floating-point control word (MXCSR: rounding, and the FTZ/DAZ bits a
kernel compiled with `fastmath=("ftz",)` sets), which each thread loads before it runs the job's tasks, so
a task computes in the caller's mode whichever thread runs it.

`run` posts the job to the pool's threads (started on first use, and more when the count grows; never
stopped: they wait on a condition variable between jobs) and takes part itself: every participant claims
the next task number until none is left, and `run` returns once every task has completed (a count of
completed tasks, signalled by whoever completes the last). It does not wait for threads that took no task:
on a busy machine, where a pool thread may not be scheduled for milliseconds, the caller runs the tasks
itself. A claim is a compare-and-swap of one word holding the job's generation (high half) and the next
task number (low half), so a thread that wakes late, from an earlier job, can claim nothing: it reads the
job's task, context and count under the mutex with its generation, and claims only while the word still
holds that generation. Which thread runs a task does not matter: a task writes only its own partial results
(`llvm_parallel.py`), which the caller combines in task order, so a result never depends on timing.

Between jobs a thread polls the job generation `SPIN` times (with the CPU's spin-wait hint) before it
sleeps, and the caller polls the completed count as long before it sleeps, so that loops in quick
succession hand over in about a microsecond instead of a wake-up through the kernel.

One job runs at a time: a `run` that finds the pool busy (a kernel called from several Python threads at
once, or a `prange` loop in a function called from a parallel loop) runs its tasks itself, in order. A
worker that starts between jobs must not miss the next one: it takes the job generation current when it
was spawned (`spawn_generation`, written under the mutex before `pthread_create`) as the one it has seen.
"""

from __future__ import annotations

SYNC_BYTES = 128
"""Room for a `pthread_mutex_t` or `pthread_cond_t` (40 and 48 bytes on Linux x86-64, 64 on macOS)."""

STATE_FIELDS = ("run", "threads", "task_work", "mutex", "wake", "done", "generation", "started", "job_task",
                "job_context", "job_tasks", "claim", "completed", "busy", "spawn_generation", "job_mxcsr")
"""The fields of the pool's state, in order: `run`'s address, the thread count and the least work worth a
task come first (a kernel reads them), the synchronization buffers, then the job."""

STATE_SYMBOL = "isozyme_pool_state"
"""The pool's state, a global of its module."""
INIT_SYMBOL = "isozyme_pool_init"

TASK_WORK = 40_000
"""The least estimated work (`llvm_parallel.iteration_cost` units, about an instruction each) worth a task of
its own, by default: 1,000 iterations of `out[i] = 2 x[i]` stay on the caller (handing work to another
thread costs microseconds), GMM's 1,000 points, each a loop nest over components and dimensions, get every
thread. The runtime may change it in the state (`thread_pool.set_task_work`, for tests)."""

SPIN = 2000
"""Polls of the job generation (and, by the caller, of the completed count) before sleeping: with the CPU's
spin-wait hint between polls, tens to a couple of hundred microseconds, so that loops in quick succession
(time steps, a gradient's forward and reverse loops) find the threads awake."""
SPIN_HINTS = {"x86_64": ("@llvm.x86.sse2.pause", ""), "i686": ("@llvm.x86.sse2.pause", ""),
              "aarch64": ("@llvm.aarch64.hint", "i32 1"), "arm64": ("@llvm.aarch64.hint", "i32 1")}
"""The CPU's spin-wait hint per target (x86 `pause`, AArch64 `yield`), as LLVM intrinsics and arguments."""
FP_CONTROL = ("x86_64",)
"""Targets whose floating-point control word (MXCSR) the pool hands from the caller to its threads."""

_WORDS = SYNC_BYTES // 8


def field(name: str) -> int:
    return STATE_FIELDS.index(name)


def pool_ir(triple: str = "") -> str:
    """The pool's LLVM module (module docstring) for the target `triple` (which spin-wait hint it uses)."""
    f = {name: index for index, name in enumerate(STATE_FIELDS)}
    hint = next((hint for arch, hint in SPIN_HINTS.items() if triple.startswith(arch)), None)
    pause = f"call void {hint[0]}({hint[1]})" if hint else "fence seq_cst"
    declare_hint = f"declare void {hint[0]}({hint[1].split()[0] if hint[1] else ''})" if hint else ""
    fp = any(triple.startswith(arch) for arch in FP_CONTROL)
    declare_fp = "declare void @llvm.x86.sse.stmxcsr(ptr)\ndeclare void @llvm.x86.sse.ldmxcsr(ptr)" if fp else ""
    sync = f"[{_WORDS} x i64]"

    def at(name: str) -> str:
        return f"getelementptr %State, ptr %s, i32 0, i32 {f[name]}"

    def fp_control(op: str) -> str:
        """The caller's MXCSR into the job (`stmxcsr`), or the job's into this thread's (`ldmxcsr`)."""
        return f"%fp.slot = {at('job_mxcsr')}\n  call void @llvm.x86.sse.{op}(ptr %fp.slot)\n  " if fp else ""

    def spin(label: str, before: str, word: str, condition: str, done: str, sleep: str) -> str:
        """Blocks `label`...: poll the pointer `%word` up to SPIN times (the spin-wait hint between polls)
        until `condition` (on `%polled.<label>`) holds, then go to `done`; else to `sleep`."""
        return f"""{label}:
  %count.{label} = phi i64 [ 0, %{before} ], [ %next.{label}, %{label}.again ]
  %polled.{label} = load atomic i64, ptr %{word} seq_cst, align 8
  %ready.{label} = {condition}
  br i1 %ready.{label}, label %{done}, label %{label}.more
{label}.more:
  %more.{label} = icmp slt i64 %count.{label}, {SPIN}
  br i1 %more.{label}, label %{label}.again, label %{sleep}
{label}.again:
  {pause}
  %next.{label} = add i64 %count.{label}, 1
  br label %{label}
"""
    return f"""
%State = type {{ ptr, i64, i64, {sync}, {sync}, {sync}, i64, i64, ptr, ptr, i64, i64, i64, i64, i64, i64 }}

@{STATE_SYMBOL} = global %State zeroinitializer, align 64

declare i32 @pthread_mutex_init(ptr, ptr)
declare i32 @pthread_cond_init(ptr, ptr)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_signal(ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
{declare_hint}
{declare_fp}

define ptr @{INIT_SYMBOL}() {{
entry:
  %s = getelementptr %State, ptr @{STATE_SYMBOL}, i32 0
  store %State zeroinitializer, ptr %s
  %mutex = {at('mutex')}
  %wake = {at('wake')}
  %done = {at('done')}
  call i32 @pthread_mutex_init(ptr %mutex, ptr null)
  call i32 @pthread_cond_init(ptr %wake, ptr null)
  call i32 @pthread_cond_init(ptr %done, ptr null)
  %run = {at('run')}
  store ptr @isozyme_pool_run, ptr %run
  %threads = {at('threads')}
  store i64 1, ptr %threads
  %work = {at('task_work')}
  store i64 {TASK_WORK}, ptr %work
  ret ptr %s
}}

; Tasks of job %g while it is the current job and tasks are left: a task number is claimed by a
; compare-and-swap of the claim word (the job's generation in the high half, the next task in the low).
define internal void @work(ptr %s, i64 %g, ptr %task, ptr %ctx, i64 %n) {{
entry:
  %claim = {at('claim')}
  %completed = {at('completed')}
  %mutex = {at('mutex')}
  %done = {at('done')}
  %ours = and i64 %g, 4294967295
  br label %look
look:
  %c = load atomic i64, ptr %claim seq_cst, align 8
  %cg = lshr i64 %c, 32
  %t = and i64 %c, 4294967295
  %same = icmp eq i64 %cg, %ours
  %left = icmp slt i64 %t, %n
  %open = and i1 %same, %left
  br i1 %open, label %take, label %exit
take:
  %c.next = add i64 %c, 1
  %swap = cmpxchg ptr %claim, i64 %c, i64 %c.next seq_cst seq_cst
  %won = extractvalue {{ i64, i1 }} %swap, 1
  br i1 %won, label %body, label %look
body:
  call void %task(ptr %ctx, i64 %t)
  %before = atomicrmw add ptr %completed, i64 1 seq_cst
  %count = add i64 %before, 1
  %last = icmp eq i64 %count, %n
  br i1 %last, label %signal, label %look
signal:
  call i32 @pthread_mutex_lock(ptr %mutex)
  call i32 @pthread_cond_signal(ptr %done)
  call i32 @pthread_mutex_unlock(ptr %mutex)
  br label %look
exit:
  ret void
}}

define internal ptr @worker(ptr %s) {{
entry:
  %mutex = {at('mutex')}
  %wake = {at('wake')}
  %generation = {at('generation')}
  %spawned = {at('spawn_generation')}
  %task.slot = {at('job_task')}
  %ctx.slot = {at('job_context')}
  %n.slot = {at('job_tasks')}
  call i32 @pthread_mutex_lock(ptr %mutex)
  %first = load i64, ptr %spawned
  call i32 @pthread_mutex_unlock(ptr %mutex)
  br label %wait
wait:
  %seen = phi i64 [ %first, %entry ], [ %current, %job.locked ]
  br label %spin
{spin("spin", "wait", "generation", "icmp ne i64 %polled.spin, %seen", "job.lock", "sleep.lock")}sleep.lock:
  call i32 @pthread_mutex_lock(ptr %mutex)
  br label %sleep.check
sleep.check:
  %again = load atomic i64, ptr %generation seq_cst, align 8
  %idle = icmp eq i64 %again, %seen
  br i1 %idle, label %sleep, label %job.locked
sleep:
  call i32 @pthread_cond_wait(ptr %wake, ptr %mutex)
  br label %sleep.check
job.lock:
  call i32 @pthread_mutex_lock(ptr %mutex)
  br label %job.locked
job.locked:
  %current = load atomic i64, ptr %generation seq_cst, align 8
  %task = load ptr, ptr %task.slot
  %ctx = load ptr, ptr %ctx.slot
  %n = load i64, ptr %n.slot
  {fp_control("ldmxcsr")}call i32 @pthread_mutex_unlock(ptr %mutex)
  call void @work(ptr %s, i64 %current, ptr %task, ptr %ctx, i64 %n)
  br label %wait
}}

define void @isozyme_pool_run(ptr %s, ptr %task, ptr %ctx, i64 %n) {{
entry:
  %busy = {at('busy')}
  %several = icmp sgt i64 %n, 1
  br i1 %several, label %claim.pool, label %alone
claim.pool:
  %claimed = cmpxchg ptr %busy, i64 0, i64 1 seq_cst seq_cst
  %ours = extractvalue {{ i64, i1 }} %claimed, 1
  br i1 %ours, label %start, label %alone
alone:
  br label %alone.loop
alone.loop:
  %t = phi i64 [ 0, %alone ], [ %t.next, %alone.body ]
  %alone.more = icmp slt i64 %t, %n
  br i1 %alone.more, label %alone.body, label %alone.exit
alone.body:
  call void %task(ptr %ctx, i64 %t)
  %t.next = add i64 %t, 1
  br label %alone.loop
alone.exit:
  ret void
start:
  %mutex = {at('mutex')}
  %wake = {at('wake')}
  %done = {at('done')}
  %generation = {at('generation')}
  %started = {at('started')}
  %spawned = {at('spawn_generation')}
  %completed = {at('completed')}
  %claim = {at('claim')}
  %handle = alloca i64
  call i32 @pthread_mutex_lock(ptr %mutex)
  %helpers = sub i64 %n, 1
  br label %spawn
spawn:
  %count = load i64, ptr %started
  %short = icmp slt i64 %count, %helpers
  br i1 %short, label %spawn.one, label %post
spawn.one:
  %gen.now = load i64, ptr %generation
  store i64 %gen.now, ptr %spawned
  %rc = call i32 @pthread_create(ptr %handle, ptr null, ptr @worker, ptr %s)
  %failed = icmp ne i32 %rc, 0
  br i1 %failed, label %post, label %spawned.ok
spawned.ok:
  %id = load i64, ptr %handle
  call i32 @pthread_detach(i64 %id)
  %count.next = add i64 %count, 1
  store i64 %count.next, ptr %started
  br label %spawn
post:
  %task.slot = {at('job_task')}
  store ptr %task, ptr %task.slot
  %ctx.slot = {at('job_context')}
  store ptr %ctx, ptr %ctx.slot
  %n.slot = {at('job_tasks')}
  store i64 %n, ptr %n.slot
  {fp_control("stmxcsr")}store atomic i64 0, ptr %completed seq_cst, align 8
  %gen = load i64, ptr %generation
  %g = add i64 %gen, 1
  store atomic i64 %g, ptr %generation seq_cst, align 8
  %g.low = and i64 %g, 4294967295
  %first.claim = shl i64 %g.low, 32
  store atomic i64 %first.claim, ptr %claim seq_cst, align 8
  call i32 @pthread_cond_broadcast(ptr %wake)
  call i32 @pthread_mutex_unlock(ptr %mutex)
  call void @work(ptr %s, i64 %g, ptr %task, ptr %ctx, i64 %n)
  br label %join.spin
{spin("join.spin", "post", "completed", "icmp sge i64 %polled.join.spin, %n", "released", "join.lock")}join.lock:
  call i32 @pthread_mutex_lock(ptr %mutex)
  br label %join
join:
  %finished = load atomic i64, ptr %completed seq_cst, align 8
  %open = icmp slt i64 %finished, %n
  br i1 %open, label %join.wait, label %joined
join.wait:
  call i32 @pthread_cond_wait(ptr %done, ptr %mutex)
  br label %join
joined:
  call i32 @pthread_mutex_unlock(ptr %mutex)
  br label %released
released:
  store atomic i64 0, ptr %busy seq_cst, align 8
  ret void
}}
"""
