"""
The manual's pg_cron recipes, run as written with a real pg_cron (issue 42,
point 3).

Two clusters, "cron_a" and "cron_b", preload pg_cron with the manual's three
settings (cron.use_background_workers = on among them) and get a
pg_hba.conf that, like Debian's, asks every TCP connection of another
role than postgres for a password (scram-sha-256); the job role has none.
The SQL is the manual's own: the ```sql blocks of the section "Running a job
on one cluster at a time (pg_cron)" are read from doc/01-sql-reference.md, and only the
schedule ('0 2 * * *' becomes '* * * * *'), the variant's period (a day
becomes the minute) and the shared server's address are replaced, each
replacement checked to match exactly once.

  a  the try-lock recipe: the holder of one minute's run is held inside
     its job (a table lock of the test on rollup_daily); the other
     cluster's run skips; once let go, exactly one 'done' and one
     'skipped' for that minute, both runs 'succeeded', the holder's node
     kazoo's layout (ALTER ROLE ... SET zklock.protocol) and owned by
     role nightly_job, application nightly-rollup
  b  the variant (lock waited for, a period row in a shared database
     reached through postgres_fdw): two minutes in a row, each period
     has exactly one row and exactly one 'done' across the clusters
  c  the variant, the holder lost mid-run: the cluster doing the work is
     held in its remote INSERT, its background worker is terminated;
     the other cluster, waiting on the lock, runs that period: one row,
     written by the survivor, the killed run 'failed'

pg_cron must be installed for the major under test: Debian has it for 15
only (postgresql-15-cron, test/install-deps.sh installs it); elsewhere the
module is skipped, saying so.  Every wait is bounded (a minute schedule:
up to ~70 s for a run to start).
"""

import os
import re
import time

import pytest

import harness

TIMEOUT = 300
SETUP_TIMEOUT = 300
MANUAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..',
                      'doc', '01-sql-reference.md')
PKGLIBDIR = harness._pg_config('--pkglibdir')
SHAREDIR = harness._pg_config('--sharedir')
HAVE_CRON = os.path.exists(os.path.join(PKGLIBDIR, 'pg_cron.so')) and \
    os.path.exists(os.path.join(SHAREDIR, 'extension', 'pg_cron.control'))

pytestmark = pytest.mark.skipif(
    not HAVE_CRON,
    reason='pg_cron is not installed for PostgreSQL %d (no pg_cron.so in %s): '
    "Debian 12 packages it for 15 only (postgresql-15-cron), and its source "
    "package is not served by this machine's mirror, so it cannot be built "
    'for the other majors here' % (harness.PG_MAJOR, PKGLIBDIR))

DB = 'postgres'                 # cron.database_name, as the manual sets it
RUN_WAIT_S = 100                # a minute schedule: next boundary + the run
PASSWORD = 'change-me'


# ---------------------------------------------------------------------------
# the manual's SQL
# ---------------------------------------------------------------------------

def readme_blocks():
    """The ```sql blocks of the manual's pg_cron section, in order."""
    text = open(MANUAL).read()
    start = text.index('### Running a job on one cluster at a time (pg_cron)')
    end = text.index('\n## ', start)
    return re.findall(r'```sql\n(.*?)```', text[start:end], re.S)


def replace_once(sql, old, new):
    assert sql.count(old) == 1, 'manual block: %r occurs %d times' % (
        old, sql.count(old))
    return sql.replace(old, new)


def recipe_sql():
    """(setup, shared, variant): the manual's blocks as the test runs them."""
    blocks = readme_blocks()
    assert len(blocks) == 4, 'manual pg_cron section: %d sql blocks, not 4' \
        % len(blocks)
    setup, _refresh, shared, variant = blocks
    assert 'zk_try_lock_exclusive' in setup and 'rollup_period' in shared
    setup = replace_once(setup, "'0 2 * * *'", "'* * * * *'")
    variant = replace_once(variant, "'0 2 * * *'", "'* * * * *'")
    variant = replace_once(variant,
                           "date_trunc('day', now()) - interval '1 day'",
                           "date_trunc('minute', now())")
    return setup, shared, variant


# ---------------------------------------------------------------------------
# clusters
# ---------------------------------------------------------------------------

# like Debian's pg_hba.conf for TCP: a password for every role but the
# test's own superuser (the harness connects as postgres over TCP)
HBA = '''local all postgres trust
host all postgres 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
'''


