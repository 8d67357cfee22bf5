"""``python -m migronaut_dev.mongod``: see :mod:`migronaut_dev.mongod.cli`."""

from migronaut_dev.mongod.cli import main

raise SystemExit(main())
