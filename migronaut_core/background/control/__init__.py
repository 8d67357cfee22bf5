"""Operators' controls and the status state machine they move.

- :mod:`.states` — where a migration can be and where each action takes it
  (pure: no database);
- :mod:`.actions` — the controls themselves (pause, resume, cancel, retry,
  reopen, repin, unlock), each a compare-and-set on the state recorded in its
  history with who asked and why.
"""
