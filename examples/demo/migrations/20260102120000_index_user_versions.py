"""Index users by schema version, so the background migration after it finds old documents fast."""

description = "Index users on (_v, _id) for the name split"

INDEX = "_v_1__id_1"


def up(ctx):
    ctx.db.users.create_index([("_v", 1), ("_id", 1)], name=INDEX)


def down(ctx):
    ctx.db.users.drop_index(INDEX)
