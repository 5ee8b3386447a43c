"""Scoring: resolution, gold positions, metrics, curves, bootstrap CIs (METHODOLOGY.md).

Work in progress; the public API is listed here when it lands.
"""
