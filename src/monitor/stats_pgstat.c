/*-------------------------------------------------------------------------
 *
 * stats_pgstat.c
 *	  Storage of zklock's cumulative statistics on PostgreSQL 18+: two
 *	  custom kinds of PostgreSQL's cumulative statistics system
 *	  (pgstat_register_kind), so that the figures are written to
 *	  pg_stat/pgstat.stat at a clean shutdown, read back at the next start
 *	  and discarded after a crash, exactly like PostgreSQL's own.
 *
 * - "zklock_locks", variable-numbered: one entry per lock name and kind,
 *	 shared across databases (dboid InvalidOid), its objid a 64-bit hash of
 *	 the key.  The entry stores the key itself, and an update compares it:
 *	 should two keys ever hash alike, the second is counted in the totals
 *	 only instead of being merged silently into the first one's row.
 * - "zklock_cluster", fixed-numbered: the totals, session events,
 *	 evictions, the number of rows and the LRU clock, under its own LWLock.
 *
 * Updates are immediate, as replication-slot statistics are (no pending
 * data, no flush at transaction end): the figures are exact at once, as
 * on 15-17.  Whatever can raise ERROR (finding or creating the entry: a
 * dsa allocation, the backend's reference cache) happens before a lock is
 * taken; under the locks there is only integer arithmetic.  A release is
 * counted from a transaction callback at COMMIT, where an ERROR would be
 * a PANIC: it only looks for an existing entry, through this backend's
 * reference cache (the entry was referenced when the lock was taken), and
 * counts in the totals only if the row has been evicted meanwhile.
 *
 * Whether that path can allocate (issue 37 asked): it can, in two narrow
 * cases, and an allocation fails only when the backend is out of memory.
 * (1) A name that must be converted to UTF-8 in a database of another
 * encoding is converted into a new string (stats.c's count, on every
 * major).  (2) PostgreSQL's lookup of the entry inserts the key into the
 * backend's reference cache; that allocates only on a miss, which needs
 * the row evicted by another backend and this backend's reference
 * collected since the lock was taken (pgstat_gc_entry_refs).  An ERROR
 * there, in a COMMIT callback, would abort a committed transaction
 * (PANIC with a transaction id).  The figures are worth less than that
 * risk is small: both allocations are a few dozen bytes, and an
 * out-of-memory at that instant would as likely strike PostgreSQL's own
 * commit processing (AtEOXact_* free and allocate too).  Left as it is,
 * and said here so that nothing larger is ever added to this path.
 *
 * Rows are dropped (reset, eviction) only by pgstat_drop_matching_entries,
 * which skips entries already dropped under the hash partition's lock:
 * two backends evicting the same row at once cannot make
 * pgstat_drop_entry raise "already dropped".
 *
 * Kind IDs: PostgreSQL 18 leaves 24-32 to extensions (24 is for
 * experiments) and asks that they be reserved on the PostgreSQL wiki
 * (CustomCumulativeStats).  zklock takes zklock.stat_kind_id and the next
 * one, 30 and 31 by default (not yet reserved there): the top of the
 * range, away from the experimental ID and the low ones that other
 * extensions take first.  The setting (postmaster) moves them should
 * another preloaded extension use them.  The IDs are written into
 * pgstat.stat: a start without them registered (zklock no longer
 * preloaded, the setting changed) finds an unknown kind in the file, and
 * PostgreSQL then discards the whole file, its own statistics included.
 *
 * src/monitor/stats_pgstat.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#if PG_VERSION_NUM >= 180000

#include "common/hashfn.h"
#include "lib/dshash.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/dsa.h"
#include "utils/guc.h"
#include "utils/pgstat_internal.h"
#include "utils/timestamp.h"

#include "recipe/statevict.h"
#include "monitor/stats.h"
#include "monitor/stats_int.h"

/* The shared entry of one row: pgstat's header, then what is persisted. */
typedef struct ZkstRowShared
{
	PgStatShared_Common header;
	StatEntry	row;
} ZkstRowShared;

/* The cluster row: its lock, then what is persisted. */
typedef struct ZkstClusterShared
{
	LWLock		lock;
	StatCluster cl;
} ZkstClusterShared;

static int	stat_kind_id = 30;
static PgStat_Kind kind_rows = PGSTAT_KIND_INVALID;
static PgStat_Kind kind_cluster = PGSTAT_KIND_INVALID;
static bool registered = false;

/* rows dropped by the last drop_rows() (its callback cannot return it) */
static int64 n_dropped;

