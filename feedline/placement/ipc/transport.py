"""Moving elements between processes without pickling their array payloads.

An element is pickled with protocol 5 and a ``buffer_callback``: NumPy arrays (and any
other object supporting out-of-band pickling) leave only a small header in the pickle; their
bytes are *buffers*. When the buffers are large (:data:`SHARED_MEMORY_THRESHOLD`), the sender
writes them into one anonymous shared-memory file (``memfd_create``) and passes its file
descriptor over the Unix socket; the receiver maps it and rebuilds the element with arrays
that *are* views of that mapping: the payload is written once, by the producer, and never
copied or unpickled by the consumer. Small buffers travel inline in the message.

Shared buffers are reused: the sender keeps up to :data:`MAX_SHARED_BUFFERS` of them, each
mapped once on both sides. The arrays the receiver hands out are views of one such buffer;
when the last of them is freed, the receiver notes the buffer as released
(:meth:`Channel.released`), the owner of the channel tells the sender
(:meth:`Channel.reclaim`), and the sender writes a later element into it: after warm-up,
sending an element costs one ``memcpy`` of its payload, with no allocation, page fault or
system call for the memory, and receiving it none at all. Arrays received are writable,
whichever way they came.

Anonymous memory has no name: nothing is ever created in ``/dev/shm``, and the memory is
freed by the kernel when the last mapping and descriptor are gone, whichever process dies
and however (``SIGKILL`` included). Arrays received are writable and stay valid as long as
any of them is alive. Platforms without ``memfd_create`` (macOS, Windows) send every
buffer inline.

Exceptions cross as themselves where they can (:class:`PackedError`): pickled by value when
their class lives in ``__main__`` or a closure, rebuilt as a
:class:`~feedline.core.error_records.RestoredError` of the closest built-in type otherwise.
"""

from __future__ import annotations

import collections
import mmap
import os
import pickle
import select
import socket
import struct
import weakref
from typing import Any

import numpy as np

from feedline.core.error_records import RestoredError, error_record, restore_error

SHARED_MEMORY_THRESHOLD = 64 * 1024
"""Bytes of array payload from which an element's buffers travel in shared memory."""

_ALIGNMENT = 64  # every buffer starts on a cache line (and any dtype's alignment)
_HAVE_MEMFD = hasattr(os, "memfd_create") and hasattr(socket, "send_fds")
_HEADER = struct.Struct("!Q")  # length of the message that follows
_HAVE_POLL = hasattr(select, "poll")

MAX_SHARED_BUFFERS = 16
"""Reusable shared buffers per channel; beyond them (the receiver holds on to that many
elements) each element gets a buffer of its own, freed with it."""
_GRANULE = 1 << 20  # buffer sizes are rounded up to this, so similar elements share them


class _SharedBuffer:
    """A sender's reusable shared buffer: its descriptor and its mapping."""

    __slots__ = ("fd", "id", "mapping", "size")

    def __init__(self, buffer_id: int, size: int) -> None:
        self.id = buffer_id
        self.fd = os.memfd_create("feedline", os.MFD_CLOEXEC)
        self.size = 0
        self.mapping: mmap.mmap | None = None
        self.resize(size)

    def resize(self, size: int) -> None:
        if self.mapping is not None:
            self.mapping.close()
        os.ftruncate(self.fd, size)
        self.size = size
        self.mapping = mmap.mmap(self.fd, size)

    def close(self) -> None:
        if self.mapping is not None:
            self.mapping.close()
            self.mapping = None
        os.close(self.fd)


