"""The process's thread pool for the `prange` loops of LLVM code, and the thread count.

    iz.set_num_threads(4)      # tasks per parallel loop from the next call on (1: serial)
    iz.get_num_threads()

The pool (`codegen/llvm_thread_pool.py`) is compiled through MCJIT when the first module with threaded
loops is loaded (a warm start of such a kernel from the disk cache therefore loads LLVM, about 50 ms once
per process), which then gets the pool's address in its slot (`attach`). The engine holding the pool's
code is never freed, not even by the interpreter's teardown: the pool's threads may still be polling.
Its threads start on the first loop that runs with more than one task and wait between jobs; compiled code
runs without the GIL (ctypes releases it), so they run beside Python threads too.

The thread count is `ISOZYME_NUM_THREADS` when the pool is made (a positive integer, else a ValueError
naming the variable), by default the CPUs this process may run on (`os.sched_getaffinity`). A loop is split
into that many tasks (at most `MAX_TASKS`, and one per `TASK_WORK` units of estimated work, so a small loop
stays on the caller), so a result depends on the count (how the sums are grouped) and never on timing; a
count of 1 gives the serial loop's result.

After `fork`, the child has none of the parent's threads: its pool is reset (no thread, the same count)
and starts new ones when needed.
"""

from __future__ import annotations

import ctypes
import os
import threading

from isozyme.codegen.abi import MAX_TASKS
from isozyme.codegen.llvm_thread_pool import INIT_SYMBOL, STATE_FIELDS

_lock = threading.Lock()
_state: int | None = None
_init: ctypes._CFuncPtr | None = None  # type: ignore[name-defined]
_threads: int | None = None
_task_work: int | None = None


def default_threads() -> int:
    """`ISOZYME_NUM_THREADS`, else the CPUs this process may use."""
    text = os.environ.get("ISOZYME_NUM_THREADS", "").strip()
    if text:
        try:
            count = int(text)
        except ValueError:
            count = 0
        if count < 1:
            raise ValueError(f"ISOZYME_NUM_THREADS must be a positive integer, not {text!r}")
        return count
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _threads_word() -> ctypes.c_int64:
    assert _state is not None
    return ctypes.c_int64.from_address(_state + 8 * STATE_FIELDS.index("threads"))


def state() -> int:
    """The pool's state address (compiling the pool on first use)."""
    global _state, _init, _threads
    with _lock:
        if _state is None:
            import llvmlite.binding as llvm

            from isozyme.codegen.llvm_thread_pool import pool_ir
            from isozyme.runtime import llvm_jit

            module = llvm_jit.optimize(llvm_jit.prepare(pool_ir(llvm.get_process_triple())))
            address = llvm_jit.load_object(llvm_jit.emit_object(module), [INIT_SYMBOL])[INIT_SYMBOL]
            # The pool's threads run its code until the process ends: its engine must outlive the
            # interpreter's teardown, which would otherwise free the engine and the code with it.
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(llvm_jit.host().engine))
            _init = ctypes.CFUNCTYPE(ctypes.c_void_p)(address)
            _state = _init()
            if _threads is None:
                _threads = default_threads()
            _threads_word().value = min(_threads, MAX_TASKS)
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=_reset_in_child)
        return _state


def attach(slot_function_address: int) -> None:
    """Point a loaded module's slot (`ptr slot()` at this address) at the pool."""
    slot = ctypes.CFUNCTYPE(ctypes.c_void_p)(slot_function_address)()
    ctypes.c_void_p.from_address(slot).value = state()


def set_num_threads(count: int) -> None:
    """Split each parallel loop into `count` tasks from the next call on (1: run them serially)."""
    global _threads
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"set_num_threads: the thread count must be a positive int, not {count!r}")
    with _lock:
        _threads = count
        if _state is not None:
            _threads_word().value = min(count, MAX_TASKS)


def set_task_work(units: int | None) -> None:
    """The least estimated work worth a task (`codegen/llvm_thread_pool.TASK_WORK` when None); 1 splits
    every loop into as many tasks as there are threads (tests)."""
    global _task_work
    _task_work = units
    _write_task_work()


def _write_task_work() -> None:
    from isozyme.codegen.llvm_thread_pool import TASK_WORK

    ctypes.c_int64.from_address(state() + 8 * STATE_FIELDS.index("task_work")).value = _task_work or TASK_WORK


def get_num_threads() -> int:
    """The tasks each parallel loop is split into (`set_num_threads`, else `default_threads()`)."""
    return min(_threads if _threads is not None else default_threads(), MAX_TASKS)


def _reset_in_child() -> None:
    """The parent's threads do not exist here: a new pool state (its mutex and conditions too)."""
    global _lock
    _lock = threading.Lock()
    if _state is not None and _init is not None:
        _init()
        _threads_word().value = min(_threads or 1, MAX_TASKS)
        if _task_work is not None:
            _write_task_work()