def start_cluster(ctx, name, conf):
    pg = harness.PgCluster(name, conf, base_dir=ctx.workdir)
    pg.init()
    path = os.path.join(pg.data_dir, 'pg_hba.conf')
    with open(path, 'w') as f:
        f.write(HBA)
    harness.chown_to_pg_user(path)
    pg.start()
    ctx.shared.clusters.append(pg)
    return pg


def module_setup(ctx):
    ctx.shared.clusters = []
    setup, shared_sql, variant = recipe_sql()
    # the shared database of the variant
    s = start_cluster(ctx, 'cron_shared', {'password_encryption':
                                           'scram-sha-256'})
    s.psql('CREATE DATABASE jobs')
    s.psql(shared_sql, dbname='jobs')
    ctx.shared.s = s
    ctx.shared.variant = replace_once(
        variant, "host 'db-shared', port '5432', dbname 'jobs'",
        "host '127.0.0.1', port '%d', dbname 'jobs'" % s.port)
    ctx.shared.ab = []
    for name in ('cron_a', 'cron_b'):
        pg = start_cluster(ctx, name, {
            'shared_preload_libraries': 'pg_cron',
            'cron.database_name': DB,
            'cron.use_background_workers': True,
            'cluster_name': name,
            'zklock.hosts': ctx.zk.connect_string,
            'zklock.root': ctx.root,
            'zklock.session_timeout': '%ds' % ctx.session_timeout,
            'zklock.connect_timeout': '%ds' % ctx.connect_timeout,
            'zklock.log_lock_waits': False,
        })
        # the job's own tables, which the manual assumes
        pg.psql('CREATE TABLE orders (created_at timestamptz, amount numeric);'
                'INSERT INTO orders VALUES (now(), 5), (now(), 7);'
                'CREATE TABLE rollup_daily (day date, total numeric)')
        ctx.shared.ab.append(pg)
    ctx.shared.setup = setup


def module_teardown(ctx):
    for pg in getattr(ctx.shared, 'clusters', []):
        pg.stop()


def q(pg, sql, args=None, dbname=DB):
    c = pg.connect(dbname=dbname)
    try:
        with c.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall() if cur.description else None
    finally:
        c.close()


def before_second(limit):
    """Wait (at most ~60 s) until the wall clock's second of the minute is
    between 3 and `limit`, so that what follows is done before the next
    minute's runs start (and not in the first second of a minute, when
    pg_cron 1.4 runs a job scheduled then at once)."""
    harness.wait_until(lambda: 3 <= time.time() % 60 < limit, 61,
                       'second 3 to %d of a minute' % limit, interval=0.2)


def unschedule(pg, job):
    """Stop the job (cron.unschedule by name looks only at the caller's
    jobs; these are nightly_job's); returns its job id."""
    r = q(pg, 'SELECT jobid, cron.unschedule(jobid) FROM cron.job '
          'WHERE jobname = %s', [job])
    assert len(r) == 1 and r[0][1], r
    return r[0][0]


def runs(pg, jobid, since):
    """(status, return_message) of the job's runs since `since`."""
    return q(pg, "SELECT status, coalesce(return_message, '') "
             "FROM cron.job_run_details WHERE jobid = %s AND start_time >= %s "
             "ORDER BY start_time", [jobid, since])


def cron_workers(pg):
    """(pid, wait_event_type, wait_event) of pg_cron's job workers."""
    return q(pg, "SELECT pid, wait_event_type, wait_event "
             "FROM pg_stat_activity WHERE usename = 'nightly_job'")


def owner_port(owner):
    m = re.search(r' port=(\d+) ', owner)
    return int(m.group(1)) if m else None


