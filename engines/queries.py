"""Query renderers: how a benchmark text becomes what an engine is sent, and back.

A renderer is a pair of functions: ``render(text) -> query`` for ``build_request`` and
``unrender(query) -> text | None`` for ``read_request`` (None: no text gives this query).
Shared here so that every engine wanting the same form uses the same code.
"""

from __future__ import annotations

GOAL = "⊢"


def goal_query(text: str) -> str:
    """The proof state sent for ``text``: unchanged when it holds ``⊢``, else ``⊢ <text>``
    (a goal with no hypotheses: the closest proof state to a bare statement)."""
    return text if GOAL in text else f"{GOAL} {text}"


def goal_text(query: str) -> str | None:
    """The text whose :func:`goal_query` is ``query``; None when no text gives it (no ``⊢``).

    Not unique: ``"⊢ a = b"`` is sent both for the statement ``a = b`` and for the text
    ``⊢ a = b``. The statement wins: ``"⊢ "`` followed by a rest without ``⊢`` gives the
    rest (benchmark texts are statements, and the crawler sends its ``⊢`` prefix only to
    them, so this is the text its answers are filed under); any other query holding ``⊢``
    (a proof state with hypotheses, ``"⊢a"``) is its own text. Always
    ``goal_query(goal_text(q)) == q``; ``goal_text(goal_query(t)) == t`` for every ``t``
    except a text that is itself ``"⊢ "`` + a statement.
    """
    if GOAL not in query:
        return None
    rest = query.removeprefix(f"{GOAL} ")
    return rest if rest != query and GOAL not in rest else query
