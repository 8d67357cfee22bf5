"""Seed a small users collection for the demo."""

description = "Create users with a unique email index and seed 1,000 users"


def up(ctx):
    ctx.db.users.create_index("email", unique=True)
    ctx.db.users.insert_many(
        [{"email": f"user{i}@example.com", "name": f"User Number{i}"} for i in range(1000)],
        session=ctx.session,
    )


def down(ctx):
    ctx.db.users.delete_many({}, session=ctx.session)
