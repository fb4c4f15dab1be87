#!/usr/bin/python3
"""The peer of rdzv_scale: the same fan-in on PyTorch's TCPStore.

N simulated ranks as threads on loopback, all started at once; rank 0
hosts the store (is_master), every rank connects, sets its key, waits on a
barrier (add + wait on a key the last arrival sets, the cheapest barrier
TCPStore has), reads rank 0's key.  Prints the same columns as
build/bench/rdzv_scale: time to the last rank's completion and the median.

  /usr/bin/python3 bench/rdzv_torch.py 256 1024 4096
"""
import datetime
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


def run(world, timeout_s=120):
    port = free_port()
    done = [None] * world
    errors = []
    stores = [None] * world   # kept until every rank is done: closing early is leaving
    t0 = time.monotonic()
    timeout = datetime.timedelta(seconds=timeout_s)

    def rank_main(r):
        try:
            st = dist.TCPStore("127.0.0.1", port, world, r == 0, timeout,
                               wait_for_workers=False)
            stores[r] = st
            st.set(f"addr/{r}", f"rank-{r}")
            if st.add("joined", 1) == world:
                st.set("go", "1")
            st.wait(["go"])
            if st.get("addr/0") != b"rank-0":
                raise RuntimeError(f"rank {r} read a wrong value of addr/0")
            done[r] = time.monotonic() - t0
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"rank {r}: {e}")

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True)
               for r in range(world)]
    threading.stack_size(256 * 1024)
    # clients first, as in rdzv_scale: they must find rank 0 by retrying
    for t in reversed(threads):
        t.start()
    for t in threads:
        t.join()
    ok = sorted(d for d in done if d is not None)
    for e in errors[:3]:
        print(f"rdzv_torch: {e}", file=sys.stderr)
    print(f"{world:<8d} {ok[-1] if ok else 0:10.3f} {ok[len(ok) // 2] if ok else 0:10.3f} "
          f"{world - len(ok):8d}", flush=True)
    return len(ok) == world


def main():
    worlds = [int(a) for a in sys.argv[1:]] or [256]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"{'ranks':<8s} {'last_s':>10s} {'median_s':>10s} {'failed':>8s}")
    ok = all([run(w) for w in worlds])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
