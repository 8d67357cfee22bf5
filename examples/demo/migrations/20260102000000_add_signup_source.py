"""Give every user a signup source, in the same transaction as its changelog record."""

description = "Default signup_source to 'web' for existing users"


def up(ctx):
    ctx.db.users.update_many(
        {"signup_source": {"$exists": False}},
        {"$set": {"signup_source": "web"}},
        session=ctx.session,
    )


def down(ctx):
    ctx.db.users.update_many({}, {"$unset": {"signup_source": ""}}, session=ctx.session)
