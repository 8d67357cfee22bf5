"""Step migrations for tests: one that reports a ``total``, one step per short slice."""

from __future__ import annotations

#: Ten ``orders`` a step, one step a slice (it outlasts a 100 ms slice), reporting
#: ``processed`` and, as ``total``, how many orders there are.
COUNTED_STEPS = """
import time

background = {"collection": "orders", "from": 1, "to": 2, "mode": "step"}

def step(ctx):
    after = ctx.checkpoint if ctx.checkpoint is not None else -1
    docs = list(ctx.db.orders.find({"_id": {"$gt": after}}).sort("_id", 1).limit(10))
    for doc in docs:
        ctx.db.orders.update_one({"_id": doc["_id"]}, {"$set": {"seen": True}})
    time.sleep(0.3)
    last = docs[-1]["_id"] if docs else after
    total = ctx.db.orders.count_documents({})
    return {"checkpoint": last, "done": len(docs) < 10, "processed": len(docs), "total": total}
"""

#: The same without a ``total``.
UNCOUNTED_STEPS = COUNTED_STEPS.replace(', "total": total', "")
