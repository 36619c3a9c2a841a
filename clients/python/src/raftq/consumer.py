"""Consumers: lease messages over a stream and settle each exactly once.

A :class:`Consumer` keeps one ``Lease`` stream open on the leader of its
queue (following ``NOT_LEADER`` redirects and reconnecting through the seed
list when a node dies), hands deliveries to handlers, extends their leases
while handlers run (halfway through what remains of each lease, in
batches), and settles results in batches: an ack when the handler returns,
a nack with the exception's text (cut to 1,024 bytes at a UTF-8 boundary)
when it raises. :class:`DeadLetter` sends the message straight to the
dead-letter queue, :class:`HandBack` gives it back uncounted.

Shutdown (``stop``, ``Client.close()``, SIGTERM) follows the Go SDK's
order, which is what keeps a worker from losing or double-counting work:
stop taking deliveries, let running handlers finish, send their acks and
nacks, hand back (as unprocessed) what no handler started, and only then
close the stream — closing it first would make the broker release leases
whose acks are still on their way, counting an attempt for each.
"""

from __future__ import annotations

import collections
import logging
import os
import queue as queuelib
import signal
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import grpc

from raftq import errors
from raftq._proto.raftq.v1 import raftq_pb2 as pb

if TYPE_CHECKING:
    from raftq.client import Client

log = logging.getLogger("raftq")

#: Nack reasons are cut to this many bytes (the broker's limit).
MAX_REASON_BYTES = 1024
_MAX_SETTLE_BATCH = 256
_SETTLE_TIMEOUT = 30.0
_ATTEMPT_TIMEOUT = 5.0
_DEFAULT_LEASE = 30.0
_MIN_EXTEND_INTERVAL = 0.05


def truncate_reason(reason: str, limit: int = MAX_REASON_BYTES) -> str:
    """``reason`` cut to at most ``limit`` bytes of UTF-8, never inside a
    character."""
    b = reason.encode("utf-8", errors="replace")
    if len(b) <= limit:
        return reason
    n = limit
    while n > 0 and (b[n] & 0xC0) == 0x80:  # b[n] continues a character: cut before it
        n -= 1
    return b[:n].decode("utf-8")


class DeadLetter(Exception):
    """Raise from a handler (``raise DeadLetter("bad input") from err``) to
    send the message straight to the dead-letter queue."""


class HandBack(Exception):
    """Raise from a handler to give the message back unprocessed: it is
    redelivered at once and the delivery does not count as an attempt (for
    a worker that declines work, not for failures, which must count)."""


class Received:
    """A delivery held by a consumer: the ``Delivery`` (``.delivery``, and
    its fields directly: ``.id``, ``.payload``, ``.headers``, ``.attempt``,
    ...) and how to settle it. A handler need not settle: returning acks,
    raising nacks."""

    __slots__ = ("delivery", "_consumer", "_held")

    def __init__(self, consumer: "Consumer", held: "_Held") -> None:
        self.delivery: pb.Delivery = held.delivery
        self._consumer = consumer
        self._held = held

    def __getattr__(self, name: str) -> Any:
        return getattr(self.delivery, name)

    @property
    def settled(self) -> bool:
        return self._held.settled

    def ack(self) -> None:
        """Ack the message (sent in the next batch)."""
        self._consumer._settle(self._held, None)

    def nack(self, reason: str = "", *, delay: Optional[float] = None, dead_letter: bool = False) -> None:
        """Nack it: redelivered after ``delay`` seconds (default: the
        consumer's ``nack_delay``), or dead-lettered."""
        self._consumer._settle(self._held, _nack_item(self._held, reason,
                                                      self._consumer.nack_delay if delay is None else delay,
                                                      dead_letter, False))

    def hand_back(self) -> None:
        """Give it back unprocessed (not counted as an attempt)."""
        self._consumer._settle(self._held, _nack_item(self._held, "handed back", 0.0, False, True))

    def __repr__(self) -> str:
        return f"Received(id={self.delivery.id!r}, attempt={self.delivery.attempt})"


Handler = Callable[[Received], Any]


