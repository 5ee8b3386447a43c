"""The ``engines`` command line: parse options, call library functions, render.

Nothing below this package imports it. Each module of ``cli.commands`` exposes
``register(app)``; ``cli.main`` lists them and owns error handling and exit codes.
"""
