"""Split every user's name into first and last, online, while the application keeps writing.

A background migration: ``migronaut up`` registers it, and its Airflow DAG
(``migronaut_bg__20260103000000_split_user_names``) rewrites users from ``_v: 1``
to ``_v: 2`` in batches, on up to three parallel lanes.
"""

description = "Split name into first and last (users _v 1 -> 2)"

background = {
    "collection": "users",
    "from": 1,
    "to": 2,
    "batch_size": 500,
    "max_parallel": 3,
}


def migrate(doc, ctx):
    first, _, last = doc.pop("name", "").partition(" ")
    doc["first"] = first
    doc["last"] = last
    return doc


def revert(doc, ctx):
    doc["name"] = f"{doc.pop('first', '')} {doc.pop('last', '')}".strip()
    return doc
