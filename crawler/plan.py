"""What is due: benchmark query texts, epochs, and the work-lease queue shared by workers.

- A query text is *due* for (configuration, epoch) when it has no answer there.
  Query texts are keyed by ``query_sha256`` and shared across benchmarks, so a text
  answered while crawling one benchmark is never re-sent for another (fetch once).
- The current epoch of a configuration is the highest epoch seen in its answers,
  exchanges or work leases (0 when new); ``--refresh`` opens max + 1, which becomes
  the current epoch for every worker as soon as its leases are seeded.
- ``work_leases`` holds one row per due text. Workers claim rows whose lease has
  expired (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so two workers never claim the
  same row), renew them while working, delete them with the answer (one
  transaction), mark permanent failures ``failed``, and release what they still hold
  when they stop. A killed worker's leases expire after the lease TTL.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import sqlalchemy as sa

from store.models import Answer, Query, WorkLease


def _insert(dialect: str):
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


def benchmark_texts(db, benchmark_id: int, all_styles: bool) -> dict[str, str]:
    """sha256 → text of the benchmark's distinct query texts (primary styles unless all_styles)."""
    q = sa.select(Query.query_sha256, Query.text).where(Query.benchmark_id == benchmark_id).order_by(Query.id)
    if not all_styles:
        q = q.where(Query.primary.is_(True))
    with db.session() as s:
        out: dict[str, str] = {}
        for sha, text in s.execute(q):
            out.setdefault(sha, text)
        return out


def answered_shas(db, config_id: int, epoch: int) -> set[str]:
    with db.session() as s:
        return set(
            s.execute(
                sa.select(Answer.query_sha256).where(Answer.config_id == config_id, Answer.epoch == epoch)
            ).scalars()
        )


@dataclass
class Counts:
    total: int
    answered: int
    failed: int

    @property
    def pending(self) -> int:
        return self.total - self.answered - self.failed


