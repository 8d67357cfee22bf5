"""Triggers the triggerer runs: the lanes poll (async MongoDB reads) and a plain delay."""
