"""Flow control (issue 23) through the Python client against a real
3-node cluster: pause and resume, concurrency keys and caps, the retry
policy, a message's story and the dead-letter workbench."""

from __future__ import annotations

import pytest

import raftq
from conftest import wait_for


def test_pause_and_resume(client: raftq.Client, qname: str) -> None:
    client.create_queue(qname, visibility_timeout_ms=30000)
    info = client.pause_queue(qname, fairness_key="tenant-a")
    assert not info.paused
    assert [(k.key, k.until_ms) for k in info.paused_keys] == [("tenant-a", 0)]
    a = client.enqueue(qname, b"a", fairness_key="tenant-a")
    b = client.enqueue(qname, b"b", fairness_key="tenant-b")
    with client.subscribe(qname, max_in_flight=10, handle_sigterm=False) as msgs:
        it = iter(msgs)
        m = next(it)
        assert m.id == b, "the paused key's older message was delivered"
        m.ack()  # sent in the consumer's next batch
        wait_for("b's ack to apply", lambda: client.get_queue(qname).stats.acked_total == 1)
        st = client.get_queue(qname).stats
        assert (st.ready, st.in_flight) == (1, 0), "the paused key's message left the queue"
        info = client.resume_queue(qname, fairness_key="tenant-a")
        assert not info.paused_keys
        m = next(it)
        assert m.id == a
        m.ack()
    # Resuming what is not paused is OK.
    assert not client.resume_queue(qname, fairness_key="tenant-a").paused_keys

    # A timed pause of the whole queue ends by itself.
    info = client.pause_queue(qname, duration=0.3)
    assert info.paused and info.paused_until_ms > 0
    wait_for("the timed pause to end by itself", lambda: not client.get_queue(qname).paused, timeout=15)

    with pytest.raises(raftq.InvalidArgument):
        client.pause_queue(qname, duration=-1)
    with pytest.raises(raftq.NotFound):
        client.pause_queue(qname + "-missing")


def test_concurrency_keys_and_retry_policy(client: raftq.Client, qname: str) -> None:
    retry = raftq.pb.RetryPolicy(initial_delay_ms=100, max_delay_ms=60000, multiplier=2.0, jitter=0.0)
    info = client.create_queue(qname, visibility_timeout_ms=30000, concurrency_limit=2,
                               concurrency_limits={"solo": 1}, retry=retry)
    assert info.config.concurrency_limit == 2 and dict(info.config.concurrency_limits) == {"solo": 1}
    assert info.config.retry.multiplier == 2.0 and info.config.retry.max_delay_ms == 60000
    info = client.update_queue(qname, concurrency_limit=3)
    assert info.config.concurrency_limit == 3 and dict(info.config.concurrency_limits) == {"solo": 1}
    with pytest.raises(raftq.InvalidArgument):
        client.update_queue(qname, retry=raftq.pb.RetryPolicy(initial_delay_ms=10, max_delay_ms=100, multiplier=0.5))

    first = client.enqueue(qname, b"first", concurrency_key="solo")
    second = client.enqueue_batch(qname, [raftq.Message(payload=b"second", concurrency_key="solo")])[0]
    with client.subscribe(qname, max_in_flight=10, handle_sigterm=False) as msgs:
        it = iter(msgs)
        m = next(it)
        assert m.id == first
        st = client.get_queue(qname).stats
        assert (st.in_flight, st.ready) == (1, 1), "a key capped at 1 had two in flight"
        # A nack without its own delay waits the policy's first backoff,
        # and the head of a cap-1 key is delivered again before the next.
        m.nack("try again")
        m = next(it)
        assert m.id == first and m.attempt == 2 and m.last_error == "try again"
        assert [a.outcome for a in m.history] == ["nacked"]
        m.ack()
        m = next(it)
        assert m.id == second
        m.ack()


def test_message_story_and_dead_letter_workbench(client: raftq.Client, qname: str) -> None:
    client.create_queue(qname, visibility_timeout_ms=30000, max_deliveries=5)
    mid = client.enqueue(qname, b"x", fairness_key="t1")
    story = client.get_message(qname, mid)
    assert story.state == "ready" and story.message.id == mid
    assert [e.kind for e in story.events] == ["enqueued"]
    with client.subscribe(qname, max_in_flight=1, handle_sigterm=False, name="py-worker") as msgs:
        m = next(iter(msgs))
        assert client.get_message(qname, mid).state == "in_flight"
        m.nack("boom: disk full", dead_letter=True)
        wait_for("the message to be dead-lettered", lambda: client.get_queue(qname).stats.dead_lettered == 1)
    story = client.get_message(qname, mid)
    assert story.state == "dead_lettered" and story.message.last_error == "boom: disk full"
    assert [(a.attempt, a.consumer, a.outcome) for a in story.message.history] == [(1, "py-worker", "dead_lettered")]
    assert [e.kind for e in story.events][:2] == ["enqueued", "leased"]
    assert "py-worker" in story.events[1].detail

    assert [d.id for d in client.peek(qname, dead_letter=True, reason_contains="disk full")] == [mid]
    assert client.peek(qname, dead_letter=True, reason_contains="no such reason") == []
    assert [d.id for d in client.peek(qname, dead_letter=True, fairness_key="t1")] == [mid]
    assert client.peek(qname, dead_letter=True, after_id=mid) == []
    assert client.redrive(qname, dry_run=True) == 1
    assert client.get_queue(qname).stats.dead_lettered == 1, "a dry run moved something"
    assert client.redrive(qname, message_ids=["00000000000000ff"]) == 0
    assert client.redrive(qname, message_ids=[mid]) == 1
    story = client.get_message(qname, mid)
    assert story.state == "ready" and "redriven" in [e.kind for e in story.events]
    with pytest.raises(raftq.NotFound):
        client.get_message(qname, "00000000000000ff")
    with pytest.raises(raftq.NotFound):
        client.cancel_redrive(qname, "00000000000000ff")