def _nack_item(h: "_Held", reason: str, delay: float, dead_letter: bool, unprocessed: bool) -> pb.NackItem:
    from raftq.client import _ms
    return pb.NackItem(message_id=h.delivery.id, lease_token=h.delivery.lease_token, delay_ms=_ms(delay),
                       reason=truncate_reason(reason), dead_letter=dead_letter, unprocessed=unprocessed)


class _Held:
    """A delivery the consumer holds a lease on, until settled or lost."""

    __slots__ = ("delivery", "token", "running", "settled", "lost", "expiry", "next", "slack")

    def __init__(self, d: pb.Delivery) -> None:
        self.delivery = d
        self.token = d.lease_token
        self.running = False
        self.settled = False
        self.lost = False
        self.expiry = 0.0
        self.next = 0.0
        self.slack = 0.0


class _Leases:
    """Every lease the consumer holds, by token, and when each is extended
    (waiting deliveries too: their leases run while they wait)."""

    def __init__(self, lease: Optional[float]) -> None:
        self.lease = lease
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.by_token: dict[str, _Held] = {}
        self.closed = False

    def _schedule(self, h: _Held, deadline_ms: int, now: float, remaining_ms: int = 0) -> None:
        """Plan h's next extension halfway through what its lease has left:
        the broker's remaining time (on its clock, measured here from
        receipt: no clock agreement needed), else its deadline read with
        our clock, bounded by the configured lease length."""
        remaining = self.lease or 0.0
        r = None
        if remaining_ms > 0:
            r = remaining_ms / 1000.0
        elif deadline_ms > 0:
            r = deadline_ms / 1000.0 - time.time()
        if r is not None and (remaining == 0 or r < remaining):
            remaining = r
        if remaining == 0:
            remaining = _DEFAULT_LEASE
        h.expiry = now + remaining
        interval = max(remaining / 2, _MIN_EXTEND_INTERVAL)
        h.next = now + interval
        h.slack = interval / 4

    def add(self, d: pb.Delivery) -> Optional[_Held]:
        h = _Held(d)
        with self.lock:
            if self.closed:
                return None
            self._schedule(h, d.lease_deadline_ms, time.monotonic(), d.lease_remaining_ms)
            self.by_token[h.token] = h
        self.wake.set()
        return h

    def start(self, h: _Held) -> bool:
        with self.lock:
            if h.token not in self.by_token:
                return False
            h.running = True
            return True

    def settle(self, h: _Held) -> bool:
        """Mark h settled (it stops being extended); False if it was lost
        or settled already."""
        with self.lock:
            if h.settled or h.lost or self.by_token.get(h.token) is not h:
                return False
            h.settled = True
            del self.by_token[h.token]
            return True

    def close_queued(self) -> list[_Held]:
        """Stop taking deliveries; untrack and return those not started."""
        with self.lock:
            self.closed = True
            queued = [h for h in self.by_token.values() if not h.running]
            for h in queued:
                del self.by_token[h.token]
            return queued

    def due(self, now: float) -> tuple[list[_Held], float, float]:
        """Leases to extend now (those due within their slack, so they go
        together), the soonest expiry among them, and when the next is due."""
        refs: list[_Held] = []
        soonest = float("inf")
        nxt = 0.0
        with self.lock:
            for h in self.by_token.values():
                if h.next - h.slack <= now:
                    refs.append(h)
                    soonest = min(soonest, h.expiry - now)
                elif nxt == 0.0 or h.next - h.slack < nxt:
                    nxt = h.next - h.slack
            for h in refs:
                h.next = now + 3600  # in flight; extended() or retry_later() re-plans
        return refs, soonest, nxt

    def extended(self, h: _Held, deadline_ms: int, remaining_ms: int = 0) -> None:
        with self.lock:
            if self.by_token.get(h.token) is h:
                self._schedule(h, deadline_ms, time.monotonic(), remaining_ms)

    def retry_later(self, h: _Held) -> None:
        with self.lock:
            if self.by_token.get(h.token) is h:
                now = time.monotonic()
                h.next = now + max(min((h.expiry - now) / 4, 1.0), _MIN_EXTEND_INTERVAL)
                h.slack = 0.0

    def lost_lease(self, h: _Held) -> None:
        with self.lock:
            if self.by_token.get(h.token) is h:
                h.lost = True
                del self.by_token[h.token]


