"""A process of lease claimers for the store's concurrency tests.

Usage: python -m tests.support.claimer_process URI DB NAME GENERATION PLAN THREADS SECONDS
Each thread claims, holds briefly, releases, until SECONDS have passed; prints
how many claims succeeded.
"""

from __future__ import annotations

import sys
import threading
import time

from pymongo import MongoClient

from migronaut_core.background.store import BackgroundStore
from migronaut_core.config import BackgroundCollections


def main(argv: list[str]) -> int:
    uri, database, name, generation, plan, threads, seconds = argv
    client: MongoClient[dict] = MongoClient(uri)
    store = BackgroundStore(
        client[database], BackgroundCollections.from_prefix("migronaut_background")
    )
    claims = 0
    lock = threading.Lock()
    until = time.monotonic() + float(seconds)

    def claimer(index: int) -> None:
        nonlocal claims
        while time.monotonic() < until:
            claim = store.leases.claim(
                name,
                generation=int(generation),
                plan=plan,
                max_parallel=3,
                ttl_ms=30_000,
                owner=f"p{index}",
            )
            if claim.lease is None:
                time.sleep(0.005)
                continue
            with lock:
                claims += 1
            time.sleep(0.01)
            store.leases.release(claim.lease)

    workers = [threading.Thread(target=claimer, args=(i,)) for i in range(int(threads))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(claims)
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
