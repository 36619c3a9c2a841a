"""The raftq client: queues, enqueue, peek, settle, and consumers.

A :class:`Client` talks gRPC to any node of a cluster given as a seed list.
It follows the leader: a node that must not serve a call answers
``UNAVAILABLE`` with a ``NOT_LEADER`` redirect naming the leader's address,
which the client remembers per queue and tries at once; a node that cannot
be reached moves the client to the next seed, with jittered backoff, until
the call's timeout. Nodes named in redirects and in the cluster's status
join the seed list, so a client given one seed fails over when that node
dies. Every mutating call is safe to retry (docs/api.md, Retries): enqueued
messages carry a dedup id, purges and redrives an idempotency key.
"""

from __future__ import annotations

import logging
import math
import random
import secrets
import threading
import time
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional,
                    Sequence, Union)

import grpc
from google.protobuf import field_mask_pb2

from raftq import errors
from raftq._proto.raftq.v1 import raftq_pb2 as pb
from raftq._proto.raftq.v1 import raftq_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from raftq.consumer import Handler, Subscription

log = logging.getLogger("raftq")

#: The largest response the client accepts: the largest message a queue
#: holds plus headers and keys (docs/api.md, Large messages).
MAX_RECEIVE_BYTES = 17 << 20
#: The largest request a node reads.
MAX_REQUEST_BYTES = 64 << 20
#: The default deadline of one call, retries included, in seconds.
DEFAULT_TIMEOUT = 15.0


@dataclass(frozen=True)
class TLS:
    """TLS settings: the CA that signed the nodes' certificates (``None``:
    the system's roots) and, for mutual TLS, a client certificate and key
    (PEM files). ``server_name`` overrides the name checked in the node's
    certificate."""

    ca_file: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    server_name: Optional[str] = None

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: Optional[str]) -> Optional[bytes]:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()
        if (self.cert_file is None) != (self.key_file is None):
            raise errors.InvalidArgument("raftq TLS: cert_file and key_file go together")
        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file), private_key=read(self.key_file),
            certificate_chain=read(self.cert_file))


@dataclass(frozen=True)
class RetryPolicy:
    """How a call is retried after ``UNAVAILABLE`` (node down, no leader,
    leader moved) or an attempt that timed out on a hung node; every other
    code is final. Waits are uniform in ``[0, cap)`` (full jitter), the cap
    growing from ``initial_backoff`` by ``multiplier`` up to ``max_backoff``
    (seconds). ``attempt_timeout`` bounds each attempt (``None``: only the
    call's timeout)."""

    max_attempts: int = 10
    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    multiplier: float = 2.0
    attempt_timeout: Optional[float] = None

    def backoff(self, n: int) -> float:
        ceiling = min(self.initial_backoff * self.multiplier ** max(n - 1, 0), self.max_backoff)
        return random.uniform(0, ceiling)


@dataclass
class Message:
    """One message to enqueue. Durations are seconds (sent as whole
    milliseconds, rounded up): ``delay`` before it is ready, ``ttl`` until
    it is dead-lettered unacked. Without a ``dedup_id`` the client draws one,
    so a retry after a lost answer creates no duplicate."""

    payload: Union[bytes, str]
    headers: Optional[Mapping[str, str]] = None
    priority: int = 0
    fairness_key: str = ""
    weight: int = 0
    throttle_keys: Sequence[str] = ()
    delay: float = 0.0
    ttl: float = 0.0
    dedup_id: Optional[str] = None
    #: Messages of one concurrency key are in flight at most the queue's
    #: cap for that key at once (``concurrency_limit``/``concurrency_limits``;
    #: a cap of 1 delivers them in order). Log version 19.
    concurrency_key: str = ""

    def to_proto(self) -> pb.EnqueueMessage:
        payload = self.payload.encode() if isinstance(self.payload, str) else bytes(self.payload)
        return pb.EnqueueMessage(
            payload=payload, headers=dict(self.headers or {}), priority=self.priority,
            fairness_key=self.fairness_key, weight=self.weight, throttle_keys=list(self.throttle_keys),
            delay_ms=_ms(self.delay), ttl_ms=_ms(self.ttl), dedup_id=self.dedup_id or new_dedup_id(),
            concurrency_key=self.concurrency_key)


