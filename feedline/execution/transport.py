"""Moving elements between processes without pickling their array payloads.

An element is pickled with protocol 5 and a ``buffer_callback``: NumPy arrays (and any
other object supporting out-of-band pickling) leave only a small header in the pickle; their
bytes are *buffers*. When the buffers are large (:data:`SHARED_MEMORY_THRESHOLD`), the sender
writes them into one anonymous shared-memory file (``memfd_create``) and passes its file
descriptor over the Unix socket; the receiver maps it and rebuilds the element with arrays
that *are* views of that mapping: the payload is written once, by the producer, and never
copied or unpickled by the consumer. Small buffers travel inline in the message.

Anonymous memory has no name: nothing is ever created in ``/dev/shm``, and the memory is
freed by the kernel when the last mapping and descriptor are gone, whichever process dies
and however (``SIGKILL`` included). Arrays received are writable and stay valid as long as
any of them is alive. Platforms without ``memfd_create`` (macOS, Windows) send every
buffer inline.
"""

from __future__ import annotations

import mmap
import os
import pickle
import socket
from multiprocessing.connection import Connection
from typing import Any

SHARED_MEMORY_THRESHOLD = 64 * 1024
"""Bytes of array payload from which an element's buffers travel in shared memory."""

_ALIGNMENT = 64  # every buffer starts on a cache line (and any dtype's alignment)
_HAVE_MEMFD = hasattr(os, "memfd_create") and hasattr(socket, "send_fds")


def _aligned(offset: int) -> int:
    return (offset + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT


class Channel:
    """One end of a duplex ``multiprocessing`` pipe that carries elements.

    ``send(obj)`` and ``recv()`` move any picklable object; the array payloads of large ones
    go through shared memory. One thread at a time may send, and one may receive.

    Args:
        connection: An end of ``multiprocessing.Pipe(duplex=True)`` (a Unix socket pair on
            Linux, which can pass file descriptors).

    Example:
        >>> import multiprocessing, numpy as np
        >>> a, b = multiprocessing.Pipe()
        >>> left, right = Channel(a), Channel(b)
        >>> left.send({"x": np.arange(100_000)})
        >>> received = right.recv()["x"]
        >>> int(received.sum()), received.flags.writeable
        (4999950000, True)
        >>> left.close(); right.close()
    """

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._socket: socket.socket | None = None
        if _HAVE_MEMFD:
            try:
                # A second handle on the same socket, for passing descriptors: messages and
                # descriptors then share one ordered stream.
                self._socket = socket.socket(fileno=os.dup(connection.fileno()))
            except OSError:  # not a socket (an os.pipe): inline only
                self._socket = None

    def fileno(self) -> int:
        """The connection's descriptor (for ``multiprocessing.connection.wait``)."""
        return self.connection.fileno()

    def send(self, obj: Any) -> None:
        """Send ``obj``; its large buffers are written once, into shared memory."""
        buffers: list[pickle.PickleBuffer] = []
        header = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        if not buffers:
            self.connection.send_bytes(pickle.dumps((header, None), protocol=5))
            return
        raws = [buffer.raw() for buffer in buffers]
        total = sum(raw.nbytes for raw in raws)
        if self._socket is None or total < SHARED_MEMORY_THRESHOLD:
            inline = [raw.tobytes() for raw in raws]
            self.connection.send_bytes(pickle.dumps((header, inline), protocol=5))
            return
        layout: list[tuple[int, int]] = []
        offset = 0
        for raw in raws:
            layout.append((offset, raw.nbytes))
            offset = _aligned(offset + raw.nbytes)
        fd = os.memfd_create("feedline", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, max(offset, 1))
            for (start, _), raw in zip(layout, raws, strict=True):
                written = 0
                while written < raw.nbytes:  # pwrite may write less than asked
                    written += os.pwrite(fd, raw[written:], start + written)
            self.connection.send_bytes(pickle.dumps((header, (max(offset, 1), layout)),
                                                    protocol=5))
            socket.send_fds(self._socket, [b"F"], [fd])
        finally:
            os.close(fd)

    def recv(self) -> Any:
        """The next object sent; ``EOFError`` when the other end is closed."""
        header, payload = pickle.loads(self.connection.recv_bytes())
        if payload is None:
            return pickle.loads(header)
        if isinstance(payload, list):
            return pickle.loads(header, buffers=payload)
        size, layout = payload
        assert self._socket is not None
        _, fds, _, _ = socket.recv_fds(self._socket, 1, 1)
        if not fds:
            raise EOFError("the sender closed the channel before passing its shared memory")
        try:
            mapping = mmap.mmap(fds[0], size)
        finally:
            for fd in fds:
                os.close(fd)
        # The arrays rebuilt hold views of ``whole``, which holds the mapping: it is unmapped
        # when the last of them is freed.
        whole = memoryview(mapping)
        return pickle.loads(header, buffers=[whole[start:start + n] for start, n in layout])

    def close(self) -> None:
        """Close both handles. Idempotent."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self.connection.close()
