"""Setting the arguments of an OpenCL program's kernels (`runtime/opencl_launches.KernelArguments`): each
kernel's arguments are set where they differ from its previous launch, and no others. A fake kernel records
what is set, so no device is needed; the calls on real devices are `test_opencl_replay.py`'s."""

from __future__ import annotations

import numpy as np

from isozyme.runtime.opencl_launches import KernelArguments


class Recorder:
    """A kernel that records each argument set, a numpy scalar by its bytes as pyopencl's kernels take it."""

    def __init__(self) -> None:
        self.set: list[tuple[int, object]] = []
        self.values: dict[int, object] = {}

    def set_arg(self, index: int, value: object) -> None:
        self.set.append((index, value))
        self.values[index] = value

    def _set_arg_buf(self, index: int, value: np.generic) -> None:
        self.set_arg(index, value)

    def take(self) -> list[int]:
        indices = [index for index, _ in self.set]
        self.set.clear()
        return indices


def test_a_kernel_sets_its_arguments_once_and_then_only_those_that_changed():
    arguments = KernelArguments()
    buffers = [object() for _ in range(4)]
    first = arguments.rebase(None, [buffers[0], np.int64(10), buffers[1], np.float64(2.5)])
    rest = [np.int64(7)]
    kernel = Recorder()
    arguments.set(kernel, first, rest)
    assert kernel.take() == [0, 1, 2, 3, 4]
    arguments.set(kernel, first, rest)
    assert kernel.take() == []
    # equal arguments in new objects (bits compared): the same list, nothing set
    again = arguments.rebase(first, [buffers[0], np.int64(10), buffers[1], np.float64(2.5)])
    assert again is first
    arguments.set(kernel, again, rest)
    assert kernel.take() == []
    # another buffer at 2 and -0.0 after 0.0 at 3 (equal, not the same bits): those two, in a kernel launched
    # with the list before, and in one never launched, all of them
    before = arguments.rebase(first, [buffers[0], np.int64(10), buffers[1], np.float64(0.0)])
    after = arguments.rebase(before, [buffers[0], np.int64(10), buffers[2], np.float64(-0.0)])
    assert after is not before
    arguments.set(kernel, before, rest)
    assert kernel.take() == [3]
    arguments.set(kernel, after, rest)
    assert kernel.take() == [2, 3]
    assert kernel.values[2] is buffers[2] and np.signbit(kernel.values[3])
    fresh = Recorder()
    arguments.set(fresh, after, rest)
    assert fresh.take() == [0, 1, 2, 3, 4]


def test_a_kernel_last_launched_before_several_changes_compares_every_argument():
    arguments = KernelArguments()
    buffers = [object() for _ in range(5)]
    lists = [arguments.rebase(None, [buffers[0], buffers[1], np.int64(3)])]
    early, late = Recorder(), Recorder()
    arguments.set(early, lists[0], [])
    arguments.set(late, lists[0], [])
    lists.append(arguments.rebase(lists[0], [buffers[2], buffers[1], np.int64(3)]))
    arguments.set(late, lists[1], [])
    lists.append(arguments.rebase(lists[1], [buffers[2], buffers[3], np.int64(4)]))
    # `late` saw the list before the last change: the change's positions; `early` two changes back: both
    # changes' positions, found by comparing
    for kernel, expected in ((late, [1, 2]), (early, [0, 1, 2])):
        kernel.take()
        arguments.set(kernel, lists[2], [])
        assert kernel.take() == expected
        assert [kernel.values[i] for i in range(3)] == lists[2]


def test_the_rest_of_a_command_is_compared_apart_from_the_common_arguments():
    arguments = KernelArguments()
    common = arguments.rebase(None, [object(), np.int64(1)])
    kernel = Recorder()
    arguments.set(kernel, common, [np.int64(5), np.int64(6)])
    kernel.take()
    arguments.set(kernel, common, [np.int64(5), np.int64(8)])
    assert kernel.take() == [3]
    changed = arguments.rebase(common, [object(), np.int64(1)])
    arguments.set(kernel, changed, [np.int64(9), np.int64(8)])
    assert kernel.take() == [0, 2]