def test_try_lock_recipe(ctx):
    """The manual's set-up and try-lock job on both clusters, every minute, as
    role nightly_job under a pg_hba.conf that wants its password: with the
    first run's holder kept inside its job, the other cluster skips; then
    exactly one 'done' and one 'skipped' for that minute, both runs
    succeeded, the holder's node in kazoo's layout with the job's role and
    application name."""
    a, b = ctx.shared.ab
    before_second(40)
    since = q(a, 'SELECT now()')[0][0]
    holds = []
    for pg in (a, b):
        pg.psql(ctx.shared.setup)
        pg.psql("ALTER ROLE nightly_job SET zklock.protocol = 'kazoo'")
    for pg in (a, b):
        # the test keeps the run that gets the lock inside its job
        c = pg.connect(dbname=DB, autocommit=False)
        c.cursor().execute('LOCK TABLE rollup_daily IN SHARE MODE')
        holds.append(c)
    try:
        # one run skipped, the other holds the lock, blocked in its INSERT
        def one_skipped():
            n = [q(pg, "SELECT count(*) FROM rollup_log "
                   "WHERE outcome LIKE 'skipped%%'")[0][0] for pg in (a, b)]
            return sorted(n) == [0, 1] and n
        n = harness.wait_until(one_skipped, RUN_WAIT_S,
                               'one cluster\'s run to skip')
        holder = a if n[0] == 0 else b
        queue = q(a, "SELECT holding, owner, node FROM zk_lock_queue("
                  "'nightly-rollup')")
        assert len(queue) == 1 and queue[0][0], queue
        owner, node = queue[0][1], queue[0][2]
        assert owner_port(owner) == holder.port, (owner, holder.port)
        assert ' role=nightly_job ' in owner, owner
        assert owner.endswith('application_name=nightly-rollup'), owner
        assert '__lock__' in node, node       # kazoo's layout (ALTER ROLE)
    finally:
        for c in holds:
            c.rollback()
            c.close()
    harness.wait_until(
        lambda: q(holder, "SELECT count(*) FROM rollup_log "
                  "WHERE outcome = 'done'")[0][0] == 1,
        30, 'the holder\'s run to finish')
    jobids = [unschedule(pg, 'nightly-rollup') for pg in (a, b)]
    logs = [q(pg, 'SELECT outcome FROM rollup_log ORDER BY ran_at')
            for pg in (a, b)]
    outcomes = sorted(o for rows in logs for (o,) in rows)
    # runs of later minutes (unscheduled only now) may have come too; the
    # first minute's are exactly one done and one skipped
    first = sorted([logs[0][0][0], logs[1][0][0]])
    assert first == ['done', 'skipped: running elsewhere'], logs
    assert q(holder, 'SELECT count(*) FROM rollup_daily')[0][0] >= 1
    for pg, jobid in zip((a, b), jobids):
        details = runs(pg, jobid, since)
        assert details and all(s == 'succeeded' for s, _ in details), \
            (pg.name, details)
    ctx.log('outcomes: %s' % outcomes)
    for pg in (a, b):
        pg.psql('ALTER ROLE nightly_job RESET zklock.protocol')


def install_variant(ctx):
    if getattr(ctx.shared, 'variant_done', False):
        return
    for pg in ctx.shared.ab:
        pg.psql(ctx.shared.variant)
    ctx.shared.variant_done = True


def period_rows(ctx):
    return q(ctx.shared.s, 'SELECT period, cluster FROM rollup_period '
             'ORDER BY period', dbname='jobs')


def log_by_period(pg):
    """{period: [outcome, ...]} of the cluster's rollup_log (a run's
    ran_at is its transaction's start: the minute it was started for)."""
    out = {}
    for p, o in q(pg, "SELECT date_trunc('minute', ran_at), outcome "
                  'FROM rollup_log ORDER BY ran_at'):
        out.setdefault(p, []).append(o)
    return out


def test_variant_once_per_period(ctx):
    """The manual's variant (wait for the lock, a period row in a shared
    database through postgres_fdw, user mapping with a password) every
    minute on both clusters: for the first two periods, once both
    clusters' runs of each are logged, the shared table has exactly one
    row for it, one cluster logged 'done' (the one the row names) and
    the other 'skipped: done elsewhere'; every run succeeded."""
    a, b = ctx.shared.ab
    for pg in (a, b):
        pg.psql('TRUNCATE rollup_log')
    before_second(45)
    since = q(a, 'SELECT now()')[0][0]
    install_variant(ctx)

    def two_periods_run_twice():
        logs = [log_by_period(pg) for pg in (a, b)]
        periods = sorted(set(logs[0]) | set(logs[1]))[:2]
        return len(periods) == 2 and all(
            len(logs[0].get(p, [])) + len(logs[1].get(p, [])) >= 2
            for p in periods) and periods
    periods = harness.wait_until(two_periods_run_twice, 3 * 60 + 20,
                                 'both clusters\' runs of two periods')
    jobids = [unschedule(pg, 'rollup-once') for pg in (a, b)]

    # both clusters' runs have ended (a later minute's may have started)
    def ended():
        d = [runs(pg, j, since) for pg, j in zip((a, b), jobids)]
        return all(r and all(st in ('succeeded', 'failed') for st, _ in r)
                   for r in d) and d
    details = harness.wait_until(ended, 60, 'the runs to end')
    for r in details:
        assert all(st == 'succeeded' for st, _ in r), details
    rows = period_rows(ctx)
    logs = [log_by_period(pg) for pg in (a, b)]
    for p in periods:
        mine = [c for period, c in rows if period == p]
        assert len(mine) == 1, (p, rows)
        outcomes = {pg.name: logs[n].get(p, []) for n, pg in enumerate((a, b))}
        assert outcomes[mine[0]] == ['done'], (p, mine, outcomes)
        other = b.name if mine[0] == a.name else a.name
        assert outcomes[other] == ['skipped: done elsewhere'], \
            (p, mine, outcomes)
    ctx.log('periods: %s' % rows)


