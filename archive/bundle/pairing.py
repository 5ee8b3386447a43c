"""Pairing a bundle's records: a request with its response (or transport-error metadata).

By ``WARC-Concurrent-To`` when the records carry it (ours, and most tools); else, for tools
without it, a response with the last request to the same URI (an index by URI and side, so
pairing stays linear in the records). Records wait for their partner in memory, at most
MAX_HELD_BYTES of bodies.
"""

from __future__ import annotations

from archive.bundle import records
from archive.bundle.records import Record
from archive.bundle.warc import H_CONFIG, BadBundle


class Pairing:
    def __init__(self, label: str) -> None:
        self.label = label
        self.pending: dict[str, Record] = {}  # requests (or responses) waiting for their partner, by record id
        self.by_uri: dict[tuple[str, bool], list[str]] = {}  # (URI, is a request) → pending record ids, in order
        self.held = 0  # body bytes in `pending`

    def offer(self, rec: Record) -> tuple[Record, Record] | None:
        """(request, response or metadata) once ``rec`` completes a pair, else None (it waits,
        or it is a free-standing metadata record of another tool)."""
        partner_id = rec.headers.get("WARC-Concurrent-To")
        partner = self.pending.pop(partner_id, None) if partner_id else None
        if partner is None and not partner_id:
            stack = self.by_uri.get((rec.uri, rec.type != "request"))
            while stack:
                k = stack.pop()
                if k in self.pending:
                    partner = self.pending.pop(k)
                    break
        if partner is None:
            if rec.type == "metadata" and not rec.headers.get(H_CONFIG) and partner_id is None:
                return None  # free-standing metadata of another tool
            self._wait(rec)
            return None
        self.held -= len(partner.body)
        req, second = (partner, rec) if partner.type == "request" else (rec, partner)
        if req.type != "request" or second.type == "request":
            raise BadBundle(f"{self.label}: {rec.name()} is linked to {partner.name()}, not a request/response pair; "
                            "nothing was imported")
        return req, second

    def _wait(self, rec: Record) -> None:
        self.pending[rec.rid] = rec
        self.by_uri.setdefault((rec.uri, rec.type == "request"), []).append(rec.rid)
        self.held += len(rec.body)
        if self.held > records.MAX_HELD_BYTES:
            raise BadBundle(f"{self.label}: at {rec.name()}, {len(self.pending):,} records wait for their partner "
                            f"record, more than {records.MAX_HELD_BYTES // 2**20} MiB of bodies (a bundle keeps a "
                            "request next to its response); nothing was imported")

    def leftovers(self) -> list[Record]:
        """The records still waiting at the end of the file."""
        return list(self.pending.values())
