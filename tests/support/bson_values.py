"""BSON sample values the versioning and bson_values tests share."""

from __future__ import annotations

import datetime

from bson import ObjectId

OID = ObjectId("64b7f0c2a1b2c3d4e5f60718")


UTC = datetime.UTC


WHEN = datetime.datetime(2024, 5, 1, 12, 30, 15, 123000, tzinfo=UTC)


NAN = float("nan")
