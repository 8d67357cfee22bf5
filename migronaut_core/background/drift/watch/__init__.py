"""The live drift watcher: old-shape writes upgraded moments after they land.

After a background migration completed, an old release of the application (a pod
not yet redeployed, a forgotten worker) may still write the old shape. The poll
(:func:`~migronaut_core.background.drift.verify.verify`) finds such documents at its next
run; the watcher follows a change stream per collection instead and upgrades them
within moments, through the lanes' write path
(:func:`~migronaut_core.background.engine.batch.apply_batch`: the registered spec, the
file's transform, the version guard, only changed fields written).

Guarantees:

- One leader per collection across every process: the holder of the
  ``watch:<collection>`` lock (TTL, heartbeat, fencing token). Other processes
  stand by, try the lock now and then, and take over once a dead leader's lock
  lapses by the server's clock.
- At least once: the leader saves the stream's resume token in the watch
  collection after each batch it served (and the idle post-batch token now and
  then), so a new leader resumes after the last served event; replayed events
  are harmless (the version guard makes a second upgrade a no-op).
- No gap and no overlap on a fresh start (no saved token, or its history is gone
  because the oplog rolled over): the stream starts just after a cluster time,
  and the collection is probed with a snapshot read at that time. Only when the
  probe finds old-shape documents (written before the stream, so no stream will
  see them) does a verify pass reopen or report their migrations; writes racing
  the start are the stream's. A migration that completes while a stream runs
  joins it the same way (a new stream after a cluster time, the old one served
  up to it, the newcomer probed as of it).
- It only upgrades with completed forward migrations, applied in order of their
  source version (1→2, then 2→3), and stands aside on a collection while a revert
  is registered there and not finished.
- Logs, events and status never carry document values, ``_id``\\ s or the resume
  token: collection and migration names, states and counts only.

Modules: ``settings`` (options and the change-stream check), ``edges`` (what a
collection's watcher serves, and the stream's pipeline), ``follower`` (one
collection's thread: leadership and the stream loop), ``upgrade`` (rewriting
what a stream brought), ``watcher`` (the handle, :func:`start_watch`). Import
the names below from this package; the watcher's rows live in
:mod:`migronaut_core.background.store.watch`.
"""

from __future__ import annotations

from migronaut_core.background.drift.watch.edges import (
    Edge,
    edge_signature,
    edge_states,
    watch_pipeline,
    watched_collections,
)
from migronaut_core.background.drift.watch.follower import MAX_BACKOFF_SECONDS, WatchState
from migronaut_core.background.drift.watch.settings import (
    WatchSettings,
    require_change_streams,
    watch_settings,
)
from migronaut_core.background.drift.watch.upgrade import WATCH_ACTOR
from migronaut_core.background.drift.watch.watcher import Watcher, start_watch

__all__ = [
    "MAX_BACKOFF_SECONDS",
    "WATCH_ACTOR",
    "Edge",
    "WatchSettings",
    "WatchState",
    "Watcher",
    "edge_signature",
    "edge_states",
    "require_change_streams",
    "start_watch",
    "watch_pipeline",
    "watch_settings",
    "watched_collections",
]