class WorkQueue:
    """The lease queue of one configuration × epoch, restricted to one benchmark's texts."""

    def __init__(
        self,
        db,
        *,
        config_id: int,
        epoch: int,
        texts: dict[str, str],
        benchmark_id: int,
        all_styles: bool,
        worker: str,
        lease_ttl: float = 900.0,
        clock=time.time,
        exclusive: bool = False,
    ) -> None:
        self.db = db
        # exclusive: no other worker can hold a lease or answer in this configuration (a
        # SQLite file under the crawl lock), so the check before a send needs no database.
        self.exclusive = exclusive
        self.config_id = config_id
        self.epoch = epoch
        self.texts = texts
        self.benchmark_id = benchmark_id
        self.all_styles = all_styles
        self.worker = worker
        self.lease_ttl = lease_ttl
        self.clock = clock
        self.held: dict[str, float] = {}  # sha → leased_until, claimed by this worker

    def _key(self):
        return (WorkLease.config_id == self.config_id, WorkLease.epoch == self.epoch)

    def seed(self, *, retry_failed: bool = False) -> None:
        """Create lease rows for due texts; drop rows of texts answered meanwhile."""
        answered = answered_shas(self.db, self.config_id, self.epoch)
        due = [sha for sha in self.texts if sha not in answered]
        insert = _insert(self.db.dialect)
        with self.db.session() as s, s.begin():
            existing = set(s.execute(sa.select(WorkLease.query_sha256).where(*self._key())).scalars())
            rows = [
                {"config_id": self.config_id, "query_sha256": sha, "epoch": self.epoch, "worker": "",
                 "leased_until": 0.0, "status": "leased"}
                for sha in due if sha not in existing
            ]
            for i in range(0, len(rows), 500):
                s.execute(insert(WorkLease).values(rows[i:i + 500]).on_conflict_do_nothing())
            stale = [sha for sha in existing if sha in answered]
            for i in range(0, len(stale), 500):
                s.execute(sa.delete(WorkLease).where(*self._key(), WorkLease.query_sha256.in_(stale[i:i + 500])))
            if retry_failed:
                s.execute(
                    sa.update(WorkLease)
                    .where(*self._key(), WorkLease.status == "failed")
                    .values(status="leased", leased_until=0.0, worker="")
                )

    def release_all_stale(self) -> None:
        """SQLite (one crawler per file): every 'leased' row is from a dead run; free it now."""
        with self.db.session() as s, s.begin():
            s.execute(
                sa.update(WorkLease)
                .where(*self._key(), WorkLease.status == "leased", WorkLease.worker != self.worker)
                .values(leased_until=0.0, worker="")
            )

    def _bench_filter(self):
        sub = sa.select(Query.query_sha256).where(Query.benchmark_id == self.benchmark_id)
        if not self.all_styles:
            sub = sub.where(Query.primary.is_(True))
        return WorkLease.query_sha256.in_(sub)

    def claim(self, k: int) -> list[tuple[str, str]]:
        """Claim up to k due texts for this worker: (sha, text) pairs."""
        now = self.clock()
        answered = sa.exists().where(
            Answer.config_id == WorkLease.config_id,
            Answer.epoch == WorkLease.epoch,
            Answer.query_sha256 == WorkLease.query_sha256,
        )
        with self.db.session() as s, s.begin():
            shas = list(
                s.execute(
                    sa.select(WorkLease.query_sha256)
                    .where(*self._key(), WorkLease.status == "leased", WorkLease.leased_until < now,
                           self._bench_filter(), ~answered)
                    .order_by(WorkLease.query_sha256)
                    .limit(k)
                    .with_for_update(skip_locked=True, of=WorkLease)
                ).scalars()
            )
            if not shas:
                return []
            until = now + self.lease_ttl
            s.execute(
                sa.update(WorkLease)
                .where(*self._key(), WorkLease.query_sha256.in_(shas))
                .values(worker=self.worker, leased_until=until)
            )
        for sha in shas:
            self.held[sha] = until
        return [(sha, self.texts[sha]) for sha in shas if sha in self.texts]

    def others_holding(self) -> int:
        """Due texts of this benchmark leased right now by other (live) workers."""
        with self.db.session() as s:
            return s.scalar(
                sa.select(sa.func.count()).select_from(WorkLease).where(
                    *self._key(), WorkLease.status == "leased", WorkLease.leased_until >= self.clock(),
                    WorkLease.worker != self.worker, self._bench_filter(),
                )
            ) or 0

    def renew(self, shas: list[str]) -> None:
        """Extend this worker's leases when less than half the TTL is left."""
        now = self.clock()
        if not any(self.held.get(sha, 0.0) - now < self.lease_ttl / 2 for sha in shas):
            return
        until = now + self.lease_ttl
        with self.db.session() as s, s.begin():
            s.execute(
                sa.update(WorkLease)
                .where(*self._key(), WorkLease.query_sha256.in_(shas), WorkLease.worker == self.worker)
                .values(leased_until=until)
            )
        for sha in shas:
            self.held[sha] = until

    def keep_due(self, shas: list[str]) -> list[str]:
        """Right before a send: renew this worker's leases on ``shas``; return those still to send.

        A fetch can outlive its lease (retries, a Retry-After pause, pacing waits), and
        then another worker may claim the text and answer it. Dropped here: texts already
        answered in this configuration × epoch (the check ``claim`` makes) and texts a
        live lease of another worker now holds (it will send them).
        """
        if not shas:
            return []
        fast = self.keep_due_fast(shas)
        if fast is not None:
            return fast
        self.renew(shas)
        now = self.clock()
        # One round trip: texts answered meanwhile, and texts a live lease of another worker holds.
        with self.db.engine.connect() as conn:
            gone = set(conn.execute(sa.union_all(
                sa.select(Answer.query_sha256).where(
                    Answer.config_id == self.config_id, Answer.epoch == self.epoch, Answer.query_sha256.in_(shas)),
                sa.select(WorkLease.query_sha256).where(
                    *self._key(), WorkLease.query_sha256.in_(shas), WorkLease.worker != self.worker,
                    WorkLease.leased_until >= now),
            )).scalars())
        keep = [sha for sha in shas if sha not in gone]
        for sha in shas:
            if sha not in keep:
                self.held.pop(sha, None)
        return keep

    def keep_due_fast(self, shas: list[str]) -> list[str] | None:
        """``keep_due`` without the database when the answer is known here, else None.

        Exclusive (one crawler per SQLite file): the texts this run holds. Shared: texts whose
        lease this worker took or renewed with more than half its TTL left need no check:
        ``claim`` takes only expired leases, so no other worker can hold or answer them.
        """
        if self.exclusive:
            return [sha for sha in shas if sha in self.held]
        now = self.clock()
        if all(self.held.get(sha, 0.0) - now >= self.lease_ttl / 2 for sha in shas):
            return list(shas)
        return None

    def done(self, shas: list[str]) -> None:
        """Answered (the rows were deleted in the answer's transaction)."""
        for sha in shas:
            self.held.pop(sha, None)

    def fail(self, shas: list[str], note: str) -> None:
        with self.db.session() as s, s.begin():
            s.execute(
                sa.update(WorkLease)
                .where(*self._key(), WorkLease.query_sha256.in_(shas))
                .values(status="failed", note=note[:1000], worker=self.worker)
            )
        for sha in shas:
            self.held.pop(sha, None)

    def release(self) -> None:
        """On exit, delete the lease rows this worker still holds (unanswered after retries, or
        stopped): no row outlives the worker that claimed it. The texts stay due (they have no
        answer); ``seed`` recreates their rows, and a worker re-seeds before it stops for
        lack of work, so texts released by another worker are not lost to a running one."""
        if not self.held:
            return
        shas = list(self.held)
        with self.db.session() as s, s.begin():
            for i in range(0, len(shas), 500):
                s.execute(
                    sa.delete(WorkLease)
                    .where(*self._key(), WorkLease.query_sha256.in_(shas[i:i + 500]),
                           WorkLease.worker == self.worker, WorkLease.status == "leased")
                )
        self.held.clear()

    def counts(self) -> Counts:
        total = len(self.texts)
        answered = answered_shas(self.db, self.config_id, self.epoch)
        with self.db.session() as s:
            failed = set(
                s.execute(
                    sa.select(WorkLease.query_sha256).where(*self._key(), WorkLease.status == "failed")
                ).scalars()
            )
        return Counts(
            total=total,
            answered=sum(1 for sha in self.texts if sha in answered),
            failed=sum(1 for sha in self.texts if sha in failed and sha not in answered),
        )