static void cluster_init_shmem(void *stats);
static void cluster_reset_all(TimestampTz ts);
static void cluster_snapshot(void);

static const PgStat_KindInfo rows_info = {
	.name = "zklock_locks",
	.fixed_amount = false,
	.accessed_across_databases = true,
	.write_to_file = true,
	.shared_size = sizeof(ZkstRowShared),
	.shared_data_off = offsetof(ZkstRowShared, row),
	.shared_data_len = sizeof(StatEntry),
	.pending_size = 0,
};

static const PgStat_KindInfo cluster_info = {
	.name = "zklock_cluster",
	.fixed_amount = true,
	.write_to_file = true,
	.shared_size = sizeof(ZkstClusterShared),
	.shared_data_off = offsetof(ZkstClusterShared, cl),
	.shared_data_len = sizeof(StatCluster),
	.init_shmem_cb = cluster_init_shmem,
	.reset_all_cb = cluster_reset_all,
	.snapshot_cb = cluster_snapshot,
};

static ZkstClusterShared *
cluster_shared(void)
{
	return (ZkstClusterShared *) pgstat_get_custom_shmem_data(kind_cluster);
}

/*
 * At shared memory creation.  The statistics file read afterwards
 * overwrites the figures, but a file written without zklock's kinds
 * (initdb's, or zklock newly preloaded) leaves them as set here, and
 * PostgreSQL calls no reset for that case: since is the server's start.
 */
static void
cluster_init_shmem(void *stats)
{
	ZkstClusterShared *s = (ZkstClusterShared *) stats;

	LWLockInitialize(&s->lock, LWTRANCHE_PGSTATS_DATA);
	memset(&s->cl, 0, sizeof(StatCluster));
	s->cl.since = GetCurrentTimestamp();
}

/*
 * PostgreSQL calls this when it starts without usable statistics (after a
 * crash, or with no file): every row has been dropped too, so the number
 * of rows and the clock start from zero with the rest.
 */
static void
cluster_reset_all(TimestampTz ts)
{
	ZkstClusterShared *s = cluster_shared();

	LWLockAcquire(&s->lock, LW_EXCLUSIVE);
	memset(&s->cl, 0, sizeof(StatCluster));
	s->cl.since = ts;
	LWLockRelease(&s->lock);
}

/* What the checkpointer writes at shutdown is taken from the snapshot. */
static void
cluster_snapshot(void)
{
	ZkstClusterShared *s = cluster_shared();
	StatCluster *snap = pgstat_get_custom_snapshot_data(kind_cluster);

	LWLockAcquire(&s->lock, LW_SHARED);
	memcpy(snap, &s->cl, sizeof(StatCluster));
	LWLockRelease(&s->lock);
}

/*
 * A taken ID makes the server refuse to start either way; saying which
 * setting moves zklock's IDs is more helpful than PostgreSQL's message.
 */
static void
register_kind(PgStat_Kind kind, const PgStat_KindInfo *info)
{
	const PgStat_KindInfo *other = pgstat_get_kind_info(kind);

	if (other != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("zklock cannot register its cumulative statistics \"%s\" with ID %u",
						info->name, kind),
				 errdetail("Custom cumulative statistics \"%s\" already use that ID.",
						   other->name),
				 errhint("Set \"zklock.stat_kind_id\" to an ID between %d and %d such that it and the next one are free.",
						 PGSTAT_KIND_CUSTOM_MIN, PGSTAT_KIND_CUSTOM_MAX - 1)));
	pgstat_register_kind(kind, info);
}

void
zkst_store_preload(void)
{
	DefineCustomIntVariable("zklock.stat_kind_id",
							"First of the two custom cumulative statistics IDs zklock uses.",
							"zklock uses this ID and the next one. Changing it discards the statistics saved under the old IDs, and with them every other cumulative statistic, once.",
							&stat_kind_id,
							30, PGSTAT_KIND_CUSTOM_MIN, PGSTAT_KIND_CUSTOM_MAX - 1,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);
	kind_rows = (PgStat_Kind) stat_kind_id;
	kind_cluster = (PgStat_Kind) stat_kind_id + 1;
	register_kind(kind_rows, &rows_info);
	register_kind(kind_cluster, &cluster_info);
	registered = true;
}

/*
 * False in a process not attached to the statistics, and after this
 * backend's pgstat_shutdown_hook (before_shmem_exit) has detached it:
 * pgstat must not be touched then.
 */
bool
zkst_store_available(void)
{
	return registered && pgStatLocal.shared_hash != NULL &&
		pgStatLocal.shmem != NULL && !pgStatLocal.shmem->is_shutdown;
}

