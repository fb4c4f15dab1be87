#!/usr/bin/python3
"""The peer of rdzv_scale: the same fan-in on PyTorch's TCPStore.

N simulated ranks on loopback: rank 0 hosts the store (is_master) in a
process of its own, the others are threads of this one; every rank connects, sets its key, waits on a
barrier (add + wait on a key the last arrival sets, the cheapest barrier
TCPStore has), reads rank 0's key.  Prints the same columns as
build/bench/rdzv_scale: time to the last rank's completion and the median.

  /usr/bin/python3 bench/rdzv_torch.py 256 1024 4096
"""
import datetime
import multiprocessing
import os
import resource
import socket
import sys
import threading
import time

import torch.distributed as dist


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rank_main(r, world, port, t0, timeout, done, errors, stores):
    try:
        st = dist.TCPStore("127.0.0.1", port, world, r == 0, timeout,
                           wait_for_workers=False)
        stores.append(st)   # kept until every rank is done: closing early is leaving
        st.set(f"addr/{r}", f"rank-{r}")
        if st.add("joined", 1) == world:
            st.set("go", "1")
        st.wait(["go"])
        if st.get("addr/0") != b"rank-0":
            raise RuntimeError(f"rank {r} read a wrong value of addr/0")
        done[r] = time.monotonic() - t0
    except Exception as e:  # noqa: BLE001 - reported below
        errors.append(f"rank {r}: {e}")


def master(world, port, t0, timeout, conn):
    """Rank 0 in a process of its own, as on a cluster (and so the server's
    descriptors do not count against the clients' process)."""
    done, errors, stores = [None], [], []
    rank_main(0, world, port, t0, timeout, done, errors, stores)
    conn.send((done[0], errors))
    conn.recv()   # the clients are done: the store may go
    os._exit(0)


# Every TCPStore made stays referenced until os._exit: destroying a thousand
# of them (each joins its own listener thread) takes longer than the run.
KEEP = []


def run(world, timeout_s=120):
    port = free_port()
    done = [None] * world
    errors = []
    stores = []
    KEEP.append(stores)
    timeout = datetime.timedelta(seconds=timeout_s)
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    t0 = time.monotonic()   # CLOCK_MONOTONIC: the same clock in both processes
    # Rank 0 first: TCPStore's constructor keeps the GIL while it retries a
    # connection, so client threads started before the master would stall
    # one another (rdzv_scale starts its clients first).
    m = ctx.Process(target=master, args=(world, port, t0, timeout, child), daemon=True)
    m.start()
    threading.stack_size(256 * 1024)
    threads = [threading.Thread(target=rank_main,
                                args=(r, world, port, t0, timeout, done, errors, stores),
                                daemon=True)
               for r in range(1, world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if parent.poll(timeout_s):
        done[0], errs0 = parent.recv()
        errors[:0] = errs0
    else:
        errors.insert(0, "rank 0: no answer")
    parent.send("done")
    m.join(10)
    ok = sorted(d for d in done if d is not None)
    for e in errors[:3]:
        print(f"rdzv_torch: {e}", file=sys.stderr)
    print(f"{world:<8d} {ok[-1] if ok else 0:10.3f} {ok[len(ok) // 2] if ok else 0:10.3f} "
          f"{world - len(ok):8d}", flush=True)
    return len(ok) == world


def main():
    worlds = [int(a) for a in sys.argv[1:]] or [256]
    # TCPStore needs more than one descriptor per client on each side: ask
    # for 16 per rank (root may raise the hard limit), else take the hard one
    want = 16 * max(worlds) + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(want, soft), max(want, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"{'ranks':<8s} {'last_s':>10s} {'median_s':>10s} {'failed':>8s}")
    ok = all([run(w) for w in worlds])
    sys.stdout.flush()
    os._exit(0 if ok else 1)   # see KEEP


if __name__ == "__main__":
    main()