_STOP = object()
_WAKE = object()  # the settler looks at _final again


class Consumer:
    """The engine behind :meth:`Client.consume` and :meth:`Client.subscribe`.

    ``stats`` counts what was settled: ``acked`` (``Counter`` of message id
    to acks the broker answered OK), ``nacked``, ``handed_back``,
    ``settle_failures`` (batches or items refused: their messages come
    back after their lease), ``leases_lost``.
    """

    def __init__(self, client: "Client", queue: str, *, max_in_flight: int = 64,
                 visibility_timeout: Optional[float] = None, nack_delay: float = 0.0,
                 name: Optional[str] = None, shutdown_timeout: float = 10.0) -> None:
        if not queue:
            raise errors.InvalidArgument("raftq consumer: empty queue name")
        if max_in_flight <= 0:
            max_in_flight = 64
        self.client = client
        self.queue = queue
        self.max_in_flight = max_in_flight
        self.visibility_timeout = visibility_timeout
        self.nack_delay = nack_delay
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.shutdown_timeout = shutdown_timeout
        from raftq.client import RetryPolicy
        rp = client.retry
        self._rpc_retry = RetryPolicy(max_attempts=0, initial_backoff=rp.initial_backoff, max_backoff=rp.max_backoff,
                                      multiplier=rp.multiplier, attempt_timeout=rp.attempt_timeout or _ATTEMPT_TIMEOUT)
        self._leases = _Leases(visibility_timeout)
        self._work: queuelib.Queue[Any] = queuelib.Queue()
        self._settled: queuelib.Queue[Any] = queuelib.Queue()
        self._dispatch_stop = threading.Event()  # no new work
        self._stream_stop = threading.Event()    # close the stream
        self._keep_stop = threading.Event()
        self._done = threading.Event()
        self._call_lock = threading.Lock()
        self._call: Optional[Any] = None
        self._call_addr = ""
        self._late_lock = threading.Lock()
        self._late: list[pb.NackItem] = []
        self._final = False
        self._threads: list[threading.Thread] = []
        self._stats_lock = threading.Lock()
        self.stats: dict[str, Any] = {"acked": collections.Counter(), "nacked": 0, "handed_back": 0,
                                      "settle_failures": 0, "leases_lost": 0}
        self.error: Optional[BaseException] = None
        self._started = False

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Open the stream and start the keeper and settler threads."""
        if self._started:
            return
        self._started = True
        self.client._register(self)
        for target, tname in ((self._receive, "stream"), (self._keep, "keeper"), (self._settle_loop, "settler")):
            t = threading.Thread(target=target, name=f"raftq-{tname}-{self.queue}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Ask the consumer to stop (returns at once; ``wait`` for it).
        From here acks and nacks are held for the final calls that go
        with the stream's close (_final_settle): one settled on the live
        stream would free credit the broker fills again."""
        with self._late_lock:
            self._final = True
        self._dispatch_stop.set()
        self._work.put(_STOP)
        self._settled.put(_WAKE)

    def stopping(self) -> bool:
        return self._dispatch_stop.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self._done.wait(timeout)

    def _shutdown(self) -> None:
        """After the handlers have returned: send their last acks and
        nacks and hand back what no handler started, then close the stream
        while those calls are on their way (see _final_settle)."""
        self._dispatch_stop.set()
        queued = self._leases.close_queued()
        for h in queued:
            h.settled = True
        with self._late_lock:
            self._final = True  # the settler stops; what is left goes in the final calls
        self._settled.put(_STOP)
        stream, keeper, settler = self._threads
        settler.join(self.shutdown_timeout + _SETTLE_TIMEOUT)
        self._keep_stop.set()
        self._leases.wake.set()
        keeper.join()
        leftover: list[Any] = []
        while True:
            try:
                o = self._settled.get_nowait()
            except queuelib.Empty:
                break
            if o is not _STOP and o is not _WAKE:
                leftover.append(o)
        acks = [o[1] for o in leftover if o[0] == "ack"]
        nacks = [o[1] for o in leftover if o[0] == "nack"]
        back = [_nack_item(h, "consumer stopped", 0.0, False, True) for h in queued]
        back += [i for o in leftover if o[0] == "handback" for i in o[1]]
        self._final_settle(acks, nacks, back)
        stream.join()
        with self._late_lock:
            late, self._late = self._late, []
        if late:
            self._send_nacks(late, "handed_back")  # best effort: the stream's close may have released them
        self.client._unregister(self)
        self._done.set()

    def _final_settle(self, acks: list[_Held], nacks: list[pb.NackItem], back: list[pb.NackItem]) -> None:
        """Send the last acks, nacks and hand-backs and close the stream.
        Every call goes first on the stream's own connection, and the
        stream is cancelled while they are on their way: the broker, seeing
        the stream end, grants it nothing more, waits for the calls that
        came before the end on that connection, then releases the rest.
        Settling on a live stream instead frees its credit, and the broker
        grants it more messages that its close then releases as attempts
        (which is why, from the start of the shutdown, deliveries are held
        for this last hand-back rather than handed back at once)."""
        with self._late_lock:
            back = back + self._late
            self._late = []
        self._stream_stop.set()
        with self._call_lock:
            call, addr = self._call, self._call_addr
        calls: list[tuple[str, Any, Any]] = []  # (kind, request, future)
        if acks:
            calls.append(("ack", acks, pb.AckRequest(queue=self.queue, acks=[
                pb.LeaseRef(message_id=h.delivery.id, lease_token=h.token) for h in acks])))
        if nacks:
            calls.append(("nacked", nacks, pb.NackRequest(queue=self.queue, nacks=nacks)))
        if back:
            calls.append(("handed_back", back, pb.NackRequest(queue=self.queue, nacks=back)))
        futures: list[Any] = []
        if call is not None and calls:
            try:
                broker, _ = self.client._nodes.stubs(addr)
                for kind, _, req in calls:
                    method = broker.Ack if kind == "ack" else broker.Nack
                    futures.append(method.future(req, timeout=_SETTLE_TIMEOUT, metadata=self.client._metadata))
            except errors.RaftqError:
                pass
        if call is not None:
            call.cancel()
        for i, (kind, items, _) in enumerate(calls):
            if i < len(futures):
                try:
                    res = futures[i].result().results
                    if kind == "ack":
                        self._count_acks(items, res)
                    else:
                        self._count_nacks(res, kind)
                    continue
                except grpc.RpcError as e:
                    log.info("raftq: final %s at %s failed (%s); retrying", kind, addr, e.code().name)
            if kind == "ack":
                self._send_acks(items)
            else:
                self._send_nacks(items, kind)

    # -- the pieces ---------------------------------------------------------

    def _next(self, block_until: Optional[threading.Event] = None) -> Optional[_Held]:
        """The next delivery to handle (started), or None once stopping."""
        while True:
            if self._dispatch_stop.is_set() or (block_until is not None and block_until.is_set()):
                return None
            try:
                h = self._work.get(timeout=0.2)
            except queuelib.Empty:
                continue
            if h is _STOP:
                self._work.put(_STOP)  # for the other workers
                return None
            if self._dispatch_stop.is_set():
                return None  # handed back by _shutdown
            if self._leases.start(h):
                return h

    def _settle(self, h: _Held, nack: Optional[pb.NackItem]) -> None:
        if not self._leases.settle(h):
            if h.lost:
                log.warning("raftq: lease of %s lost before it was settled; not settling", h.delivery.id)
            return
        self._settled.put(("ack", h) if nack is None else ("nack", nack))

    def _run_handler(self, handler: Handler, h: _Held) -> None:
        msg = Received(self, h)
        try:
            handler(msg)
        except HandBack:
            if not h.settled:
                msg.hand_back()
        except DeadLetter as e:
            if not h.settled:
                msg.nack(_reason(e), dead_letter=True)
        except Exception as e:  # the handler failed: nack, with why
            if not h.settled:
                msg.nack(_reason(e))
        else:
            if not h.settled:
                msg.ack()

    def _settle_loop(self) -> None:
        """Send acks and nacks in batches: what accumulated while the last
        call was in flight goes in the next, so batches grow with load."""
        stopping = False
        while not stopping:
            first = self._settled.get()
            if first is _STOP:
                return
            if self._final:
                if first is not _WAKE:
                    self._settled.put(first)  # shutting down: _shutdown sends it with the stream's close
                return
            if first is _WAKE:
                continue
            batch = [first]
            while len(batch) < _MAX_SETTLE_BATCH:
                try:
                    o = self._settled.get_nowait()
                except queuelib.Empty:
                    break
                if o is _STOP:
                    stopping = True
                    break
                if o is not _WAKE:
                    batch.append(o)
            acks = [o[1] for o in batch if o[0] == "ack"]
            nacks = [o[1] for o in batch if o[0] == "nack"]
            handback = [i for o in batch if o[0] == "handback" for i in o[1]]
            if acks:
                self._send_acks(acks)
            if nacks:
                self._send_nacks(nacks, "nacked")
            if handback:
                self._send_nacks(handback, "handed_back")

    def _send_acks(self, held: list[_Held]) -> None:
        req = pb.AckRequest(queue=self.queue, acks=[pb.LeaseRef(message_id=h.delivery.id, lease_token=h.token)
                                                    for h in held])
        try:
            res = self.client._invoke("Ack", "broker", req, queue=self.queue, timeout=_SETTLE_TIMEOUT,
                                      retry=self._rpc_retry).results
        except errors.RaftqError as e:
            log.warning("raftq: acking %d messages failed; they will be redelivered: %s", len(held), e)
            with self._stats_lock:
                self.stats["settle_failures"] += len(held)
            return
        self._count_acks(held, res)

    def _count_acks(self, held: list[_Held], res: Any) -> None:
        with self._stats_lock:
            for h, r in zip(held, res):
                if r.ok:
                    self.stats["acked"][h.delivery.id] += 1
                else:
                    self.stats["settle_failures"] += 1
                    log.warning("raftq: ack not applied: %s", r.error)

    def _send_nacks(self, items: list[pb.NackItem], stat: str) -> None:
        try:
            res = self.client._nack_items(self.queue, items, timeout=_SETTLE_TIMEOUT, retry=self._rpc_retry)
        except errors.RaftqError as e:
            log.warning("raftq: %s %d messages failed; they come back after their lease: %s", stat, len(items), e)
            with self._stats_lock:
                self.stats["settle_failures"] += len(items)
            return
        self._count_nacks(res, stat)

    def _count_nacks(self, res: Any, stat: str) -> None:
        with self._stats_lock:
            for r in res:
                if r.ok:
                    self.stats[stat] += 1
                else:
                    self.stats["settle_failures"] += 1
                    log.warning("raftq: nack not applied: %s", r.error)

    def _keep(self) -> None:
        """Extend leases before they run out, in batches."""
        while not self._keep_stop.is_set():
            now = time.monotonic()
            due, soonest, nxt = self._leases.due(now)
            if due:
                self._extend(due, soonest)
                continue
            wait = 3600.0 if nxt == 0.0 else max(nxt - now, 0.0)
            self._leases.wake.wait(wait)
            self._leases.wake.clear()

    def _extend(self, held: list[_Held], soonest: float) -> None:
        try:
            resp = self.client.extend_lease(self.queue, *[(h.delivery.id, h.token) for h in held],
                                            extend_by=self.visibility_timeout or 0.0,
                                            timeout=min(max(soonest, 1.0), 10.0), retry=self._rpc_retry)
        except errors.RaftqError as e:
            if not self._keep_stop.is_set():
                log.warning("raftq: extending %d leases failed; will retry: %s", len(held), e)
            for h in held:
                self._leases.retry_later(h)
            return
        for i, h in enumerate(held):
            r = resp.results[i] if i < len(resp.results) else None
            if r is None:
                self._leases.retry_later(h)
            elif r.ok:
                self._leases.extended(h, resp.deadlines_ms[i] if i < len(resp.deadlines_ms) else 0,
                                      resp.remaining_ms[i] if i < len(resp.remaining_ms) else 0)
            elif r.code in (grpc.StatusCode.FAILED_PRECONDITION.value[0], grpc.StatusCode.NOT_FOUND.value[0]):
                log.warning("raftq: lease of %s lost: %s", h.delivery.id, r.error)
                self._leases.lost_lease(h)
                with self._stats_lock:
                    self.stats["leases_lost"] += 1
            else:
                self._leases.retry_later(h)

    def _learn_members(self) -> None:
        from raftq.client import RetryPolicy
        try:
            self.client.cluster_status(local_only=True, timeout=2.0, retry=RetryPolicy(max_attempts=1))
        except errors.RaftqError as e:
            log.debug("raftq: cluster status unavailable; using known nodes only: %s", e)

    def _receive(self) -> None:
        """Keep a Lease stream open on the queue's leader, reconnecting and
        following redirects, until the stream is to close."""
        from raftq.client import MAX_RECEIVE_BYTES, _ms
        req = pb.LeaseRequest(queue=self.queue, consumer_name=self.name, max_in_flight=self.max_in_flight,
                              visibility_timeout_ms=_ms(self.visibility_timeout or 0.0),
                              max_batch_bytes=MAX_RECEIVE_BYTES)
        rp = self.client.retry
        failures = redirects = 0
        while not self._stream_stop.is_set() and not self._dispatch_stop.is_set():
            if failures == 0:
                self._learn_members()
            addr = self.client._nodes.target(self.queue)
            started = time.monotonic()
            got = False
            try:
                broker, _ = self.client._nodes.stubs(addr)
                call = broker.Lease(req, metadata=self.client._metadata)
                with self._call_lock:
                    self._call, self._call_addr = call, addr
                if self._stream_stop.is_set():
                    call.cancel()
                for resp in call:
                    got = True
                    self._deliver(resp)
                err: Optional[grpc.RpcError] = None
            except grpc.RpcError as e:
                err = e
            except errors.ClientClosed:
                return
            finally:
                with self._call_lock:
                    self._call = None
            if self._stream_stop.is_set() or self._dispatch_stop.is_set():
                return
            if got or time.monotonic() - started > rp.max_backoff:
                failures = redirects = 0
            act = 2  # backoff
            if err is not None:
                act = self.client._classify(addr, self.queue, err, time.monotonic() + 3600)
                if act == 0 and err.code() in _RETRYABLE_STREAM_CODES:
                    act = 2
                if act == 0:
                    self.error = errors.from_rpc_error(err, f"consume {self.queue}")
                    log.error("raftq: %s", self.error)
                    self.stop()
                    return
            wait = 0.0
            if act == 1:
                redirects += 1
            if act == 2 or redirects > 1:
                failures += 1
                wait = rp.backoff(failures)
            log.log(logging.DEBUG if act == 1 else logging.INFO,
                    "raftq: lease stream at %s ended (%s); reconnecting in %.3fs", addr,
                    err.code().name if err is not None else "closed", wait)
            if self._dispatch_stop.wait(wait):
                return

    def _deliver(self, resp: pb.LeaseResponse) -> None:
        late: list[pb.NackItem] = []
        for d in resp.messages:
            h = self._leases.add(d)
            if h is None:
                # Stopping: hand it straight back, uncounted, rather than
                # let the stream's close release it as an attempt.
                late.append(pb.NackItem(message_id=d.id, lease_token=d.lease_token,
                                        reason="consumer stopped", unprocessed=True))
                continue
            self._work.put(h)
        if late:
            # Held for the last hand-back, which goes with the stream's
            # close: handing them back now would free credit the broker
            # fills again on this still open stream.
            with self._late_lock:
                self._late.extend(late)

    # -- the two forms --------------------------------------------------------

    def run(self, handler: Handler, *, concurrency: Optional[int] = None, stop: Optional[threading.Event] = None,
            handle_sigterm: bool = True) -> dict[str, Any]:
        """Run ``handler`` on ``concurrency`` threads (default
        ``max_in_flight``) until ``stop`` is set, ``stop()``, the client
        closes or SIGTERM; then shut down in order (module docstring).
        Raises the error that ended the stream for good (queue not found,
        permission denied). Returns ``stats``."""
        n = concurrency or self.max_in_flight
        stop_event = stop or threading.Event()
        restore = _on_sigterm(self.stop) if handle_sigterm else None
        self.start()
        workers = [threading.Thread(target=self._work_loop, args=(handler, stop_event),
                                    name=f"raftq-worker-{self.queue}-{i}", daemon=True) for i in range(n)]
        for w in workers:
            w.start()
        try:
            while not self._dispatch_stop.is_set():
                if stop_event.wait(0.2):
                    break
        finally:
            self.stop()
            for w in workers:
                w.join()
            self._shutdown()
            if restore:
                restore()
        if self.error is not None:
            raise self.error
        return self.stats

    def _work_loop(self, handler: Handler, stop: threading.Event) -> None:
        while True:
            h = self._next(stop)
            if h is None:
                return
            self._run_handler(handler, h)


