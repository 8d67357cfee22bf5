"""The two guarded write shapes agree with each other on the real server, case by case.

The engine writes with an ``_id``-keyed ``$replaceWith`` pipeline on MongoDB 5.0+
and with the ``{_id, version, revision}`` filter elsewhere. Both must apply a
rewrite exactly when the document is still as it was read, and leave the same
document behind (field order and BSON types included).
"""

from __future__ import annotations

from typing import Any

import pytest
from bson import Int64
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo import UpdateOne
from pymongo.database import Database

from migronaut_core.versioning import exact_value, guarded_pipeline, occ_filter, stamped_diff

Doc = dict[str, Any]


def _write_both(
    db: Database[Doc],
    read: Doc,
    stored: Doc,
    after: Doc,
    *,
    version: int,
    target: int,
    revision_field: str | None = "rev",
) -> tuple[tuple[int, RawBSONDocument], tuple[int, RawBSONDocument]]:
    """Rewrite ``stored`` (read earlier as ``read``) both ways; (modified, result) for each."""
    update = stamped_diff(
        read, after, field="_v", target_version=target, revision_field=revision_field
    )
    shapes = {
        "filter": UpdateOne(
            occ_filter(read, field="_v", version=version, revision_field=revision_field), update
        ),
        "pipeline": UpdateOne(
            {"_id": exact_value(read["_id"])},
            guarded_pipeline(
                read, update, field="_v", version=version, revision_field=revision_field
            ),
        ),
    }
    outcomes = []
    for name, op in shapes.items():
        collection = db[name]
        collection.insert_one(dict(stored))
        modified = collection.bulk_write([op], ordered=False).modified_count
        found = db.get_collection(name, codec_options=RAW).find_one({})
        outcomes.append((modified, found))
    return outcomes[0], outcomes[1]


RAW: CodecOptions[RawBSONDocument] = CodecOptions(document_class=RawBSONDocument)

BASE: Doc = {"_id": 1, "name": "Ada Lovelace", "_v": 1, "rev": 3, "keep": Int64(7)}
SPLIT: Doc = {"_id": 1, "first": "Ada", "last": "Lovelace", "_v": 1, "rev": 3, "keep": Int64(7)}


def _with(doc: Doc, **changes: Any) -> Doc:
    out = {**doc, **changes}
    return {key: value for key, value in out.items() if value is not _MISSING}


_MISSING = object()


CASES: list[tuple[str, Doc, Doc, Doc, int, int, bool]] = [
    # label, read, stored at write time, transform result, source, target, applies
    ("unchanged", BASE, BASE, SPLIT, 1, 2, True),
    ("revision bumped", BASE, _with(BASE, rev=4), SPLIT, 1, 2, False),
    ("version moved", BASE, _with(BASE, _v=2), SPLIT, 1, 2, False),
    ("int64 revision", _with(BASE, rev=Int64(3)), _with(BASE, rev=Int64(3)), SPLIT, 1, 2, True),
    ("double revision", _with(BASE, rev=3.0), _with(BASE, rev=3.0), SPLIT, 1, 2, True),
    ("missing revision", _with(BASE, rev=_MISSING), _with(BASE, rev=_MISSING), SPLIT, 1, 2, True),
    ("null revision", _with(BASE, rev=None), _with(BASE, rev=None), SPLIT, 1, 2, True),
    ("revision set to 0", _with(BASE, rev=None), _with(BASE, rev=0), SPLIT, 1, 2, False),
    ("unversioned", _with(BASE, _v=_MISSING), _with(BASE, _v=_MISSING), SPLIT, 0, 1, True),
    ("null version", _with(BASE, _v=None), _with(BASE, _v=None), SPLIT, 0, 1, True),
    ("explicit version 0", _with(BASE, _v=None), _with(BASE, _v=0), SPLIT, 0, 1, False),
    ("revert to 0", _with(BASE, _v=2), _with(BASE, _v=2), BASE, 2, 0, True),
    ("deleted", BASE, {"_id": 2, "_v": 1, "rev": 3}, SPLIT, 1, 2, False),
    (
        "document _id",
        _with(BASE, _id={"a": 1, "b": 2}),
        _with(BASE, _id={"a": 1, "b": 2}),
        _with(SPLIT, _id={"a": 1, "b": 2}),
        1,
        2,
        True,
    ),
    (
        "operator-like values",
        _with(BASE, name="$notAnOperator"),
        _with(BASE, name="$notAnOperator"),
        _with(SPLIT, first="$x", nested={"$y": 1}),
        1,
        2,
        True,
    ),
]


@pytest.mark.parametrize(
    ("label", "read", "stored", "after", "source", "target", "applies"),
    CASES,
    ids=[case[0] for case in CASES],
)
def test_pipeline_and_filter_guards_agree(
    db: Database[Doc],
    label: str,
    read: Doc,
    stored: Doc,
    after: Doc,
    source: int,
    target: int,
    applies: bool,
) -> None:
    # The transform leaves the version and revision to the engine.
    after = {key: value for key, value in after.items() if key not in ("_v", "rev")}
    (by_filter, filtered), (by_pipeline, piped) = _write_both(
        db, read, stored, after, version=source, target=target
    )
    assert by_filter == by_pipeline == int(applies)
    assert filtered is not None and piped is not None
    assert filtered.raw == piped.raw  # same fields, order and BSON types


def test_without_a_revision_field_only_the_version_guards(db: Database[Doc]) -> None:
    read = {"_id": 5, "name": "Ada Lovelace", "_v": 1}
    after = {"_id": 5, "first": "Ada", "last": "Lovelace"}
    (by_filter, filtered), (by_pipeline, piped) = _write_both(
        db, read, read, after, version=1, target=2, revision_field=None
    )
    assert by_filter == by_pipeline == 1
    assert filtered is not None and piped is not None
    assert filtered.raw == piped.raw
    assert piped["_v"] == 2 and "name" not in piped