# ---------------------------------------------------------------- sampled crawls (issue 15)

SAMPLE_PREFIX = "sample:"


def sample_order(items: list[tuple[str, str]], seed: int) -> list[str]:
    """Every text of a benchmark in sampling order: the first N are the sample of size N.

    ``items`` are (sha, style) pairs. Each style's texts get their own seeded permutation;
    the styles are then interleaved by largest deficit (at step i, the style furthest below
    its share i·|style|/|all| goes next; ties by style name), so every prefix keeps the
    benchmark's style mix to within one text per style, and a larger N only appends texts:
    the sample of 500 contains the sample of 300.
    """
    import hashlib
    import random

    by_style: dict[str, list[str]] = {}
    for sha, style in items:
        by_style.setdefault(style or "", []).append(sha)
    queues: dict[str, list[str]] = {}
    for style, shas in sorted(by_style.items()):
        # A per-style stream derived from (seed, style): adding a style elsewhere never
        # reshuffles this one.
        key = int.from_bytes(hashlib.sha256(f"{seed}\x00{style}".encode()).digest()[:8], "big")
        shas = sorted(shas)
        random.Random(key).shuffle(shas)
        queues[style] = shas
    total = sum(len(v) for v in queues.values())
    taken = {style: 0 for style in queues}
    out: list[str] = []
    for i in range(1, total + 1):
        style = max(
            (st for st in sorted(queues) if taken[st] < len(queues[st])),
            key=lambda st: (i * len(queues[st]) / total - taken[st], -sorted(queues).index(st)),
        )
        out.append(queues[style][taken[style]])
        taken[style] += 1
    return out


