"""``python -m migronaut_core.cli``: the ``migronaut`` command (see :mod:`migronaut_core.cli`)."""

from __future__ import annotations

import sys

from migronaut_core.cli.entry_point import main

sys.exit(main())
