"""
The manual's three-server ensemble ("Operating ZooKeeper for zklock", "An
ensemble of three"), run as written (issue 42, point 7).

The zoo.cfg block and the `echo N > .../myid` line are read from doc/04-operations.md.
To put the three servers on this machine, only what must differ between
hosts is replaced: each server's clientPort, the server.N lines' host
names and ports (zkN.example:2888:3888 -> 127.0.0.1:<free>:<free>) and
dataDir (one directory per server); every other line is the manual's.  The
servers are Debian's ZooKeeper 3.8.0 started by QuorumPeerMain as the
harness does (the manual's `bin/zkServer.sh` belongs to Apache's tarball,
which this machine does not have).

  a  the three start, one leader and two followers (the manual's `srvr`
     check), and a backend pointed at them takes and releases a lock
"""

import os
import re

import harness

TIMEOUT = 180
MANUAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..',
                      'doc', '04-operations.md')


def readme_ensemble():
    """(zoo.cfg text, myid path) of the manual's ensemble example."""
    text = open(MANUAL).read()
    start = text.index('* **An ensemble of three.**')
    part = text[start:text.index('\n* **', start + 1)]
    blocks = re.findall(r'```(\w*)\n(.*?)```', part, re.S)
    assert [lang for lang, _ in blocks] == ['', 'sh'], blocks
    cfg = '\n'.join(l.strip() for l in blocks[0][1].splitlines()) + '\n'
    m = re.search(r'^\s*echo 1 > (\S+)\s+# on zk1; 2 on zk2, 3 on zk3$',
                  blocks[1][1], re.M)
    assert m, blocks[1][1]
    return cfg, m.group(1)


class ReadmeEnsemble(harness.ZooKeeper):
    """harness.ZooKeeper with the manual's zoo.cfg and myid files."""

    def __init__(self, cfg, myid_path, **kw):
        super().__init__(n=3, **kw)
        self.readme_cfg = cfg
        self.myid_path = myid_path

    def _configure(self):
        data_dir = re.search(r'^dataDir=(.*)$', self.readme_cfg,
                             re.M).group(1)
        assert os.path.dirname(self.myid_path) == data_dir, \
            (self.myid_path, data_dir)
        for sid in self.sids:
            d = self.server_dir(sid)
            data = os.path.join(d, 'data')
            os.makedirs(data, exist_ok=True)
            cfg = self.readme_cfg
            for old, new in [('dataDir=%s\n' % data_dir, 'dataDir=%s\n' % data),
                             ('clientPort=2181\n',
                              'clientPort=%d\n' % self.client_ports[sid])] + [
                    ('server.%d=zk%d.example:2888:3888\n' % (o, o),
                     'server.%d=127.0.0.1:%d:%d\n' % (
                         o, self.quorum_ports[o], self.election_ports[o]))
                    for o in self.sids]:
                assert cfg.count(old) == 1, (old, cfg)
                cfg = cfg.replace(old, new)
            with open(os.path.join(d, 'zoo.cfg'), 'w') as f:
                f.write(cfg)
            # the manual: echo N > <dataDir>/myid
            with open(os.path.join(data, os.path.basename(self.myid_path)),
                      'w') as f:
                f.write('%d\n' % sid)
        self._configured = True


def test_readme_ensemble(ctx):
    """The manual's zoo.cfg and myid on three servers: one leader, two
    followers; a lock taken through all three hosts is granted on one of
    them and its node is gone after COMMIT."""
    cfg, myid = readme_ensemble()
    ens = ReadmeEnsemble(cfg, myid, base_dir=ctx.workdir, name='zk-readme')
    try:
        ens.start()
        modes = sorted(ens.mode(s) for s in ens.sids)
        assert modes == ['follower', 'follower', 'leader'], modes
        b = ctx.backend('zoocfg')
        b.query("SET zklock.hosts = '%s'" % ens.connect_string)
        b.query('BEGIN')
        assert b.scalar("SELECT zk_lock_exclusive('zoocfg', '20 s')") > 0
        state, server = b.query('SELECT state, server FROM zk_status()')[0]
        assert state == 'connected', state
        assert server in ens.connect_string.split(','), server
        b.query('COMMIT')
        kz = harness.connect_kazoo(ens.connect_string)
        try:
            zi = harness.ZkInspector(kz, ctx.root)
            harness.wait_until(lambda: zi.contenders('zoocfg') == [], 10,
                               'the lock node to go')
        finally:
            kz.stop()
            kz.close()
        b.close()
    finally:
        ens.stop()