def _ms(seconds: Optional[float]) -> int:
    """Seconds as whole milliseconds, a positive fraction rounded up (so a
    short delay never becomes "none")."""
    if not seconds:
        return 0
    return math.ceil(seconds * 1000) if seconds > 0 else int(seconds * 1000)


def new_dedup_id() -> str:
    """A random dedup id (128 bits), the kind enqueue assigns."""
    return secrets.token_hex(16)


LeaseRefLike = Union[pb.LeaseRef, pb.Delivery, tuple[str, str], Any]


def lease_ref(x: LeaseRefLike) -> pb.LeaseRef:
    """A LeaseRef from a delivery, a received message, a LeaseRef or an
    ``(id, token)`` pair."""
    if isinstance(x, pb.LeaseRef):
        return x
    if isinstance(x, tuple):
        return pb.LeaseRef(message_id=x[0], lease_token=x[1])
    d = getattr(x, "delivery", x)
    return pb.LeaseRef(message_id=d.id, lease_token=d.lease_token)


_FAIL, _REDIRECT, _BACKOFF = range(3)


class _Nodes:
    """What the client knows of where to send calls: the seeds (growing
    with nodes it learns of), a cursor over them that moves on when a seed
    is unreachable, the leader a node named, per queue and overall, and one
    channel per address."""

    def __init__(self, seeds: Sequence[str], channel: Callable[[str], grpc.Channel]) -> None:
        self._lock = threading.Lock()
        self._seeds = list(dict.fromkeys(seeds))
        self._cursor = 0
        self._leader = ""
        self._queue_leader: dict[str, str] = {}
        self._channel = channel
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, tuple[pb_grpc.BrokerStub, pb_grpc.ClusterStub]] = {}
        self.closed = False

    def target(self, queue: Optional[str] = None) -> str:
        with self._lock:
            if queue and queue in self._queue_leader:
                return self._queue_leader[queue]
            return self._leader or self._seeds[self._cursor]

    def leader_of(self, queue: str) -> str:
        """The leader last learnt for queue ("" if none)."""
        with self._lock:
            return self._queue_leader.get(queue, "")

    def set_leader(self, addr: str, queue: Optional[str]) -> None:
        with self._lock:
            self._leader = addr
            if queue:
                self._queue_leader[queue] = addr
            self._learn(addr)

    def learn(self, *addrs: str) -> None:
        with self._lock:
            self._learn(*addrs)

    def _learn(self, *addrs: str) -> None:
        for a in addrs:
            if a and a not in self._seeds:
                self._seeds.append(a)

    def forget(self, addr: str) -> None:
        """addr said it does not lead (or did not answer): drop the hints."""
        with self._lock:
            if self._leader == addr:
                self._leader = ""
            for q in [q for q, a in self._queue_leader.items() if a == addr]:
                del self._queue_leader[q]

    def unreachable(self, addr: str) -> None:
        self.forget(addr)
        with self._lock:
            if self._seeds[self._cursor] == addr:
                self._cursor = (self._cursor + 1) % len(self._seeds)

    def stubs(self, addr: str) -> tuple[pb_grpc.BrokerStub, pb_grpc.ClusterStub]:
        with self._lock:
            if self.closed:
                raise errors.ClientClosed("raftq: client closed")
            s = self._stubs.get(addr)
            if s is None:
                ch = self._channel(addr)
                self._channels[addr] = ch
                s = (pb_grpc.BrokerStub(ch), pb_grpc.ClusterStub(ch))
                self._stubs[addr] = s
            return s

    def close(self) -> None:
        with self._lock:
            self.closed = True
            channels, self._channels, self._stubs = self._channels, {}, {}
        for ch in channels.values():
            ch.close()


