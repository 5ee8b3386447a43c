"""CLI command groups. Each module exposes ``register(app)``; ``engines.cli`` lists them."""
