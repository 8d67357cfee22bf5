"""Background migrations: online rewrites of a collection, in partitions, by parallel lanes.

All coordination state lives in MongoDB (:mod:`.store`), so any number of
coordinators and lanes in any number of processes may run at once and every
step is idempotent. Data flows coordinator → store ↔ lane → engine → store;
nothing reaches back up. ``docs/architecture.md`` is the map; the layers, top
down (each may import only the ones below it, as the import contracts in
``pyproject.toml`` enforce):

- :mod:`.registration`, :mod:`.loading` — what the kit and the runner plug in;
- :mod:`.audit`, :mod:`.drift`, :mod:`.dry_run` — read-mostly tools over the rest;
- :mod:`.lanes` — a slice of one lane, and :func:`~.lanes.driver.drive` (a
  coordinator and N lanes in one process);
- :mod:`.coordinator` — one coordinator step: plan, drain, finalize;
- :mod:`.control` — operators' controls (pause, resume, cancel, retry, repin, unlock);
- :mod:`.lifecycle`, :mod:`.views` — status moves the engine makes itself; status views;
- :mod:`.engine` — the batch write path;
- :mod:`.job` — a migration as a worker runs it (spec, functions, partitioner, hint);
- :mod:`.indexes` — the version-index rule and converge;
- :mod:`.runtime` — the wiring one kit shares: database, store, events, caches;
- :mod:`.store`, :mod:`.planning`, :mod:`.throttle`, :mod:`.events` — state,
  partitioning, pacing, events;
- :mod:`.spec`, :mod:`.states` — a migration's validated declaration; the status
  state machine every move consults;
- :mod:`.backoff`, :mod:`.warn_once`, :mod:`.telemetry` — small shared tools;
- :mod:`.cancel` — the cancellation every sleep wakes on.
"""