static uint64
key_objid(const StatKey *key)
{
	return hash_bytes_extended((const unsigned char *) key->name,
							   strlen(key->name), (uint64) key->kind);
}

/*
 * Drop the rows the callback picks; returns how many.  The callback runs
 * under an exclusive partition lock of pgstat's hash table: it only
 * compares.
 */
static int64
drop_rows(bool (*match) (PgStatShared_HashEntry *, Datum), Datum arg)
{
	n_dropped = 0;
	pgstat_drop_matching_entries(match, arg);
	return n_dropped;
}

static bool
match_name(PgStatShared_HashEntry *p, Datum arg)
{
	const StatKey *key = (const StatKey *) DatumGetPointer(arg);
	ZkstRowShared *rs;

	if (p->key.kind != kind_rows || p->dropped)
		return false;
	rs = (ZkstRowShared *) dsa_get_address(pgStatLocal.dsa, p->body);
	if (strcmp(rs->row.key.name, key->name) != 0)
		return false;
	n_dropped++;
	return true;
}

static bool
match_all(PgStatShared_HashEntry *p, Datum arg)
{
	if (p->key.kind != kind_rows || p->dropped)
		return false;
	n_dropped++;
	return true;
}

/* Subtract dropped rows from the count, and count evictions. */
static void
note_dropped(int64 dropped, bool evicted)
{
	ZkstClusterShared *cs = cluster_shared();

	LWLockAcquire(&cs->lock, LW_EXCLUSIVE);
	cs->cl.nentries = Max(cs->cl.nentries - dropped, 0);
	if (evicted)
		cs->cl.evictions += dropped;
	LWLockRelease(&cs->lock);
}

static bool
match_older(PgStatShared_HashEntry *p, Datum arg)
{
	ZkstRowShared *rs;

	if (p->key.kind != kind_rows || p->dropped)
		return false;
	rs = (ZkstRowShared *) dsa_get_address(pgStatLocal.dsa, p->body);
	if (rs->row.key.name[0] == '\0' ||
		rs->row.last_used > DatumGetUInt64(arg))
		return false;
	n_dropped++;
	return true;
}

/*
 * The least recently used 5 % of the rows go at once (statevict.c says
 * why not one).  A scan of pgstat's whole hash table (shared partition
 * locks) gathers the rows' last-use clocks into a buffer allocated before
 * it; the bound is the k-th smallest; a second scan drops every row at or
 * below it that nobody dropped or used meanwhile.  Rows not yet claimed
 * (being created, key still empty) are never chosen.  Returns false if
 * no row could be dropped.
 */
static bool
evict_oldest(void)
{
	dshash_seq_status hs;
	PgStatShared_HashEntry *p;
	int			cap = zklock_stat_max_names + zklock_stat_max_names / 4 + 64;
	uint64	   *clocks;
	int			n = 0;
	int64		dropped;

	clocks = palloc_extended(sizeof(uint64) * (Size) cap, MCXT_ALLOC_HUGE);
	dshash_seq_init(&hs, pgStatLocal.shared_hash, false);
	while ((p = dshash_seq_next(&hs)) != NULL)
	{
		ZkstRowShared *rs;

		if (p->key.kind != kind_rows || p->dropped || n >= cap)
			continue;
		rs = (ZkstRowShared *) dsa_get_address(pgStatLocal.dsa, p->body);
		/* an unlocked read: at worst a row used just now is chosen */
		if (rs->row.key.name[0] != '\0')
			clocks[n++] = rs->row.last_used;
	}
	dshash_seq_term(&hs);

	if (n == 0)
	{
		pfree(clocks);
		return false;
	}
	dropped = drop_rows(match_older,
						UInt64GetDatum(zkst_evict_bound(clocks, n,
														zkst_evict_count(zklock_stat_max_names))));
	pfree(clocks);
	note_dropped(dropped, true);
	return dropped > 0;
}

/*
 * Evict until the cap holds again.  Backends that create rows at once may
 * each see the table over the cap, or pick the same rows (only one of
 * them drops each): each re-reads the count and goes on while it is over.
 */
static void
evict_to_cap(void)
{
	ZkstClusterShared *cs = cluster_shared();

	for (int tries = 0; tries < 8; tries++)
	{
		bool		over;

		LWLockAcquire(&cs->lock, LW_SHARED);
		over = cs->cl.nentries > zklock_stat_max_names;
		LWLockRelease(&cs->lock);
		if (!over || !evict_oldest())
			break;
	}
}

