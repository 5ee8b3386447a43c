"""CLI command groups. Each module exposes ``register(app)``; ``cli.main`` lists them."""
