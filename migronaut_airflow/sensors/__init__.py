"""Deferrable sensors: a pass's lanes (``lanes``), a migration's milestone (``migration``)."""
