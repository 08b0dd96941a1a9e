"""Requests in flight: one instance answers requests from K lanes at once, each a thread of its own.

The classic execute runs its requests and returns their answers: the stub's per-request work and the
device's work take turns. In-flight (parameter `inflight_lanes`, Triton 2.47 and later, docs/inflight.md)
execute only queues each request here and returns; K worker threads, each with a lane of its own (its own
runner, and on a GPU its own session and CUDA stream), take what is queued, gather it into one run where the
plan gathers, and answer each request through the callback it came with. While one lane waits for the
device (ORT releases the GIL), another reads, binds and answers.

What is in flight is bounded: `submit` waits while the requests admitted and not yet answered hold twice
the rows all lanes take at once, so execute() does not return and the rest wait in Triton's queue, where
max_queue_size, queue timeouts and priorities still apply to them.

Every request queued is answered exactly once, whatever happens: its own answer, its own error, the run's
failure, a cancellation seen before its run, or, at close, an unloading error for what was never taken.
An answer callback that raises is logged; it does not stop the lane.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..errors import Cancelled, InferenceError
from .gather import Result, Tensors

LOGGER = logging.getLogger(__name__)

# A request that waited longer than this in the queue is asked whether its client cancelled it before it
# runs; asking costs the stub a round trip to the server, which a request taken at once does not repay.
CANCEL_CHECK_AFTER_S = 0.002
# How long close() waits for the lanes to answer what they hold.
CLOSE_TIMEOUT_S = 30.0


Answer = Callable[[Result], None]
"""Sends one request's result (its outputs, or its error) to the client."""


@dataclass
class Pending:
    """One queued request: its tensors (or the error reading them gave), and how to answer it."""

    tensors: Tensors | Exception
    answer: Answer
    rows: int = 1
    """Batch rows, for the gathering limit."""
    cancelled: Callable[[], bool] = lambda: False
    queued_at: float = field(default_factory=time.perf_counter)
    answered: bool = False

    def send(self, result: Result) -> None:
        """Answer once; a second answer is a bug here, logged and dropped (the client already has one)."""
        if self.answered:
            LOGGER.error("a request was answered twice; the second answer is dropped: %r", result)
            return
        self.answered = True
        try:
            self.answer(result)
        except Exception:  # the client's connection, the server's unload: nothing a lane can mend
            LOGGER.exception("could not send a request's answer")


RunBatch = Callable[[Sequence[Tensors], int], list[Result]]
"""Runs requests on a lane (its index): results in request order (an exception per failed request)."""


class InflightScheduler:
    """K lanes taking queued requests: `submit` from execute(), `close` at unload."""

    def __init__(self, run: RunBatch, lanes: int, max_rows: int) -> None:
        """`run(requests, lane)`: one gathered batch on a lane. `max_rows`: the most batch rows one lane
        takes at once (the model's max_batch_size; 0: one request at a time, as Triton gives a model that
        does not batch)."""
        self._run = run
        self._max_rows = max_rows
        self._queue: queue.SimpleQueue[Pending | None] = queue.SimpleQueue()
        self._held: Pending | None = None  # taken by a lane but over its row limit: the next take's first
        self._take_lock = threading.Lock()  # one lane takes from the queue at a time
        self._room = threading.Condition()  # guards the counts below; notified as requests are answered
        self.in_flight = 0
        """Requests submitted and not yet answered."""
        self.rows_in_flight = 0
        self.capacity_rows = 2 * lanes * max(max_rows, 1)
        """`submit` waits while `rows_in_flight` is at least this: a batch running on every lane and the
        next one queued for each."""
        self._closed = False
        self._threads = [
            threading.Thread(target=self._lane, args=(index,), name=f"triton_ort lane {index}", daemon=True)
            for index in range(lanes)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, pending: Pending) -> None:
        """Queue one request, first waiting while what is in flight is at capacity (a request larger than
        the capacity goes in alone); a closed scheduler answers it at once with an unloading error."""
        with self._room:
            self._room.wait_for(lambda: self._closed or self.rows_in_flight < self.capacity_rows)
            if not self._closed:
                self.in_flight += 1
                self.rows_in_flight += pending.rows
                self._queue.put(pending)
                return
        pending.send(InferenceError("the model is unloading; the request was not run"))

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """Stop taking requests: the lanes answer what is queued, then end. True when every lane ended in
        `timeout_s`; requests still queued after that are answered here with an unloading error. (Triton
        unloads a model only once every request it handed over is answered: a response factory keeps its
        model loaded. So at unload nothing is queued, and the timeout guards against a lane that hangs.)"""
        with self._room:
            self._closed = True
            self._room.notify_all()
        for _ in self._threads:
            self._queue.put(None)
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        ended = not any(thread.is_alive() for thread in self._threads)
        if not ended:
            LOGGER.warning("in-flight lanes did not finish within %.1f s of unload", timeout_s)
        leftover: list[Pending] = []
        # as a lane takes: a lane that is still alive is running a batch, not taking
        if self._take_lock.acquire(timeout=1.0):
            try:
                leftover = [self._held] if self._held is not None else []
                self._held = None
                while not self._queue.empty():
                    item = self._queue.get_nowait()
                    if item is not None:
                        leftover.append(item)
            finally:
                self._take_lock.release()
        for item in leftover:
            self._answer(item, InferenceError("the model unloaded before the request ran"))
        return ended

    def _take(self) -> list[Pending] | None:
        """What one lane runs next: the first request waiting (blocking for one), then every request already
        queued behind it while the rows fit `max_rows`. None once closed and nothing is left."""
        with self._take_lock:
            first, self._held = self._held, None
            if first is None:
                first = self._queue.get()
            if first is None:
                return None
            taken, rows = [first], first.rows
            while self._max_rows > 0:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:  # close(): leave the stop for a lane after this batch
                    self._queue.put(None)
                    break
                if rows + item.rows > self._max_rows:
                    self._held = item
                    break
                taken.append(item)
                rows += item.rows
            return taken

    def _lane(self, index: int) -> None:
        while (taken := self._take()) is not None:
            try:
                self._run_taken(index, taken)
            except BaseException as error:  # never leave a request unanswered, whatever failed
                LOGGER.exception("lane %d failed outside any one request", index)
                failure = InferenceError(f"the batch could not be computed: {type(error).__name__}: {error}")
                for item in taken:
                    self._answer(item, failure)
                if not isinstance(error, Exception):
                    raise

    def _run_taken(self, index: int, taken: list[Pending]) -> None:
        now = time.perf_counter()
        runnable: list[tuple[Pending, Tensors]] = []
        for item in taken:
            if isinstance(item.tensors, Exception):
                self._answer(item, item.tensors)
            elif now - item.queued_at > CANCEL_CHECK_AFTER_S and item.cancelled():
                self._answer(item, Cancelled("the request was cancelled before it ran"))
            else:
                runnable.append((item, item.tensors))
        if not runnable:
            return
        results = self._run([tensors for _, tensors in runnable], index)
        for (item, _), result in zip(runnable, results, strict=True):
            self._answer(item, result)

    def _answer(self, item: Pending, result: Result) -> None:
        if item.answered:  # answered before a later step failed: the failure is not this request's
            return
        item.send(result)
        with self._room:
            self.in_flight -= 1
            self.rows_in_flight -= item.rows
            self._room.notify_all()
