"""A worker pool through kill -9 of the leader: nothing lost, each acked once."""

from __future__ import annotations

import threading
import time

import raftq
from conftest import Cluster, wait_for

N = 400


def test_worker_pool_survives_kill_9_of_the_leader(fresh_cluster: Cluster) -> None:
    cluster = fresh_cluster
    with cluster.client() as producer:
        producer.create_queue("jobs")
        payload = b"x" * 1024
        ids = []
        for i in range(0, N, 50):
            ids += producer.enqueue_batch("jobs", [raftq.Message(payload=payload, headers={"n": str(j)})
                                                   for j in range(i, i + 50)])
    assert len(set(ids)) == N

    processed: dict[str, int] = {}
    lock = threading.Lock()
    killed = threading.Event()

    def handler(m: raftq.Received) -> None:
        time.sleep(0.002)  # the work
        with lock:
            processed[m.id] = processed.get(m.id, 0) + 1

    leader = cluster.leader()
    worker = raftq.Client(cluster.addrs)  # every node a seed: the leader will die
    stop = threading.Event()
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["stats"] = worker.consume("jobs", handler, max_in_flight=32, concurrency=8, stop=stop,
                                          handle_sigterm=False)
        except BaseException as e:
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        wait_for("a quarter processed", lambda: len(processed) >= N // 4, timeout=60)
        leader.kill()  # kill -9, mid-run
        killed.set()
        survivors = [n for n in cluster.nodes if n is not leader]
        wait_for("every message processed", lambda: len(processed) == N, timeout=90, interval=0.2)
        with raftq.Client([n.grpc for n in survivors]) as check:
            def drained() -> object:
                st = check.get_queue("jobs").stats
                return st if st.acked_total == N and st.ready == 0 and st.in_flight == 0 else None
            st = wait_for("every message acked", drained, timeout=60, interval=0.2)
    finally:
        stop.set()
        t.join(60)
        worker.close()
    assert not t.is_alive()
    assert "error" not in out, out.get("error")
    stats = out["stats"]
    assert set(processed) == set(ids)  # nothing lost
    acked = stats["acked"]  # type: ignore[index]
    assert set(acked) == set(ids) and all(n == 1 for n in acked.values()), \
        {k: v for k, v in acked.items() if v != 1}  # each acked exactly once
    assert st.enqueued_total == N and st.dead_lettered == 0, st  # type: ignore[attr-defined]
