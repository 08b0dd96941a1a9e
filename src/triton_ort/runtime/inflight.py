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

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..errors import Cancelled, InferenceError
from ..model.signature import Tensors
from .gather import Result

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
    """K lanes taking queued requests: `submit` from execute(), `close` at unload.

    One lock guards the queue and the counts, with two conditions on it: lanes wait on `_work` for
    requests, execute() waits on `_room` for capacity. Every step a request takes here (queued, taken,
    answered) costs one acquisition of that lock, and an execute's requests are queued together under one
    and wake one lane, which gathers them (and wakes another where more than one run's rows wait): the
    lanes and execute() share one GIL, so what a request costs here is what no other lane can use, and a
    lane woken for nothing costs it too.
    """

    def __init__(self, run: RunBatch, lanes: int, max_rows: int) -> None:
        """`run(requests, lane)`: one gathered batch on a lane. `max_rows`: the most batch rows one lane
        takes at once (the model's max_batch_size; 0: one request at a time, as Triton gives a model that
        does not batch)."""
        self._run = run
        self._max_rows = max_rows
        self._queue: collections.deque[Pending] = collections.deque()
        lock = threading.Lock()
        self._work = threading.Condition(lock)  # lanes wait here for requests
        self._room = threading.Condition(lock)  # submit waits here while in flight is at capacity
        self._waiting_for_room = 0
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

    def submit(self, *pending: Pending) -> None:
        """Queue requests (an execute's, together), first waiting while what is in flight is at capacity (a
        request larger than the capacity goes in alone); a closed scheduler answers them at once with an
        unloading error."""
        admitted = 0
        with self._work:
            for item in pending:
                while not self._closed and self.rows_in_flight >= self.capacity_rows:
                    self._waiting_for_room += 1
                    if admitted:
                        self._work.notify()  # for what this call queued so far
                    self._room.wait()
                    self._waiting_for_room -= 1
                if self._closed:
                    break
                self.in_flight += 1
                self.rows_in_flight += item.rows
                self._queue.append(item)
                admitted += 1
            if admitted:
                self._work.notify()  # one lane, which gathers them and wakes another for any left
        for item in pending[admitted:]:
            item.send(InferenceError("the model is unloading; the request was not run"))

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """Stop taking requests: the lanes answer what is queued, then end. True when every lane ended in
        `timeout_s`; requests still queued after that are answered here with an unloading error. (Triton
        unloads a model only once every request it handed over is answered: a response factory keeps its
        model loaded. So at unload nothing is queued, and the timeout guards against a lane that hangs.)"""
        with self._work:
            self._closed = True
            self._work.notify_all()
            self._room.notify_all()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        ended = not any(thread.is_alive() for thread in self._threads)
        if not ended:
            LOGGER.warning("in-flight lanes did not finish within %.1f s of unload", timeout_s)
        with self._work:  # a lane that is still alive is running a batch, not taking
            leftover = list(self._queue)
            self._queue.clear()
        unloaded = InferenceError("the model unloaded before the request ran")
        self._answer_all(leftover, [unloaded] * len(leftover))
        return ended

    def _take(self) -> list[Pending] | None:
        """What one lane runs next: the first request waiting (blocking for one), then every request already
        queued behind it while the rows fit `max_rows`. None once closed and nothing is left."""
        with self._work:
            while not self._queue:
                if self._closed:
                    return None
                self._work.wait()
            first = self._queue.popleft()
            taken, rows = [first], first.rows
            while self._max_rows > 0 and self._queue and rows + self._queue[0].rows <= self._max_rows:
                item = self._queue.popleft()
                taken.append(item)
                rows += item.rows
            if self._queue:  # more than one run's rows: the next lane takes the rest
                self._work.notify()
            return taken

    def _lane(self, index: int) -> None:
        while (taken := self._take()) is not None:
            try:
                self._run_taken(index, taken)
            except BaseException as error:  # never leave a request unanswered, whatever failed
                LOGGER.exception("lane %d failed outside any one request", index)
                failure = InferenceError(f"the batch could not be computed: {type(error).__name__}: {error}")
                self._answer_all(taken, [failure] * len(taken))
                if not isinstance(error, Exception):
                    raise

    def _run_taken(self, index: int, taken: list[Pending]) -> None:
        now = time.perf_counter()
        runnable: list[tuple[Pending, Tensors]] = []
        refused: list[tuple[Pending, Result]] = []
        for item in taken:
            if isinstance(item.tensors, Exception):
                refused.append((item, item.tensors))
            elif now - item.queued_at > CANCEL_CHECK_AFTER_S and item.cancelled():
                refused.append((item, Cancelled("the request was cancelled before it ran")))
            else:
                runnable.append((item, item.tensors))
        if refused:
            self._answer_all([item for item, _ in refused], [result for _, result in refused])
        if runnable:
            results = self._run([tensors for _, tensors in runnable], index)
            self._answer_all([item for item, _ in runnable], results)

    def _answer_all(self, items: Sequence[Pending], results: Sequence[Result]) -> None:
        """Each item its result (an item answered before a later step failed keeps its answer: the failure
        is not its own), then the counts, once for all of them."""
        fresh = [(item, result) for item, result in zip(items, results, strict=True) if not item.answered]
        if not fresh:
            return
        for item, result in fresh:
            item.send(result)
        with self._work:
            self.in_flight -= len(fresh)
            self.rows_in_flight -= sum(item.rows for item, _ in fresh)
            if self._waiting_for_room:
                self._room.notify_all()
