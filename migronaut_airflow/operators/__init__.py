"""Operators: thin tasks over the core's coordinator steps, lane slices and controls."""
