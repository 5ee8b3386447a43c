"""Pipelines: the demo, publishing a leaderboard bundle and verifying one — each drives every floor below."""
