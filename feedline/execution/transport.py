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
import select
import socket
import struct
from typing import Any

SHARED_MEMORY_THRESHOLD = 64 * 1024
"""Bytes of array payload from which an element's buffers travel in shared memory."""

_ALIGNMENT = 64  # every buffer starts on a cache line (and any dtype's alignment)
_HAVE_MEMFD = hasattr(os, "memfd_create") and hasattr(socket, "send_fds")
_HEADER = struct.Struct("!Q")  # length of the message that follows


def _aligned(offset: int) -> int:
    return (offset + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT


class Channel:
    """One end of a Unix socket pair that carries pickled objects.

    ``send(obj)`` and ``recv()`` move any picklable object; the array payloads of large ones
    go through shared memory, their descriptor passed with the message. One thread at a time
    may send, and one may receive.

    Args:
        sock: A connected ``AF_UNIX`` stream socket (from :meth:`pair`, or inherited).

    Example:
        >>> import numpy as np
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
            inline = [raw.tobytes() for raw in raws]
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
        fd = os.memfd_create("feedline", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            for (start, _), raw in zip(layout, raws, strict=True):
                written = 0
                while written < raw.nbytes:  # pwrite may write less than asked
                    written += os.pwrite(fd, raw[written:], start + written)
            self._send_message(pickle.dumps((header, (size, layout)), protocol=5), fd)
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
        """The next object sent; ``EOFError`` when the other end is closed."""
        sock = self.socket
        prefix, fds = bytearray(), []
        while len(prefix) < _HEADER.size:
            data, received, _, _ = socket.recv_fds(sock, _HEADER.size - len(prefix), 1)
            if not data:
                for fd in [*fds, *received]:
                    os.close(fd)
                raise EOFError("the other end of the channel is closed")
            prefix += data
            fds.extend(received)
        (length,) = _HEADER.unpack(prefix)
        body = bytearray(length)
        view, got = memoryview(body), 0
        while got < length:
            n = sock.recv_into(view[got:])
            if n == 0:
                for fd in fds:
                    os.close(fd)
                raise EOFError("the other end of the channel closed in the middle of a message")
            got += n
        header, payload = pickle.loads(body)
        if payload is None:
            return pickle.loads(header)
        if isinstance(payload, list):
            return pickle.loads(header, buffers=payload)
        size, layout = payload
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise EOFError("a shared-memory message arrived without its descriptor")
        try:
            mapping = mmap.mmap(fds[0], size)
        finally:
            os.close(fds[0])
        # The arrays rebuilt hold views of ``whole``, which holds the mapping: it is unmapped
        # when the last of them is freed.
        whole = memoryview(mapping)
        return pickle.loads(header, buffers=[whole[start:start + n] for start, n in layout])

    def close(self) -> None:
        """Close the socket. Idempotent."""
        sock, self._socket = self._socket, None
        if sock is not None:
            sock.close()