class Client:
    """A client of a raftq cluster.

    Args:
        addrs: gRPC addresses of nodes (``"host:port"``), a list or a
            comma-separated string: a seed list, any node will do.
        tls: ``None`` for plaintext, ``True`` for TLS with the system's
            roots, or a :class:`TLS` (CA, client certificate).
        token: a bearer token sent with every call (``--auth token``).
        timeout: the default deadline of each call in seconds, retries
            included.
        retry: the :class:`RetryPolicy`.

    The client is thread-safe; use one per process. ``close()`` (or a
    ``with`` block) stops its consumers, handing back what they hold, and
    closes its connections.
    """

    def __init__(self, addrs: Union[str, Sequence[str]], *, tls: Union[None, bool, TLS] = None,
                 token: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT,
                 retry: Optional[RetryPolicy] = None) -> None:
        seeds = [a.strip() for a in (addrs.split(",") if isinstance(addrs, str) else addrs) if a.strip()]
        if not seeds:
            raise errors.InvalidArgument("raftq Client: no address given")
        if tls is True:
            tls = TLS()
        self._tls: Optional[TLS] = tls or None
        creds = self._tls.credentials() if self._tls else None
        options = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
                   ("grpc.max_send_message_length", MAX_REQUEST_BYTES)]
        if self._tls and self._tls.server_name:
            options.append(("grpc.ssl_target_name_override", self._tls.server_name))

        def channel(addr: str) -> grpc.Channel:
            if creds is not None:
                return grpc.secure_channel(addr, creds, options=options)
            return grpc.insecure_channel(addr, options=options)

        self._nodes = _Nodes(seeds, channel)
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._closed = threading.Event()
        self._consumers_lock = threading.Lock()
        self._consumers: set[Any] = set()

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """Stop every consumer of this client (handing back deliveries no
        handler started, settling the rest) and close the connections."""
        if self._closed.is_set():
            return
        self._closed.set()
        with self._consumers_lock:
            consumers = list(self._consumers)
        for c in consumers:
            c.stop()
        for c in consumers:
            c.wait()
        self._nodes.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    # -- calls ------------------------------------------------------------

    def _invoke(self, op: str, service: str, req: Any, *, queue: Optional[str] = None,
                timeout: Optional[float] = None, retry: Optional[RetryPolicy] = None) -> Any:
        """One unary call with leader following and retries."""
        rp = retry or self.retry
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        last: Optional[grpc.RpcError] = None
        redirects = 0
        n = 0
        while True:
            n += 1
            if self._closed.is_set():
                raise errors.ClientClosed(f"raftq {op}: client closed")
            addr = self._nodes.target(queue)
            broker, cluster = self._nodes.stubs(addr)
            method = getattr(broker if service == "broker" else cluster, op)
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._final(op, last, n - 1, deadline=True)
            t = min(left, rp.attempt_timeout) if rp.attempt_timeout else left
            try:
                return method(req, timeout=t, metadata=self._metadata)
            except grpc.RpcError as e:
                if self._closed.is_set():
                    raise errors.ClientClosed(f"raftq {op}: client closed") from None
                act = self._classify(addr, queue, e, deadline)
                if act == _FAIL:
                    if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and last is not None:
                        raise self._final(op, last, n, deadline=True) from None
                    raise errors.from_rpc_error(e, op) from None
                last = e
                if n >= rp.max_attempts > 0:
                    raise self._final(op, last, n) from None
                if act == _REDIRECT and redirects == 0:
                    redirects, wait = 1, 0.0
                else:
                    redirects, wait = 0, rp.backoff(n)
                log.debug("raftq: retrying %s at %s (attempt %d, %s), next %s in %.3fs",
                          op, addr, n, e.code().name, self._nodes.target(queue), wait)
                if time.monotonic() + wait >= deadline:
                    raise self._final(op, last, n, deadline=True) from None
                if self._closed.wait(wait):
                    raise errors.ClientClosed(f"raftq {op}: client closed") from None

    @staticmethod
    def _final(op: str, last: Optional[grpc.RpcError], n: int, deadline: bool = False) -> errors.RaftqError:
        if last is None:
            return errors.DeadlineExceeded(f"raftq {op}: deadline exceeded")
        err = errors.from_rpc_error(last, op)
        if deadline:
            return errors.DeadlineExceeded(f"raftq {op}: deadline exceeded after {n} attempts (last error: {err})",
                                           error_info=err.error_info)
        err.message = f"raftq {op}: giving up after {n} attempts: {last.details()}"
        err.args = (err.message,)
        return err

    def _classify(self, addr: str, queue: Optional[str], e: grpc.RpcError, deadline: float) -> int:
        """What a failed attempt at addr means; updates the leader hints."""
        code = e.code()
        if code == grpc.StatusCode.UNAVAILABLE:
            info = errors.error_info_of(e)
            reason = info.reason if info is not None else ""
            if reason == errors.REASON_NOT_LEADER:
                leader = info.metadata.get("leader_addr", "") if info is not None else ""
                if leader and leader != addr:
                    self._nodes.set_leader(leader, queue)
                    return _REDIRECT
                self._nodes.forget(addr)  # a follower that knows no leader yet
                return _BACKOFF
            if reason == errors.REASON_NO_LEADER:
                self._nodes.forget(addr)
                return _BACKOFF
            self._nodes.unreachable(addr)  # down, or going away
            return _BACKOFF
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            if time.monotonic() >= deadline:
                return _FAIL
            self._nodes.unreachable(addr)  # only this attempt timed out: a hung node
            return _BACKOFF
        return _FAIL

    # -- queues -----------------------------------------------------------

    def create_queue(self, name: str, config: Optional[pb.QueueConfig] = None, *,
                     timeout: Optional[float] = None, **fields: Any) -> pb.QueueInfo:
        """Create a queue. ``config`` (a ``QueueConfig``) or its fields as
        keywords (``visibility_timeout_ms=5000, max_deliveries=3``); unset
        fields take the defaults. Raises :class:`~raftq.errors.AlreadyExists`."""
        cfg = pb.QueueConfig(**fields) if config is None else config
        return self._invoke("CreateQueue", "broker", pb.CreateQueueRequest(name=name, config=cfg),
                            queue=name, timeout=timeout).queue

    def update_queue(self, name: str, *, timeout: Optional[float] = None, **fields: Any) -> pb.QueueInfo:
        """Change the named ``QueueConfig`` fields (and only those)."""
        mask = field_mask_pb2.FieldMask(paths=sorted(fields))
        req = pb.UpdateQueueRequest(name=name, config=pb.QueueConfig(**fields), update_mask=mask)
        return self._invoke("UpdateQueue", "broker", req, queue=name, timeout=timeout).queue

    def get_queue(self, name: str, *, include_keys: bool = False, timeout: Optional[float] = None) -> pb.QueueInfo:
        """A queue's config and stats (with ``include_keys``, its fairness
        and throttle keys too). Raises :class:`~raftq.errors.NotFound`."""
        return self._invoke("GetQueue", "broker", pb.GetQueueRequest(name=name, include_keys=include_keys),
                            queue=name, timeout=timeout).queue

    def list_queues(self, prefix: str = "", *, timeout: Optional[float] = None) -> list[pb.QueueInfo]:
        """Every queue whose name starts with prefix (that the caller may browse)."""
        return list(self._invoke("ListQueues", "broker", pb.ListQueuesRequest(prefix=prefix), timeout=timeout).queues)

    def delete_queue(self, name: str, *, if_empty: bool = False, if_unused: bool = False,
                     timeout: Optional[float] = None) -> None:
        """Delete a queue and what it holds (``if_empty``/``if_unused``
        refuse with :class:`~raftq.errors.FailedPrecondition` instead)."""
        self._invoke("DeleteQueue", "broker", pb.DeleteQueueRequest(name=name, if_empty=if_empty, if_unused=if_unused),
                     queue=name, timeout=timeout)

    def purge_queue(self, name: str, *, timeout: Optional[float] = None) -> int:
        """Remove the ready and delayed messages; returns how many. Safe to
        retry (an idempotency key is sent)."""
        req = pb.PurgeQueueRequest(name=name, idempotency_key=new_dedup_id())
        return self._invoke("PurgeQueue", "broker", req, queue=name, timeout=timeout).purged

    def pause_queue(self, name: str, fairness_key: str = "", duration: float = 0.0, *,
                    timeout: Optional[float] = None) -> pb.QueueInfo:
        """Stop new deliveries of a queue (``fairness_key`` empty) or of one
        fairness key of it, for ``duration`` seconds (0: until
        :meth:`resume_queue`), and return the queue as it then stands
        (``paused``, ``paused_until_ms``, ``paused_keys``). Enqueues are
        accepted and leases already out run to completion; other keys keep
        flowing. A new pause replaces the old one's end, so a retry after a
        lost answer only moves the end by the retry's delay. A key the queue
        has not seen may be paused. Needs log version 17 on every voter
        (else :class:`~raftq.errors.FailedPrecondition`)."""
        req = pb.PauseQueueRequest(name=name, fairness_key=fairness_key, duration_ms=_ms(duration))
        return self._invoke("PauseQueue", "broker", req, queue=name, timeout=timeout).queue

    def resume_queue(self, name: str, fairness_key: str = "", *, timeout: Optional[float] = None) -> pb.QueueInfo:
        """End the pause of a queue (``fairness_key`` empty: the whole-queue
        pause; keys paused on their own stay paused) or of one fairness key.
        Resuming what is not paused is OK."""
        req = pb.ResumeQueueRequest(name=name, fairness_key=fairness_key)
        return self._invoke("ResumeQueue", "broker", req, queue=name, timeout=timeout).queue

    # -- messages ---------------------------------------------------------

    def enqueue(self, queue: str, payload: Union[bytes, str, Message], *, headers: Optional[Mapping[str, str]] = None,
                priority: int = 0, fairness_key: str = "", weight: int = 0, throttle_keys: Sequence[str] = (),
                delay: float = 0.0, ttl: float = 0.0, dedup_id: Optional[str] = None, concurrency_key: str = "",
                timeout: Optional[float] = None) -> str:
        """Enqueue one message and return its id once the cluster committed
        it. ``delay`` and ``ttl`` are seconds. ``dedup_id``: a retry (or a
        second call) with the same id within the queue's dedup window adds
        nothing and answers the first id; without one a random id is sent."""
        msg = payload if isinstance(payload, Message) else Message(
            payload=payload, headers=headers, priority=priority, fairness_key=fairness_key, weight=weight,
            throttle_keys=throttle_keys, delay=delay, ttl=ttl, dedup_id=dedup_id, concurrency_key=concurrency_key)
        return self.enqueue_batch(queue, [msg], timeout=timeout)[0]

    def enqueue_batch(self, queue: str, messages: Iterable[Union[Message, bytes, str]], *,
                      timeout: Optional[float] = None) -> list[str]:
        """Enqueue messages as one all-or-nothing batch; ids in order."""
        msgs = [(m if isinstance(m, Message) else Message(payload=m)).to_proto() for m in messages]
        if not msgs:
            return []
        req = pb.EnqueueRequest(queue=queue, messages=msgs)
        if req.ByteSize() > MAX_REQUEST_BYTES:
            raise errors.InvalidArgument(
                f"raftq Enqueue: a batch of {len(msgs)} messages is {req.ByteSize()} bytes encoded, over the "
                f"{MAX_REQUEST_BYTES} a node reads in one request; send fewer messages per call")
        return list(self._invoke("Enqueue", "broker", req, queue=queue, timeout=timeout).message_ids)

    def peek(self, queue: str, limit: int = 10, *, dead_letter: bool = False, fairness_key: str = "",
             reason_contains: str = "", older_than: float = 0.0, after_id: str = "",
             timeout: Optional[float] = None) -> list[pb.Delivery]:
        """The next ready messages in delivery order, without leasing them
        (``dead_letter``: those in the queue's dead-letter queue). With any
        filter (``fairness_key``, ``reason_contains``, which matches
        ``last_error`` or ``dead_letter_reason``, ``older_than`` seconds
        since dead-lettering) or ``after_id``, in id order, so pass the last
        id you got as the next ``after_id`` to page."""
        req = pb.PeekRequest(queue=queue, limit=limit, dead_letter=dead_letter, fairness_key=fairness_key,
                             reason_contains=reason_contains, older_than_ms=_ms(older_than), after_id=after_id)
        return list(self._invoke("Peek", "broker", req, queue=queue, timeout=timeout).messages)

    def get_message(self, queue: str, message_id: str, *, timeout: Optional[float] = None) -> pb.GetMessageResponse:
        """One message's life story: ``state`` (``ready``, ``delayed``,
        ``in_flight``, ``dead_lettered``, or ``acked`` while its ack is
        remembered, without its payload), its last attempts and
        ``last_error`` (in ``message``) and its ``events``, oldest first.
        A message of the queue that was dead-lettered is found through it.
        Raises :class:`~raftq.errors.NotFound`."""
        req = pb.GetMessageRequest(queue=queue, message_id=message_id)
        return self._invoke("GetMessage", "broker", req, queue=queue, timeout=timeout)

    def ack(self, queue: str, *leases: LeaseRefLike, timeout: Optional[float] = None) -> list[pb.ItemResult]:
        """Ack leased messages (deliveries, or ``(id, token)`` pairs); one
        ``ItemResult`` each. Safe to retry."""
        req = pb.AckRequest(queue=queue, acks=[lease_ref(x) for x in leases])
        return list(self._invoke("Ack", "broker", req, queue=queue, timeout=timeout).results)

    def nack(self, queue: str, *leases: LeaseRefLike, reason: str = "", delay: float = 0.0,
             dead_letter: bool = False, unprocessed: bool = False,
             timeout: Optional[float] = None) -> list[pb.ItemResult]:
        """Give leased messages back: redelivered after ``delay`` seconds,
        or straight to the dead-letter queue; ``unprocessed`` does not count
        the delivery as an attempt. ``reason`` is cut to 1,024 bytes."""
        from raftq.consumer import truncate_reason
        items = [pb.NackItem(message_id=r.message_id, lease_token=r.lease_token, delay_ms=_ms(delay),
                             reason=truncate_reason(reason), dead_letter=dead_letter, unprocessed=unprocessed)
                 for r in (lease_ref(x) for x in leases)]
        return self._nack_items(queue, items, timeout=timeout)

    def _nack_items(self, queue: str, items: list[pb.NackItem], *, timeout: Optional[float] = None,
                    retry: Optional[RetryPolicy] = None) -> list[pb.ItemResult]:
        return list(self._invoke("Nack", "broker", pb.NackRequest(queue=queue, nacks=items),
                                 queue=queue, timeout=timeout, retry=retry).results)

    def extend_lease(self, queue: str, *leases: LeaseRefLike, extend_by: float = 0.0,
                     timeout: Optional[float] = None, retry: Optional[RetryPolicy] = None) -> pb.ExtendLeaseResponse:
        """Set the leases' deadlines to now + ``extend_by`` seconds (0: the
        queue's visibility timeout)."""
        req = pb.ExtendLeaseRequest(queue=queue, leases=[lease_ref(x) for x in leases], extend_by_ms=_ms(extend_by))
        return self._invoke("ExtendLease", "broker", req, queue=queue, timeout=timeout, retry=retry)

    def redrive(self, queue: str, limit: int = 0, *, fairness_key: str = "", reason_contains: str = "",
                older_than: float = 0.0, message_ids: Sequence[str] = (), dry_run: bool = False,
                rate_per_sec: float = 0.0, timeout: Optional[float] = None) -> int:
        """Move up to ``limit`` (0 = all) messages from the queue's DLQ back;
        returns how many moved. Filters as :meth:`peek`'s; ``message_ids``:
        exactly these (ids not in the DLQ are skipped); ``dry_run``: count
        only, nothing moves; ``rate_per_sec``: a job the leader runs at that
        rate (it survives failover; ``get_queue(...).redrives`` shows it, and
        the count is what it will move). Safe to retry (an idempotency key
        is sent)."""
        return self.redrive_job(queue, limit, fairness_key=fairness_key, reason_contains=reason_contains,
                                older_than=older_than, message_ids=message_ids, dry_run=dry_run,
                                rate_per_sec=rate_per_sec, timeout=timeout).moved

    def redrive_job(self, queue: str, limit: int = 0, *, fairness_key: str = "", reason_contains: str = "",
                    older_than: float = 0.0, message_ids: Sequence[str] = (), dry_run: bool = False,
                    rate_per_sec: float = 0.0, timeout: Optional[float] = None) -> pb.RedriveResponse:
        """:meth:`redrive` answering the whole ``RedriveResponse`` (a
        rate-limited redrive names its ``job_id``)."""
        req = pb.RedriveRequest(queue=queue, limit=limit, idempotency_key=new_dedup_id(), fairness_key=fairness_key,
                                reason_contains=reason_contains, older_than_ms=_ms(older_than),
                                message_ids=list(message_ids), dry_run=dry_run, rate_per_sec=rate_per_sec)
        return self._invoke("Redrive", "broker", req, queue=queue, timeout=timeout)

    def cancel_redrive(self, queue: str, job_id: str, *, timeout: Optional[float] = None) -> int:
        """End a rate-limited redrive job of the queue; what it moved stays
        moved, and that count is returned. Raises
        :class:`~raftq.errors.NotFound` once the job is done."""
        req = pb.RedriveRequest(queue=queue, cancel_job=job_id, idempotency_key=new_dedup_id())
        return self._invoke("Redrive", "broker", req, queue=queue, timeout=timeout).moved

    def list_consumers(self, queue: str, *, timeout: Optional[float] = None) -> list[pb.ConsumerInfo]:
        """The Lease streams registered on a queue, as the leader sees them."""
        return list(self._invoke("ListConsumers", "broker", pb.ListConsumersRequest(queue=queue),
                                 queue=queue, timeout=timeout).consumers)

    def cluster_status(self, *, local_only: bool = False, timeout: Optional[float] = None,
                       retry: Optional[RetryPolicy] = None) -> pb.StatusResponse:
        """The cluster's leader and nodes as the node asked sees them; the
        nodes' addresses join the seed list."""
        st = self._invoke("Status", "cluster", pb.StatusRequest(local_only=local_only), timeout=timeout, retry=retry)
        self._nodes.learn(st.leader_addr, *[n.grpc_addr for n in st.nodes])
        return st

    def leader_of(self, queue: str) -> str:
        """The leader address the client last learnt for queue ("" if none)."""
        return self._nodes.leader_of(queue)

    # -- consumers --------------------------------------------------------

    def consume(self, queue: str, handler: "Handler", *, max_in_flight: int = 64,
                concurrency: Optional[int] = None, visibility_timeout: Optional[float] = None,
                nack_delay: float = 0.0, name: Optional[str] = None, stop: Optional[threading.Event] = None,
                handle_sigterm: bool = True, shutdown_timeout: float = 10.0) -> dict[str, Any]:
        """Run ``handler(msg)`` on each message of ``queue``, on
        ``concurrency`` threads (default ``max_in_flight``), until ``stop``
        is set, the client is closed, or SIGTERM (when called from the main
        thread and ``handle_sigterm``). Returning acks the message, raising
        nacks it with the exception's text (``DeadLetter``: to the DLQ;
        ``HandBack``: back uncounted); leases are extended while it runs.
        On the way out what no handler started is handed back. Returns the
        consumer's stats; raises what ended the stream for good
        (``NotFound``, ``PermissionDenied``). See :mod:`raftq.consumer`."""
        from raftq.consumer import Consumer
        return Consumer(self, queue, max_in_flight=max_in_flight, visibility_timeout=visibility_timeout,
                 nack_delay=nack_delay, name=name, shutdown_timeout=shutdown_timeout).run(
                     handler, concurrency=concurrency, stop=stop, handle_sigterm=handle_sigterm)

    def subscribe(self, queue: str, *, max_in_flight: int = 64, visibility_timeout: Optional[float] = None,
                  nack_delay: float = 0.0, name: Optional[str] = None, handle_sigterm: bool = True,
                  shutdown_timeout: float = 10.0) -> "Subscription":
        """The iterator form of :meth:`consume`: ``with client.subscribe(q)
        as msgs: for m in msgs: ...``. A message is acked when the loop
        moves on (or leaves by ``break``), nacked with the exception's text
        when the ``with`` block leaves by an exception, unless the body
        settled it itself (``m.ack()``, ``m.nack(...)``)."""
        from raftq.consumer import Consumer, Subscription
        c = Consumer(self, queue, max_in_flight=max_in_flight, visibility_timeout=visibility_timeout,
                     nack_delay=nack_delay, name=name, shutdown_timeout=shutdown_timeout)
        return Subscription(c, handle_sigterm=handle_sigterm)

    def _register(self, consumer: Any) -> None:
        with self._consumers_lock:
            if self._closed.is_set():
                raise errors.ClientClosed("raftq: client closed")
            self._consumers.add(consumer)

    def _unregister(self, consumer: Any) -> None:
        with self._consumers_lock:
            self._consumers.discard(consumer)


__all__ = ["Client", "TLS", "RetryPolicy", "Message", "new_dedup_id", "lease_ref",
           "MAX_RECEIVE_BYTES", "MAX_REQUEST_BYTES", "DEFAULT_TIMEOUT"]
