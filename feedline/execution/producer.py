"""A background thread that runs an iterator ahead of its consumer into a bounded buffer."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from feedline.execution.buffer import BoundedBuffer, BufferClosed

_ELEMENT, _END, _ERROR = 0, 1, 2


class BackgroundProducer:
    """Pulls ``next(source)`` on a named daemon thread and keeps up to ``capacity`` results.

    The thread holds a reference to the source and the buffer only, never to the stage that
    owns it, so an abandoned pipeline is garbage-collected and closed. Each pull and its
    insertion into the buffer happen under :attr:`lock`, so holding the lock gives a
    consistent view of (source position, buffered elements and errors) for checkpoints.

    Args:
        source: The iterator to run ahead.
        capacity: Results to keep at most.
        name: Thread name suffix (``feedline-<name>``).
        preloaded: Results restored from a checkpoint, handed out first: ``(True, element)``
            or ``(False, error)``, as :meth:`snapshot` returns them.
        exhausted: The source had ended when the checkpoint was taken.

    Example:
        >>> producer = BackgroundProducer(iter([1, 2]), 2, "doc")
        >>> producer.get(), producer.get()
        (1, 2)
        >>> producer.stop()
    """

    def __init__(self, source: Any, capacity: int, name: str,
                 preloaded: Iterable[tuple[bool, Any]] = (), exhausted: bool = False) -> None:
        self.buffer = BoundedBuffer(capacity)
        self.lock = threading.Lock()
        self._source = source
        self._stopping = threading.Event()
        self.buffer.extend((_ELEMENT if ok else _ERROR, value) for ok, value in preloaded)
        if exhausted:
            self.buffer.put_nowait((_END, None))
        self._thread: threading.Thread | None = None
        if not exhausted:
            self._thread = threading.Thread(target=self._run, name=f"feedline-{name}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        source, buffer, lock = self._source, self.buffer, self.lock
        while True:
            try:
                buffer.wait_for_room()
            except BufferClosed:
                return
            with lock:
                if self._stopping.is_set():
                    return
                try:
                    item: tuple[int, Any] = (_ELEMENT, next(source))
                except StopIteration:
                    item = (_END, None)
                except BaseException as error:  # noqa: BLE001 - the consumer re-raises it
                    item = (_ERROR, error)
                try:
                    buffer.put_nowait(item)
                except BufferClosed:
                    return
            if item[0] == _END:
                return
            # After an error the source is asked again: sources continue past a failure
            # (so ignore_errors() downstream can skip it); a source that cannot, ends.

    def get(self) -> Any:
        """The next element; ``StopIteration`` at the end; re-raises the source's error."""
        kind, value = self.buffer.get()
        if kind == _ELEMENT:
            return value
        if kind == _END:
            self.buffer.put_nowait((kind, value))  # the end is sticky: later calls see it too
            raise StopIteration
        raise value

    def snapshot(self) -> tuple[list[tuple[bool, Any]], bool]:
        """(buffered results, whether the source is exhausted); call with :attr:`lock` held.

        Results are ``(True, element)`` or ``(False, error)``, in order: a buffered error is
        part of the position, raised in its place after a restore (as tf.data does).
        """
        items = self.buffer.snapshot()
        results = [(kind == _ELEMENT, value) for kind, value in items if kind != _END]
        return results, any(kind == _END for kind, _ in items)

    def stop(self) -> None:
        """End the thread and wait for it. Idempotent."""
        self._stopping.set()
        self.buffer.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
