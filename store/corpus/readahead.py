"""The corpus reader thread: batches parsed a few ahead of the thread that inserts them."""

from __future__ import annotations

import queue
import threading
from typing import Any, Iterator


class ReadAhead:
    """:func:`store.corpus.batches.iter_batches` in a thread of its own, a few batches ahead
    of the thread that inserts them: parsing (Python) runs while SQLite inserts with the
    GIL released, or while PostgreSQL works on the COPY data already sent. Batches and the
    reader's error come out in file order, so the first error is the one a serial load
    would raise. Memory stays bounded by ``ahead`` batches."""

    _DONE = object()

    def __init__(self, batches: Iterator[tuple[Any, int]], ahead: int = 3) -> None:
        self._batches = batches
        self._queue: queue.Queue = queue.Queue(maxsize=ahead)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="corpus-reader", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for batch in self._batches:
                if not self._put(batch):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            self._put(exc)
        else:
            self._put(self._DONE)
        finally:
            close = getattr(self._batches, "close", None)
            if close is not None:
                close()

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        while True:
            item = self._queue.get()
            if item is self._DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
