"""Drift: old-shape documents written after a background migration completed.

- :mod:`.verify` — a periodic probe of each completed migration (poll mode),
  reopening it or only reporting;
- :mod:`.watch` — a change-stream watcher that upgrades such writes moments
  after they land (stream mode), one leader per collection;
- :mod:`.events` — an async wait on one collection's change stream that returns
  a signal when such writes land, for an event-driven scheduler (Airflow's
  ``AssetWatcher``) to apply the on-drift policy.
"""
