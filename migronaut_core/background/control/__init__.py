"""Operators' controls, over the status state machine they share with the engine.

- :mod:`migronaut_core.background.states` — where a migration can be and where
  each action takes it (pure: no database; below the engine, so its own moves
  read the same table);
- :mod:`.actions` — the controls themselves (pause, resume, cancel, retry,
  retry from start, repin, unlock), each a compare-and-set on the state recorded in its
  history with who asked and why.
"""