void
zkst_store_count(const StatUpdate *u)
{
	ZkstClusterShared *cs = cluster_shared();
	PgStat_EntryRef *ref;
	bool		created = false;
	bool		over = false;
	uint64		tick;

	/* may allocate and raise when creating: before any lock */
	ref = pgstat_get_entry_ref(kind_rows, InvalidOid, key_objid(&u->key),
							   u->may_create,
							   u->may_create ? &created : NULL);

	LWLockAcquire(&cs->lock, LW_EXCLUSIVE);
	cs->cl.reconnects += u->reconnects;
	cs->cl.expirations += u->expirations;
	zkst_add_event(&cs->cl.total, u->ev, u->waited, u->us);
	tick = ++cs->cl.clock;
	if (created)
		over = ++cs->cl.nentries > zklock_stat_max_names;
	LWLockRelease(&cs->lock);

	if (ref != NULL)
	{
		ZkstRowShared *rs = (ZkstRowShared *) ref->shared_stats;

		pgstat_lock_entry(ref, false);

		/*
		 * A new entry (zeroed by pgstat) is claimed by whoever locks it
		 * first, its creator or a backend that found it just created.  A
		 * row dropped since we referenced it is not counted in.
		 */
		if (!ref->shared_entry->dropped)
		{
			if (rs->row.key.name[0] == '\0')
			{
				memcpy(&rs->row.key, &u->key, sizeof(StatKey));
				rs->row.since = u->now;
			}
			/* else another key hashed alike owns it: the totals only */
			if (memcmp(&rs->row.key, &u->key, sizeof(StatKey)) == 0)
			{
				zkst_add_event(&rs->row.c, u->ev, u->waited, u->us);
				rs->row.last_used = tick;
			}
		}
		pgstat_unlock_entry(ref);
	}

	if (over)
		evict_to_cap();
}

void
zkst_store_session_events(int64 reconnects, int64 expirations)
{
	ZkstClusterShared *cs = cluster_shared();

	LWLockAcquire(&cs->lock, LW_EXCLUSIVE);
	cs->cl.reconnects += reconnects;
	cs->cl.expirations += expirations;
	LWLockRelease(&cs->lock);
}

/*
 * The current shared values, not a cached snapshot: each row is copied
 * under its own lock.  The copy is allocated before the scan, with room
 * for the rows concurrent creators may add beyond the cap before they
 * evict.
 */
StatEntry *
zkst_store_rows(int *n)
{
	dshash_seq_status hs;
	PgStatShared_HashEntry *p;
	int			cap = zklock_stat_max_names + zklock_stat_max_names / 4 + 64;
	StatEntry  *copy;

	copy = palloc_extended(sizeof(StatEntry) * (Size) cap, MCXT_ALLOC_HUGE);
	*n = 0;
	dshash_seq_init(&hs, pgStatLocal.shared_hash, false);
	while ((p = dshash_seq_next(&hs)) != NULL)
	{
		ZkstRowShared *rs;

		if (p->key.kind != kind_rows || p->dropped || *n >= cap)
			continue;
		rs = (ZkstRowShared *) dsa_get_address(pgStatLocal.dsa, p->body);
		LWLockAcquire(&rs->header.lock, LW_SHARED);
		if (rs->row.key.name[0] != '\0')
			memcpy(&copy[(*n)++], &rs->row, sizeof(StatEntry));
		LWLockRelease(&rs->header.lock);
	}
	dshash_seq_term(&hs);
	return copy;
}

void
zkst_store_cluster(StatCluster *out)
{
	ZkstClusterShared *cs = cluster_shared();

	LWLockAcquire(&cs->lock, LW_SHARED);
	memcpy(out, &cs->cl, sizeof(StatCluster));
	LWLockRelease(&cs->lock);
}

void
zkst_store_reset_name(const StatKey *key)
{
	note_dropped(drop_rows(match_name, PointerGetDatum(key)), false);
}

void
zkst_store_reset_all(TimestampTz now)
{
	ZkstClusterShared *cs = cluster_shared();
	int64		dropped = drop_rows(match_all, (Datum) 0);

	LWLockAcquire(&cs->lock, LW_EXCLUSIVE);
	cs->cl.nentries = Max(cs->cl.nentries - dropped, 0);
	memset(&cs->cl.total, 0, sizeof(StatCounts));
	cs->cl.reconnects = 0;
	cs->cl.expirations = 0;
	cs->cl.evictions = 0;
	cs->cl.since = now;
	LWLockRelease(&cs->lock);
}

#endif							/* PG_VERSION_NUM >= 180000 */
