"""Drift: old-shape documents written after a background migration completed.

- :mod:`.verify` — a periodic probe of each completed migration (poll mode),
  reopening it or only reporting;
- :mod:`.watch` — a change-stream watcher that upgrades such writes moments
  after they land (stream mode), one leader per collection.
"""
