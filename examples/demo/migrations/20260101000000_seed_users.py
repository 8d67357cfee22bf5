"""Seed the demo's users collection: 20,000 users at schema version 1."""

description = "Create users with a unique email index and seed 20,000 users (_v: 1)"

COUNT = 20_000
FIRST = ["Ada", "Alan", "Grace", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia", "Tim"]
LAST = ["Lovelace", "Turing", "Hopper", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson"]


def up(ctx):
    ctx.db.users.create_index("email", unique=True)
    users = [
        {
            "_id": i,
            "_v": 1,
            "email": f"user{i}@example.com",
            "name": f"{FIRST[i % len(FIRST)]} {LAST[i // len(FIRST) % len(LAST)]}",
        }
        for i in range(COUNT)
    ]
    for start in range(0, COUNT, 5_000):
        ctx.db.users.insert_many(users[start : start + 5_000], session=ctx.session)


def down(ctx):
    ctx.db.users.delete_many({}, session=ctx.session)
