"""The element channel between processes: exact values, shared memory for large arrays."""

from __future__ import annotations

import mmap
import os
import sys
from collections import namedtuple

import numpy as np
import pytest

from feedline.placement.ipc import transport
from feedline.placement.ipc.transport import SHARED_MEMORY_THRESHOLD, Channel

Pair = namedtuple("Pair", "a b")


@pytest.fixture
def channels():
    sender, receiver = Channel.pair()
    yield sender, receiver
    sender.close()
    receiver.close()


def _shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@pytest.mark.parametrize("element", [
    3, b"bytes", (np.int64(5), {"k": np.float32(1.5)}),
    {"big": np.arange(SHARED_MEMORY_THRESHOLD, dtype=np.int64).reshape(-1, 8),
     "small": np.arange(3), "text": np.array([b"a", b"bc"], dtype=object)},
    Pair(np.zeros((0, 3)), np.ones((300, 300), np.float16)),
])
def test_round_trip_is_exact(channels, element):
    sender, receiver = channels
    sender.send(element)
    received = receiver.recv()
    assert type(received) is type(element)
    flat_sent = element.values() if isinstance(element, dict) else (
        element if isinstance(element, tuple) else [element])
    flat_received = received.values() if isinstance(received, dict) else (
        received if isinstance(received, tuple) else [received])
    for sent, got in zip(flat_sent, flat_received, strict=True):
        if isinstance(sent, np.ndarray):
            assert got.dtype == sent.dtype and got.shape == sent.shape
            np.testing.assert_array_equal(got, sent)
        else:
            assert got == sent


@pytest.mark.skipif(not transport._HAVE_MEMFD, reason="no memfd_create on this platform")
def test_large_arrays_arrive_as_writable_views_of_shared_memory(channels):
    sender, receiver = channels
    before = _shm_entries()
    array = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)
    sender.send((array, array[:4, ::2]))  # a strided view travels too (in the pickle)
    got, strided = receiver.recv()
    np.testing.assert_array_equal(got, array)
    np.testing.assert_array_equal(strided, array[:4, ::2])
    # The payload was not unpickled into fresh memory: the array's buffer is the mapping.
    owner = got
    while isinstance(owner, np.ndarray):
        owner = owner.base
    assert isinstance(owner, memoryview) and isinstance(owner.obj, mmap.mmap)
    assert got.flags.writeable
    got[0, 0] = -1.0  # writable, and the sender's array is untouched
    assert array[0, 0] == 0.0
    assert _shm_entries() == before  # anonymous memory: no /dev/shm entry, ever


def test_eof_when_the_other_end_closes(channels):
    sender, receiver = channels
    sender.close()
    with pytest.raises(EOFError):
        receiver.recv()


def test_platform_without_memfd_sends_inline(channels, monkeypatch):
    monkeypatch.setattr(transport, "_HAVE_MEMFD", False)
    sender, receiver = Channel.pair()
    # Large enough for shared memory, small enough for the socket's buffer (one thread).
    monkeypatch.setattr(transport, "SHARED_MEMORY_THRESHOLD", 1024)
    array = np.arange(4096)
    sender.send(array)
    np.testing.assert_array_equal(receiver.recv(), array)
    sender.close()
    receiver.close()


@pytest.mark.skipif(sys.platform != "linux", reason="Linux /proc")
def test_close_releases_every_descriptor():
    opened = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        sender, receiver = Channel.pair()
        sender.send(np.zeros(SHARED_MEMORY_THRESHOLD))
        receiver.recv()  # dropped at once: its mapping goes with it
        sender.close()
        receiver.close()
    assert len(os.listdir("/proc/self/fd")) == opened


@pytest.mark.skipif(not transport._HAVE_MEMFD, reason="no memfd_create on this platform")
def test_shared_buffers_are_reused_once_the_receivers_arrays_are_freed(channels):
    sender, receiver = channels
    big = np.ones(SHARED_MEMORY_THRESHOLD, np.float64)
    sender.send(big)
    first = receiver.recv()
    assert receiver.released() == []  # still alive: the buffer is lent
    sender.send(big * 2)
    second = receiver.recv()  # a second buffer: the first is in use
    assert sorted(sender._lent) == [0, 1]
    del first
    assert receiver.released() == [0]
    sender.reclaim([0])
    sender.send(big * 3)
    third = receiver.recv()
    assert sorted(sender._lent) == [0, 1] and not sender._free  # buffer 0 again
    np.testing.assert_array_equal(second, big * 2)  # untouched by the reuse
    np.testing.assert_array_equal(third, big * 3)
    sender.reclaim([7])  # unknown ids (a previous channel's) are ignored


@pytest.mark.skipif(not transport._HAVE_MEMFD, reason="no memfd_create on this platform")
def test_a_receiver_holding_every_buffer_gets_one_off_buffers(channels, monkeypatch):
    monkeypatch.setattr(transport, "MAX_SHARED_BUFFERS", 2)
    sender, receiver = channels
    held = []
    for k in range(4):
        sender.send(np.full(SHARED_MEMORY_THRESHOLD, k, np.int32))
        held.append(receiver.recv())
    assert len(sender._lent) == 2
    assert [int(a[0]) for a in held] == [0, 1, 2, 3]


@pytest.mark.skipif(not transport._HAVE_MEMFD, reason="no memfd_create on this platform")
def test_a_larger_element_grows_a_free_buffer(channels, monkeypatch):
    monkeypatch.setattr(transport, "MAX_SHARED_BUFFERS", 1)
    sender, receiver = channels
    sender.send(np.zeros(SHARED_MEMORY_THRESHOLD, np.uint8))
    receiver.recv()  # freed at once
    sender.reclaim(receiver.released())
    large = np.arange(3 << 20, dtype=np.uint8)
    sender.send(large)
    np.testing.assert_array_equal(receiver.recv(), large)
    assert sender._lent[0].size >= large.nbytes


def test_a_packed_snapshot_crosses_out_of_band_and_unpacks_only_when_asked(channels):
    from feedline.execution.positions import PackedState, PositionTracker, initial_position

    state = {"type": "shuffle", "buffer": [b"r%05d" % i * 20 for i in range(2000)]}
    sender, receiver = channels
    sender.send(("item", 1, 0, False, 7, (1, PackedState(state))))
    *_, (at, packed) = receiver.recv()
    assert isinstance(packed, PackedState)  # nothing unpickled on arrival
    tracker = PositionTracker(initial_position({"type": "shuffle", "buffer": []}))
    tracker.add_snapshot((at, packed))
    tracker.handed_out(0)
    saved = tracker.state([])
    assert saved == {"at": 1, "next": 1, "done": [], "errors": [], "input": state}
    assert tracker.state([])["input"] is saved["input"]  # unpacked once