def _aligned(offset: int) -> int:
    return (offset + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT


class _PartialMessage:
    """What :meth:`Channel.recv` has read of the message it is receiving."""

    __slots__ = ("body", "fds", "got", "prefix")

    def __init__(self) -> None:
        self.prefix = bytearray()
        self.fds: list[int] = []
        self.body: bytearray | None = None
        self.got = 0

    def reset(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.__init__()  # type: ignore[misc]


class Channel:
    """One end of a Unix socket pair that carries pickled objects.

    ``send(obj)`` and ``recv()`` move any picklable object; the array payloads of large ones
    go through shared memory, their descriptor passed with the message. One thread at a time
    may send, and one may receive.

    Args:
        sock: A connected ``AF_UNIX`` stream socket (from :meth:`pair`, or inherited).

    Example:
        >>> import numpy as np

from feedline.core.error_records import RestoredError, error_record, restore_error
        >>> left, right = Channel.pair()
        >>> left.send({"x": np.arange(100_000)})
        >>> received = right.recv()["x"]
        >>> int(received.sum()), received.flags.writeable
        (4999950000, True)
        >>> left.close(); right.close()
    """

    def __init__(self, sock: socket.socket) -> None:
        self._socket: socket.socket | None = sock
        self._shared = _HAVE_MEMFD and sock.family == socket.AF_UNIX
        # Sender side: reusable buffers, free or lent to the receiver.
        self._free: dict[int, _SharedBuffer] = {}
        self._lent: dict[int, _SharedBuffer] = {}
        # Receiver side: the mappings of the sender's buffers, and the ids of those whose
        # last array was freed (appended by finalizers, from any thread).
        self._mapped: dict[int, mmap.mmap] = {}
        self._released: collections.deque[int] = collections.deque()
        self._partial = _PartialMessage()

    @classmethod
    def pair(cls) -> tuple[Channel, Channel]:
        """Two connected ends."""
        left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        return cls(left), cls(right)

    @property
    def socket(self) -> socket.socket:
        """The socket (raises ``OSError`` once closed)."""
        if self._socket is None:
            raise OSError("the channel is closed")
        return self._socket

    def fileno(self) -> int:
        """The socket's descriptor (for ``multiprocessing.connection.wait``, ``select``)."""
        return self.socket.fileno()

    def poll(self) -> bool:
        """Whether a message (or the end of the stream) is waiting to be received."""
        if _HAVE_POLL:  # any descriptor number (select() stops at FD_SETSIZE, 1024)
            poller = select.poll()
            poller.register(self.socket, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([self.socket], [], [], 0)[0])

    def send(self, obj: Any) -> None:
        """Send ``obj``; its large buffers are written once, into shared memory."""
        buffers: list[pickle.PickleBuffer] = []
        header = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        raws = [buffer.raw() for buffer in buffers]
        total = sum(raw.nbytes for raw in raws)
        if not raws:
            self._send_message(pickle.dumps((header, None), protocol=5))
        elif not self._shared or total < SHARED_MEMORY_THRESHOLD:
            # bytearrays, not bytes: the arrays rebuilt on them are writable, like those in
            # shared memory (a later map may update its input in place).
            inline = [bytearray(raw) for raw in raws]
            self._send_message(pickle.dumps((header, inline), protocol=5))
        else:
            self._send_shared(header, raws)

    def _send_shared(self, header: bytes, raws: list[memoryview]) -> None:
        layout: list[tuple[int, int]] = []
        offset = 0
        for raw in raws:
            layout.append((offset, raw.nbytes))
            offset = _aligned(offset + raw.nbytes)
        size = max(offset, 1)
        buffer, new = self._lend(size)
        if buffer is None:  # every reusable buffer is held by the receiver: a one-off
            self._send_once(header, raws, layout, size)
            return
        assert buffer.mapping is not None
        target = memoryview(buffer.mapping)
        try:
            for (start, n), raw in zip(layout, raws, strict=True):
                target[start:start + n] = raw
        finally:
            target.release()
        body = pickle.dumps((header, ("pool", buffer.id, buffer.size, size, layout)),
                            protocol=5)
        self._send_message(body, buffer.fd if new else None)

    def _lend(self, size: int) -> tuple[_SharedBuffer | None, bool]:
        """A free buffer of at least ``size`` bytes (grown or made if needed), and whether
        the receiver must map it anew."""
        fitting = [b for b in self._free.values() if b.size >= size]
        new = False
        if fitting:
            buffer = min(fitting, key=lambda b: b.size)
        elif len(self._free) + len(self._lent) < MAX_SHARED_BUFFERS:
            buffer = _SharedBuffer(len(self._free) + len(self._lent),
                                   -(-size // _GRANULE) * _GRANULE)
            new = True
        elif self._free:
            buffer = max(self._free.values(), key=lambda b: b.size)
            buffer.resize(-(-size // _GRANULE) * _GRANULE)
            new = True
        else:
            return None, False
        self._free.pop(buffer.id, None)
        self._lent[buffer.id] = buffer
        return buffer, new

    def reclaim(self, buffer_ids: list[int]) -> None:
        """Sender side: the receiver released these buffers (see :meth:`released`)."""
        for buffer_id in buffer_ids:
            buffer = self._lent.pop(buffer_id, None)
            if buffer is not None:  # ids of a previous channel are ignored
                self._free[buffer_id] = buffer

    def released(self) -> list[int]:
        """Receiver side: buffers whose arrays have all been freed since the last call; the
        owner passes them to the sender's :meth:`reclaim`."""
        released = self._released
        return [released.popleft() for _ in range(len(released))]

    def _send_once(self, header: bytes, raws: list[memoryview],
                   layout: list[tuple[int, int]], size: int) -> None:
        fd = os.memfd_create("feedline", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            for (start, _), raw in zip(layout, raws, strict=True):
                written = 0
                while written < raw.nbytes:  # pwrite may write less than asked
                    written += os.pwrite(fd, raw[written:], start + written)
            self._send_message(pickle.dumps((header, ("once", size, layout)), protocol=5), fd)
        finally:
            os.close(fd)

    def _send_message(self, body: bytes, fd: int | None = None) -> None:
        sock = self.socket
        prefix = _HEADER.pack(len(body))
        if fd is None:
            if len(body) < 65536:  # one system call for the common small message
                sock.sendall(prefix + body)
            else:
                sock.sendall(prefix)
                sock.sendall(body)
            return
        # The descriptor rides on the length prefix: it arrives with the message's first byte.
        sent = socket.send_fds(sock, [prefix], [fd])
        if sent < len(prefix):
            sock.sendall(prefix[sent:])
        sock.sendall(body)

    def recv(self) -> Any:
        """The next object sent; ``EOFError`` when the other end is closed.

        An exception raised while a message is being read (``KeyboardInterrupt``) leaves
        what was read on the channel: the next call resumes the same message, so the stream
        stays in step and no message is lost.
        """
        sock, partial = self.socket, self._partial
        while len(partial.prefix) < _HEADER.size:
            data, received, _, _ = socket.recv_fds(sock, _HEADER.size - len(partial.prefix), 1)
            partial.fds.extend(received)
            if not data:
                partial.reset()
                raise EOFError("the other end of the channel is closed")
            partial.prefix += data
        if partial.body is None:
            partial.body = bytearray(_HEADER.unpack(partial.prefix)[0])
        view = memoryview(partial.body)
        while partial.got < len(view):
            n = sock.recv_into(view[partial.got:])
            if n == 0:
                partial.reset()
                raise EOFError("the other end of the channel closed in the middle of a message")
            partial.got += n
        view.release()
        element = self._decode(partial.body, partial.fds)
        partial.reset()  # only now: an interrupted decode is redone from the same bytes
        return element

    def _decode(self, body: bytearray, fds: list[int]) -> Any:
        header, payload = pickle.loads(body)
        if payload is None:
            return pickle.loads(header)
        if isinstance(payload, list):
            return pickle.loads(header, buffers=payload)
        kind = payload[0]
        if len(fds) > 1 or (kind == "once" and not fds):
            raise EOFError("a shared-memory message arrived without its descriptor")
        if kind == "once":
            _, size, layout = payload
            # The arrays rebuilt are views of the mapping: it is unmapped with the last.
            whole = memoryview(mmap.mmap(fds[0], size))
            return pickle.loads(header, buffers=[whole[a:a + n] for a, n in layout])
        _, buffer_id, mapped_size, size, layout = payload
        if fds:  # a buffer new to this side (or grown): map it once, keep the mapping
            self._mapped[buffer_id] = mmap.mmap(fds[0], mapped_size)
        mapping = self._mapped.get(buffer_id)
        if mapping is None:
            raise EOFError(f"shared buffer {buffer_id} was never sent")
        # ``base`` is the one object every array of this element is a view of: when it is
        # freed, the buffer is free for the sender to reuse.
        base = np.frombuffer(mapping, dtype=np.uint8, count=size)
        finalizer = weakref.finalize(base, self._released.append, buffer_id)
        finalizer.atexit = False
        return pickle.loads(header, buffers=[base[a:a + n] for a, n in layout])

    def close(self) -> None:
        """Close the socket and the sender's buffers (arrays received stay valid). Idempotent."""
        sock, self._socket = self._socket, None
        if sock is not None:
            sock.close()
        for buffer in [*self._free.values(), *self._lent.values()]:
            buffer.close()
        self._free.clear()
        self._lent.clear()
        self._mapped.clear()
        self._partial.reset()


class PackedError:
    """An exception on its way to another process, rebuilt there as its own class if it can.

    The exception is pickled with cloudpickle, so a class defined in the user's script
    (``__main__``, which a worker process does not have) or inside a function travels by
    value; in the process it came from, cloudpickle gives back the original class, so
    ``except MyError`` catches it. A :func:`~feedline.core.error_records.error_record` goes
    with it: when the exception does not pickle (it holds a lock) or cannot be rebuilt (its
    ``__init__`` needs other arguments than it keeps), :meth:`unpack` builds a
    :class:`~feedline.core.error_records.RestoredError` of the closest built-in type.

    Args:
        error: The exception (its notes travel with it).
        trace: The sender's traceback text: :meth:`unpack` adds it as a note, since a
            traceback does not pickle.

    Example:
        >>> packed = pickle.loads(pickle.dumps(PackedError(KeyError("k"), "Traceback ...")))
        >>> error = packed.unpack("raised in a worker:")
        >>> type(error).__name__, error.__notes__[-1].splitlines()
        ('KeyError', ['raised in a worker:', 'Traceback ...'])
    """

    __slots__ = ("blob", "record", "trace")

    def __init__(self, error: BaseException, trace: str) -> None:
        self.record = error_record(error)
        self.trace = trace
        self.blob: bytes | None = None
        if not isinstance(error, RestoredError):  # those rebuild from the record alone
            try:
                import cloudpickle

                self.blob = cloudpickle.dumps(error, protocol=5)
            except Exception:  # noqa: BLE001, S110 - whatever pickling raises: the record goes
                pass

    def __getstate__(self) -> tuple[bytes | None, dict[str, Any], str]:
        return self.blob, self.record, self.trace

    def __setstate__(self, state: tuple[bytes | None, dict[str, Any], str]) -> None:
        self.blob, self.record, self.trace = state

    def unpack(self, where: str) -> BaseException:
        """The exception, as its own class where it can be rebuilt, with the note
        ``where`` followed by the sender's traceback."""
        note = f"{where}\n{self.trace}" if self.trace else where
        if self.blob is not None:
            try:
                error = pickle.loads(self.blob)
            except Exception:  # noqa: BLE001 - cannot be rebuilt here: the record
                error = None
            if isinstance(error, BaseException):
                error.add_note(note)
                return error
        return restore_error(self.record, note=note)
