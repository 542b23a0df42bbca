"""
Errors during a ZooKeeper outage name the cause and a safe action
(issue 29, point 3), and a DBA can always look at the backend's locks.

  * a commit check that ZooKeeper did not answer fails with 40001 saying
    since when the connection is gone, and suggests retrying once
    ZooKeeper is reachable, never turning zklock.verify_at_commit off;
  * a call whose timeout ran out while ZooKeeper was unreachable (never
    connected, or the connection lost during the wait) says so, naming
    the hosts, instead of the contention text;
  * a host of zklock.hosts that does not resolve is named (08001);
  * a chroot path in zklock.hosts is refused at SET (22023), pointing
    to zklock.root;
  * after a session-level lock is lost, zk_locks and zk_status() are
    readable in autocommit (the lock shown lost), while a transaction
    that wrote under the lost lock still fails with 40001.

The outages are played with a proxy (test/lib/zkproxy.py) between one
backend and the suite's ZooKeeper: stopping it cuts the backend off
(reconnects are refused) while the rest of the suite goes on.
"""

import time
import uuid

import zkproxy
import harness
from test_multisession import LOCK_X, expect_sqlstate, token_of

TIMEOUT = 120


class Cut:
    """A proxy to the suite's ZooKeeper for one backend; stop() is the
    outage.  Always stopped at exit."""

    def __init__(self, ctx, name):
        self.ctx = ctx
        self.proxy = zkproxy.ZkProxy(ctx.zk.host_port(1),
                                     name='zkproxy-' + name)

    def __enter__(self):
        self.proxy.start()
        return self

    def backend(self, name):
        b = self.ctx.backend(name)
        b.query('SET zklock.hosts = %s', [self.proxy.address])
        return b

    def cut(self):
        self.proxy.stop()

    def __exit__(self, *exc):
        self.proxy.stop()
        return False


def assert_no_verify_off_hint(e):
    text = '%s %s' % (e.diag.message_hint or '', e.diag.message_detail or '')
    assert 'verify_at_commit' not in text, \
        'the error suggests turning the check off: %r' % text


def test_unconfirmed_commit_names_the_outage(ctx):
    """ZooKeeper unreachable at COMMIT: 40001, the DETAIL says since when
    the connection is lost and for how long the check waited, the HINT
    says to retry once ZooKeeper is reachable and to look at
    zk_status(), not to turn zklock.verify_at_commit off."""
    res = 'outage-commit-%s' % uuid.uuid4().hex[:8]
    with Cut(ctx, 'commit') as c:
        b = c.backend('outage-commit')
        b.query('BEGIN')
        token_of(b.submit(LOCK_X, [res, '10 seconds']), 10)
        c.cut()
        e = expect_sqlstate(b.submit('COMMIT'), '40001',
                            ctx.session_timeout + 15, 'COMMIT cut off')
    detail = e.diag.message_detail or ''
    hint = e.diag.message_hint or ''
    assert_no_verify_off_hint(e)
    assert 'could not confirm' in (e.diag.message_primary or ''), str(e)
    assert 'since' in detail and c.proxy.address in detail, detail
    assert 'zk_status()' in hint and 'reachable' in hint, hint
    # the session expires on the server; its node goes with it
    ctx.zi.wait_contenders(res, 0, timeout=ctx.session_timeout + 10)