def sample_subset_name(engine: str, seed: int, n: int) -> str:
    return f"{SAMPLE_PREFIX}{engine}:{seed}:{n}"


def parse_sample_name(name: str) -> tuple[str, int, int] | None:
    """(engine, seed, N) of a ``sample:<engine>:<seed>:<N>`` subset name, else None."""
    if not name.startswith(SAMPLE_PREFIX):
        return None
    engine, _, rest = name[len(SAMPLE_PREFIX):].rpartition(":")
    engine, _, seed = engine.rpartition(":")
    try:
        return engine, int(seed), int(rest)
    except ValueError:
        return None


def sampled_texts(db, benchmark_id: int, all_styles: bool, n: int, seed: int) -> dict[str, str]:
    """sha → text of the deterministic, style-stratified sample of size n (all texts if fewer)."""
    q = sa.select(Query.query_sha256, Query.text, Query.style).where(Query.benchmark_id == benchmark_id).order_by(Query.id)
    if not all_styles:
        q = q.where(Query.primary.is_(True))
    texts: dict[str, str] = {}
    styles: dict[str, str] = {}
    with db.session() as s:
        for sha, text, style in s.execute(q):
            if sha not in texts:
                texts[sha], styles[sha] = text, style
    order = sample_order(list(styles.items()), seed)[:n]
    return {sha: texts[sha] for sha in order}


def store_sample(db, *, engine: str, bench: str, seed: int, texts: dict[str, str]) -> int:
    """Record the sample as the subset ``sample:<engine>:<seed>:<N>`` (members: query sha256s);
    return its id. Re-recording the same sample is a no-op."""
    import hashlib

    from store.models import Subset, SubsetMember

    members = sorted(texts)
    name = sample_subset_name(engine, seed, len(members))
    digest = hashlib.sha256("\n".join(members).encode()).hexdigest()
    with db.session() as s, s.begin():
        sub = s.execute(sa.select(Subset).where(Subset.name == name)).scalar_one_or_none()
        if sub is not None:
            if sub.sha256 != digest:
                from store.errors import InputError

                other = (sub.meta or {}).get("bench")
                why = f"benchmark {other}'s sample" if other and other != bench else "other texts (was the benchmark reloaded?)"
                raise InputError(f"subset {name} already holds {why}; pick another --seed for this one")
            return sub.id
        sub = Subset(name=name, member_kind="query_sha256", source_file=f"engines crawl {engine} --bench {bench} "
                     f"--sample {len(members)} --seed {seed}", sha256=digest,
                     meta={"engine": engine, "bench": bench, "seed": seed, "n": len(members), "kind": "sample"})
        s.add(sub)
        s.flush()
        s.execute(sa.insert(SubsetMember), [{"subset_id": sub.id, "member": m} for m in members])
        return sub.id


class SampleQueue(WorkQueue):
    """A work queue that only claims the texts of one stored sample (leases seeded by an
    earlier full crawl of the same configuration stay where they are)."""

    def __init__(self, db, *, subset_id: int, **kwargs) -> None:
        super().__init__(db, **kwargs)
        self.subset_id = subset_id

    def _bench_filter(self):
        from store.models import SubsetMember

        members = sa.select(SubsetMember.member).where(SubsetMember.subset_id == self.subset_id)
        return sa.and_(super()._bench_filter(), WorkLease.query_sha256.in_(members))