_RETRYABLE_STREAM_CODES = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.ABORTED,
                           grpc.StatusCode.CANCELLED, grpc.StatusCode.RESOURCE_EXHAUSTED}


def _reason(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _on_sigterm(stop: Callable[[], None]) -> Optional[Callable[[], None]]:
    """Make SIGTERM stop the consumer (main thread only); returns what
    restores the previous handler."""
    if threading.current_thread() is not threading.main_thread():
        return None
    prev = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        log.info("raftq: SIGTERM: stopping the consumer")
        stop()
    signal.signal(signal.SIGTERM, on_term)
    return lambda: signal.signal(signal.SIGTERM, prev)


class Subscription:
    """The iterator form: ``with client.subscribe(queue) as msgs: for m in
    msgs: ...``. Moving to the next message (or leaving the loop by
    ``break``) acks the current one; leaving the ``with`` block by an
    exception nacks it with the exception's text; a message the body
    settled itself (``m.ack()``, ``m.nack()``, ``m.hand_back()``) is left
    as it is. Iteration ends on ``close()``, ``Client.close()`` or SIGTERM;
    then what was not handed out is handed back."""

    def __init__(self, consumer: Consumer, *, handle_sigterm: bool = True) -> None:
        self.consumer = consumer
        self._handle_sigterm = handle_sigterm
        self._restore: Optional[Callable[[], None]] = None
        self._current: Optional[Received] = None
        self._closed = False

    def __enter__(self) -> "Subscription":
        self._open()
        return self

    def _open(self) -> None:
        if not self.consumer._started:
            if self._handle_sigterm:
                self._restore = _on_sigterm(self.consumer.stop)
            self.consumer.start()

    def __iter__(self) -> Iterator[Received]:
        self._open()
        return self

    def _finish_current(self, exc: Optional[BaseException] = None) -> None:
        cur, self._current = self._current, None
        if cur is None or cur.settled:
            return
        if exc is not None:
            cur.nack(_reason(exc))
        else:
            cur.ack()

    def __next__(self) -> Received:
        self._finish_current()
        if self._closed:
            raise StopIteration
        h = self.consumer._next()
        if h is None:
            self.close()
            if self.consumer.error is not None:
                raise self.consumer.error
            raise StopIteration
        self._current = Received(self.consumer, h)
        return self._current

    def close(self, exc: Optional[BaseException] = None) -> None:
        """Settle the current message, stop, hand back the rest."""
        if self._closed:
            return
        self._closed = True
        self._finish_current(exc)
        self.consumer.stop()
        if self.consumer._started:
            self.consumer._shutdown()
        if self._restore:
            self._restore()
            self._restore = None

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> None:
        self.close(exc if isinstance(exc, Exception) else None)

    @property
    def stats(self) -> dict[str, Any]:
        return self.consumer.stats


__all__ = ["Consumer", "Subscription", "Received", "Handler", "DeadLetter", "HandBack",
           "truncate_reason", "MAX_REASON_BYTES"]
