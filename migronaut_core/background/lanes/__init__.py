"""Lanes: the workers that claim partitions and run the engine on them.

- :mod:`.lane` — one slice: claim a partition and a slot, work it under a kept
  lease until the slice ends, release, and answer an outcome;
- :mod:`.driver` — one process driving a migration: coordinator steps and lane
  threads, with a back-off after failed slices and steps;
- :mod:`.waiting` — when waiting for one pass's lanes is over (the judgement
  behind Airflow's sensor).
"""
