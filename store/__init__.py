"""The SQL cache: models, engine/session setup, migrations, corpus and benchmark loading.

Everything downstream (crawler, scoring, local engines) reads and writes through
the tables defined in :mod:`store.models`; nothing here knows about crawling or scoring.
"""