def test_variant_holder_lost_mid_run(ctx):
    """The variant with the cluster doing the work lost mid-run: a table
    lock of the test on the shared rollup_period holds the lock holder's
    run in its INSERT, while the other cluster's run waits on the zklock
    lock; the holder's background worker is terminated
    (pg_terminate_backend), and the other cluster runs that period: one
    row for it, written by the survivor; the killed run failed."""
    a, b = ctx.shared.ab
    s = ctx.shared.s
    install_variant(ctx)
    for pg in (a, b):
        pg.psql('TRUNCATE rollup_log')
    before_second(45)
    hold = s.connect(dbname='jobs', autocommit=False)
    try:
        hold.cursor().execute('LOCK TABLE rollup_period IN SHARE MODE')
        # the manual's schedule again (test b unscheduled the job)
        schedule = re.search(r'SELECT cron\.schedule_in_database\(.*?\);',
                             ctx.shared.variant, re.S).group(0)
        for pg in (a, b):
            pg.psql(schedule)
        # one run holds the zklock lock (blocked in its remote INSERT), the
        # other waits for it
        def two_contenders():
            queue = q(a, "SELECT holding, owner FROM zk_lock_queue("
                      "'rollup-once')")
            return len(queue) == 2 and queue
        queue = harness.wait_until(two_contenders, RUN_WAIT_S,
                                   'both runs in the lock\'s queue')
        assert queue[0][0] and not queue[1][0], queue
        port = owner_port(queue[0][1])
        holder, survivor = (a, b) if port == a.port else (b, a)
        assert holder.port == port, (queue, a.port, b.port)
        pid = int(re.search(r' pid=(\d+) ', queue[0][1]).group(1))
        assert pid in [p for p, _, _ in cron_workers(holder)]
        period = q(holder, "SELECT date_trunc('minute', backend_start) "
                   'FROM pg_stat_activity WHERE pid = %s', [pid])[0][0]
        t0 = time.monotonic()
        harness.terminate_backend(holder, pid)
        # the survivor gets the lock and is held in its INSERT in turn
        harness.wait_until(
            lambda: (lambda qq: len(qq) == 1 and qq[0][0] and
                     owner_port(qq[0][1]) == survivor.port)(
                q(a, "SELECT holding, owner FROM zk_lock_queue("
                  "'rollup-once')")),
            2 * ctx.session_timeout + 10, 'the survivor to hold the lock')
        ctx.figure('lock passed on after the holder was terminated',
                   time.monotonic() - t0, 's', '%.2f')
    finally:
        hold.rollback()
        hold.close()
    harness.wait_until(lambda: [r for r in period_rows(ctx) if r[0] == period],
                       30, 'the period\'s row in rollup_period')
    jobids = {pg.name: unschedule(pg, 'rollup-once') for pg in (a, b)}
    rows = period_rows(ctx)
    mine = [r for r in rows if r[0] == period]
    assert all(c != holder.name for p, c in rows if p >= period), rows
    assert mine == [(period, survivor.name)], (period, rows)
    assert q(holder, "SELECT count(*) FROM rollup_log WHERE outcome = "
             "'done'")[0][0] == 0
    # the holder's run of that period (not one pg_cron may have started
    # when the job was scheduled)
    killed = harness.wait_until(
        lambda: [st for st, _ in runs(holder, jobids[holder.name], period)
                 if st not in ('starting', 'running')],
        30, 'the killed run\'s status')
    assert killed[0] == 'failed', runs(holder, jobids[holder.name], period)
    ctx.log('killed on %s, period %s done by %s'
            % (holder.name, period, rows))
