"""
A network nemesis for zklock's tests: ZooKeeper servers and PostgreSQL
clusters each in a network namespace of their own, joined by a bridge,
and nftables rules on that bridge that cut, heal and degrade the links
between them (in the spirit of Jepsen).

    net = Network().start()                  # bridge namespace + blackhole
    net.add_node('obs')                      # the test's own vantage point
    ens = NsZooKeeper(net, n=3, base_dir=d)  # zk1..zk3, one namespace each
    a = NsPgCluster(net, 'pga', 'nem-a', conf, base_dir=d)
    ens.start(); a.start()
    net.partition(['zk1'], ['zk2'])          # both directions
    net.drop('zk1', 'zk2')                   # one way only
    net.isolate('zk3')                       # from every other node
    net.loss(['pga'], ['zk1', 'zk2', 'zk3'], 20)   # 20 % of packets, both ways
    net.heal()                               # every rule gone
    net.stop()                               # namespaces, links, rules gone

Safety, whatever the test does:
  * every address is in 198.18.0.0/15 (reserved for benchmarking, RFC
    2544) and lives only inside namespaces created here; the root
    namespace gets no address and no link, only a blackhole route for
    198.18.0.0/15 (so nothing could ever be routed out even by mistake);
  * names carry a per-run prefix (`zn` + 6 random hex digits), so runs
    side by side do not collide; veth ends are created directly inside
    their namespaces and never appear in the root namespace;
  * the rules live in the bridge's own namespace: deleting it removes
    them together with the bridge;
  * Network.stop() is idempotent and also runs at interpreter exit
    (atexit) and from harness.stop_all() (after the servers that were
    started in its namespaces: it is registered before them).

Processes are put in a namespace with `ip netns exec NS cmd`, which execs
the command itself, so the pid the harness keeps is the server's own.
PostgreSQL clients reach a cluster through its Unix socket, which does
not depend on the network namespace.  The test process itself stays in
the root namespace; what must reach the servers' addresses (four letter
words, a kazoo client) runs from the `obs` node: a socket created by a
thread that entered a namespace with setns(2) stays in that namespace,
and threads started by such a thread inherit it (see in_netns).
"""

import atexit
import ctypes
import os
import re
import socket
import subprocess
import threading

import harness
from harness import log

IP = '/usr/sbin/ip'
NFT = '/usr/sbin/nft'
BLACKHOLE = '198.18.0.0/15'
SUBNET = '198.18.0'            # /24 on the bridge, inside the namespaces
CLONE_NEWNET = 0x40000000
TABLE = 'nemesis'

_libc = ctypes.CDLL(None, use_errno=True)


def _run(cmd, timeout=30, check=True, input=None):
    r = subprocess.run(cmd, input=input, capture_output=True, text=True,
                       timeout=timeout,
                       stdin=None if input is not None else subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise RuntimeError('%s failed (status %d): %s%s'
                           % (' '.join(cmd), r.returncode, r.stdout,
                              r.stderr))
    return r


def _setns(path):
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, 'setns(%s): %s' % (path, os.strerror(err)))
    finally:
        os.close(fd)


def in_netns(ns, fn, *args, timeout=60):
    """Run fn(*args) on a new thread that first enters network namespace
    `ns` (by name, as `ip netns` knows it).  Sockets fn creates belong to
    that namespace for good, and so do the threads it starts (a kazoo
    client's).  Returns fn's result or raises its exception."""
    box = {}

    def target():
        try:
            _setns('/run/netns/%s' % ns)
            box['value'] = fn(*args)
        except BaseException as e:
            box['error'] = e
    t = threading.Thread(target=target, daemon=True, name='netns-%s' % ns)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError('in_netns(%s): %r still running after %s s'
                           % (ns, fn, timeout))
    if 'error' in box:
        raise box['error']
    return box.get('value')


def netns_connect(ns, addr, timeout=5.0):
    """A TCP connection to `addr` made from inside namespace `ns`."""
    return in_netns(ns, socket.create_connection, addr, timeout,
                    timeout=timeout + 5)


# ---------------------------------------------------------------------------
# the network
# ---------------------------------------------------------------------------

class Network:
    """A bridge in a namespace of its own and nodes (one namespace each,
    one veth into the bridge, one address).  Faults are nftables rules
    on the bridge's forward hook (bridge family), so a dropped packet is
    lost on the wire: neither end learns of it from its own stack."""

    def __init__(self, prefix=None):
        self.prefix = prefix or 'zn%s' % os.urandom(3).hex()
        self.bridge_ns = '%s-br' % self.prefix
        self.nodes = {}               # name -> (namespace, address)
        self.rules = {}               # (src, dst) -> loss percent (100: cut)
        self._started = False
        self._stopped = False
        self._lock = threading.RLock()
        self.applied = 0              # rule sets loaded (for figures)

    def __repr__(self):
        return '<Network %s %s>' % (self.prefix, sorted(self.nodes))

    def ns(self, node):
        return self.nodes[node][0]

    def addr(self, node):
        return self.nodes[node][1]

    def node_of(self, address):
        for n, (_, a) in self.nodes.items():
            if a == address:
                return n
        return None

    # -- building ---------------------------------------------------------

    def start(self):
        # The blackhole first: nothing in 198.18.0.0/15 can leave the
        # machine through the root namespace's default route.
        _run([IP, 'route', 'replace', 'blackhole', BLACKHOLE])
        harness._register(self)        # stopped after what runs inside
        atexit.register(self.stop)
        self._started = True
        _run([IP, 'netns', 'add', self.bridge_ns])
        self._in(self.bridge_ns, [IP, 'link', 'set', 'lo', 'up'])
        self._in(self.bridge_ns, [IP, 'link', 'add', 'br0', 'type', 'bridge'])
        self._in(self.bridge_ns, [IP, 'link', 'set', 'br0', 'up'])
        self.apply()
        log('network %s: bridge namespace %s' % (self.prefix,
                                                  self.bridge_ns))
        return self

    def add_node(self, name):
        """A namespace with loopback and one veth (eth0) into the bridge,
        address 198.18.0.<10 + index>/24.  Returns its address."""
        assert re.fullmatch(r'[a-z0-9]{1,8}', name), name
        assert name not in self.nodes
        ns = '%s-%s' % (self.prefix, name)
        address = '%s.%d' % (SUBNET, 10 + len(self.nodes))
        assert address.startswith('198.18.')
        _run([IP, 'netns', 'add', ns])
        self.nodes[name] = (ns, address)
        self._in(ns, [IP, 'link', 'set', 'lo', 'up'])
        # both ends are born in their namespaces: nothing in the root one
        _run([IP, 'link', 'add', 'eth0', 'netns', ns, 'type', 'veth',
              'peer', 'name', name, 'netns', self.bridge_ns])
        self._in(self.bridge_ns, [IP, 'link', 'set', name, 'master', 'br0'])
        self._in(self.bridge_ns, [IP, 'link', 'set', name, 'up'])
        self._in(ns, [IP, 'addr', 'add', address + '/24', 'dev', 'eth0'])
        self._in(ns, [IP, 'link', 'set', 'eth0', 'up'])
        return address

    def _in(self, ns, cmd, **kw):
        return _run([IP, 'netns', 'exec', ns] + cmd, **kw)

    def exec_prefix(self, node):
        """Command prefix that runs a command inside node's namespace."""
        return [IP, 'netns', 'exec', self.ns(node)]

    # -- faults -----------------------------------------------------------

    def _pairs(self, a, b):
        a = [a] if isinstance(a, str) else list(a)
        b = [b] if isinstance(b, str) else list(b)
        for x in a:
            for y in b:
                if x != y:
                    assert x in self.nodes and y in self.nodes, (x, y)
                    yield x, y

    def drop(self, src, dst, percent=100, apply=True):
        """Drop `percent` % of the packets from src to dst (one way)."""
        with self._lock:
            for x, y in self._pairs(src, dst):
                self.rules[(x, y)] = percent
            if apply:
                self.apply()

    def partition(self, side1, side2, percent=100):
        """No packet (or `percent` %) between any node of side1 and any
        node of side2, both ways."""
        with self._lock:
            self.drop(side1, side2, percent, apply=False)
            self.drop(side2, side1, percent, apply=False)
            self.apply()

    def loss(self, side1, side2, percent):
        """Random loss of `percent` % both ways (numgen random)."""
        assert 0 < percent < 100
        self.partition(side1, side2, percent)

    def isolate(self, node, keep=('obs',)):
        """Cut `node` from every other node but those in `keep` (the
        test's vantage point by default)."""
        others = [n for n in self.nodes if n != node and n not in keep]
        self.partition([node], others)

    def heal(self, src=None, dst=None):
        """Remove every rule (or those between src and dst, both ways)."""
        with self._lock:
            if src is None:
                self.rules.clear()
            else:
                for x, y in self._pairs(src, dst):
                    self.rules.pop((x, y), None)
                    self.rules.pop((y, x), None)
            self.apply()

    def ruleset(self):
        lines = ['table bridge %s' % TABLE, 'delete table bridge %s' % TABLE,
                 'table bridge %s {' % TABLE,
                 '  chain cut {',
                 '    type filter hook forward priority 0; policy accept;']
        for (x, y), pct in sorted(self.rules.items()):
            cond = 'ip saddr %s ip daddr %s' % (self.addr(x), self.addr(y))
            if pct >= 100:
                lines.append('    %s counter drop' % cond)
            else:
                lines.append('    %s numgen random mod 100 < %d counter drop'
                             % (cond, int(pct)))
        lines += ['  }', '}', '']
        return '\n'.join(lines)

    def apply(self):
        """Load the whole rule set at once (nft -f is atomic)."""
        with self._lock:
            if self._stopped:
                return
            self._in(self.bridge_ns, [NFT, '-f', '-'], input=self.ruleset())
            self.applied += 1

    def dropped_packets(self):
        """Packets dropped by the current rules so far (nft counters)."""
        r = self._in(self.bridge_ns, [NFT, 'list', 'table', 'bridge', TABLE],
                     check=False)
        return sum(int(m) for m in re.findall(r'counter packets (\d+)',
                                              r.stdout))

    # -- cleanup ----------------------------------------------------------

    def namespaces(self):
        return [self.bridge_ns] + [ns for ns, _ in self.nodes.values()]

    def leftovers(self):
        """Namespaces of this run that still exist (after stop(): none)."""
        r = _run([IP, 'netns', 'list'], check=False)
        names = {line.split()[0] for line in r.stdout.splitlines()
                 if line.strip()}
        return sorted(n for n in names if n.startswith(self.prefix + '-'))

    def stop(self):
        """Delete every namespace (the bridge's first: rules and bridge go
        with it; a veth goes with either end).  Idempotent, never raises;
        the blackhole route stays (it routes nothing anywhere)."""
        with self._lock:
            if self._stopped or not self._started:
                self._stopped = True
                harness._unregister(self)
                return
            self._stopped = True
        for ns in self.namespaces():
            try:
                _run([IP, 'netns', 'del', ns], check=False, timeout=20)
            except Exception as e:
                log('could not delete namespace %s: %s' % (ns, e))
        harness._unregister(self)
        left = self.leftovers()
        if left:
            log('namespaces left behind: %s' % left)
        else:
            log('network %s removed' % self.prefix)


# ---------------------------------------------------------------------------
# ZooKeeper servers in namespaces
# ---------------------------------------------------------------------------

CLIENT_PORT, QUORUM_PORT, ELECTION_PORT = 2181, 2888, 3888


class NsZooKeeper(harness.ZooKeeper):
    """harness.ZooKeeper whose server `sid` runs in node 'zk<sid>' of
    `net`, listening on that node's address with the standard ports.
    Four letter words are sent from node `via` (default 'obs')."""

    def __init__(self, net, n=3, tick_ms=1000, init_limit=10, sync_limit=10,
                 via='obs', **kw):
        super().__init__(n=n, tick_ms=tick_ms, **kw)
        self.net = net
        self.via = via
        self.init_limit = init_limit
        self.sync_limit = sync_limit
        self.client_ports = {s: CLIENT_PORT for s in self.sids}
        self.quorum_ports = {s: QUORUM_PORT for s in self.sids}
        self.election_ports = {s: ELECTION_PORT for s in self.sids}
        for sid in self.sids:
            if self.node(sid) not in net.nodes:
                net.add_node(self.node(sid))

    def node(self, sid):
        return 'zk%d' % sid

    def ip(self, sid):
        return self.net.addr(self.node(sid))

    @property
    def connect_string(self):
        return ','.join(self.host_port(s) for s in self.sids)

    def host_port(self, sid):
        return '%s:%d' % (self.ip(sid), CLIENT_PORT)

    def sid_of(self, host_port):
        host = str(host_port).rsplit(':', 1)[0]
        for sid in self.sids:
            if self.ip(sid) == host:
                return sid
        return None

    def _configure(self):
        for sid in self.sids:
            d = self.server_dir(sid)
            data = os.path.join(d, 'data')
            os.makedirs(data, exist_ok=True)
            cfg = [
                'tickTime=%d' % self.tick_ms,
                'initLimit=%d' % self.init_limit,
                'syncLimit=%d' % self.sync_limit,
                'dataDir=%s' % data,
                'clientPort=%d' % CLIENT_PORT,
                'clientPortAddress=%s' % self.ip(sid),
                'maxClientCnxns=0',
                'minSessionTimeout=%d' % self.min_session_ms,
                'maxSessionTimeout=%d' % self.max_session_ms,
                'admin.enableServer=false',
                '4lw.commands.whitelist=*',
                'forceSync=no',
                'preAllocSize=1024',
            ]
            for other in self.sids:
                cfg.append('server.%d=%s:%d:%d' % (
                    other, self.ip(other), QUORUM_PORT, ELECTION_PORT))
            with open(os.path.join(data, 'myid'), 'w') as f:
                f.write('%d\n' % sid)
            with open(os.path.join(d, 'zoo.cfg'), 'w') as f:
                f.write('\n'.join(cfg) + '\n')
        self._configured = True

    def _exec_prefix(self, sid):
        # harness.ZooKeeper._spawn's java, inside the server's namespace
        return self.net.exec_prefix(self.node(sid))

    def _connect(self, sid, timeout):
        # four-letter words go from the observer's namespace
        return netns_connect(self.net.ns(self.via), (self.ip(sid), CLIENT_PORT),
                             timeout)

    def followers(self):
        return [s for s in self.sids if self.mode(s) == 'follower']

    def stat_line(self, sid, key):
        """One `mntr` value of a server (None if it does not answer)."""
        try:
            out = self.four_letter(sid, 'mntr', timeout=2.0)
        except OSError:
            return None
        m = re.search(r'^%s\s+(\S+)' % re.escape(key), out, re.M)
        return m.group(1) if m else None


# ---------------------------------------------------------------------------
# PostgreSQL clusters in namespaces
# ---------------------------------------------------------------------------

class NsPgCluster(harness.PgCluster):
    """harness.PgCluster whose postmaster runs in node `node` of `net`.
    It listens on its namespace's loopback only; clients (the test's
    psycopg2 and psql) use its Unix socket, so self.host is the socket
    directory."""

    def __init__(self, net, node, name, extra_conf=None, base_dir=None):
        super().__init__(name, extra_conf, base_dir)
        self.net = net
        self.node = node
        if node not in net.nodes:
            net.add_node(node)
        self.host = self.socket_dir

    def __repr__(self):
        return '<NsPgCluster %s in %s>' % (self.name, self.node)

    def _run(self, cmd, timeout, check=True):
        # Only the start needs the namespace (the postmaster inherits it);
        # stop and reload work from anywhere, even after the namespace
        # was deleted.
        full = harness.as_pg_user(cmd)
        # (pg_ctl may come behind `env VAR=...`: make test SANITIZE=1)
        if 'start' in cmd and any(os.path.basename(c) == 'pg_ctl'
                                  for c in cmd):
            full = self.net.exec_prefix(self.node) + full
        r = subprocess.run(full, cwd=self.dir, timeout=timeout,
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True)
        if check and r.returncode != 0:
            raise RuntimeError('%s failed (status %d):\n%s%s' % (
                ' '.join(cmd), r.returncode, r.stdout, r.stderr))
        return r


# ---------------------------------------------------------------------------
# a kazoo client in a namespace
# ---------------------------------------------------------------------------

def kazoo_in(net, node, hosts, timeout=30, logger=None):
    """A started kazoo client whose threads (and so its sockets) live in
    node's namespace."""
    from kazoo.client import KazooClient

    def make():
        kz = KazooClient(hosts=hosts, timeout=timeout, logger=logger)
        kz.start(timeout=timeout)
        return kz
    return in_netns(net.ns(node), make, timeout=timeout + 10)


# ---------------------------------------------------------------------------
# ZooKeeper's own record: the transaction logs
# ---------------------------------------------------------------------------

OP_CREATE, OP_DELETE, OP_MULTI, OP_CREATE2 = 1, 2, 14, 15
OP_CREATE_CONTAINER, OP_CREATE_TTL = 19, 21
OP_CLOSE_SESSION, OP_ERROR = -11, -1
_CREATES = (OP_CREATE, OP_CREATE2, OP_CREATE_CONTAINER, OP_CREATE_TTL)


class Txn:
    """One logged transaction: zxid, session (clientId), time (the
    proposing leader's wall clock, ms), op type, and for creates and
    deletes the path (a multi's deletes in `deletes`)."""
    __slots__ = ('zxid', 'session', 'time_ms', 'op', 'path', 'deletes',
                 'creates')

    def __init__(self, zxid, session, time_ms, op):
        self.zxid, self.session, self.time_ms, self.op = \
            zxid, session, time_ms, op
        self.path = None
        self.deletes = []
        self.creates = []

    def __repr__(self):
        return '<Txn 0x%x op=%d s=0x%x %s %s>' % (
            self.zxid, self.op, self.session, self.time_ms,
            self.path or self.deletes or self.creates)


class _Reader:
    def __init__(self, buf):
        self.b, self.i = buf, 0

    def int(self):
        v = int.from_bytes(self.b[self.i:self.i + 4], 'big', signed=True)
        self.i += 4
        return v

    def long(self):
        v = int.from_bytes(self.b[self.i:self.i + 8], 'big', signed=True)
        self.i += 8
        return v

    def buffer(self):
        n = self.int()
        if n < 0:
            return b''
        v = self.b[self.i:self.i + n]
        self.i += n
        return v

    def string(self):
        return self.buffer().decode('utf-8', 'replace')


def _parse_body(op, body, txn):
    r = _Reader(body)
    if op in _CREATES or op == OP_DELETE:
        txn.path = r.string()
    elif op == OP_MULTI:
        for _ in range(max(0, r.int())):
            sub_op = r.int()
            data = r.buffer()
            if sub_op == OP_DELETE:
                txn.deletes.append(_Reader(data).string())
            elif sub_op in _CREATES:
                txn.creates.append(_Reader(data).string())


def read_txn_log(path):
    """Every transaction in one ZooKeeper transaction log file
    (FileTxnLog: header 'ZKLG', then crc, length, TxnHeader + record,
    'B'; the preallocated rest is zeros)."""
    with open(path, 'rb') as f:
        data = f.read()
    r = _Reader(data)
    if r.int() != 0x5a4b4c47:
        raise ValueError('%s: not a ZooKeeper transaction log' % path)
    r.int()
    r.long()
    out = []
    while r.i + 12 <= len(data):
        r.long()                                # crc
        n = r.int()
        if n <= 0 or r.i + n + 1 > len(data):
            break
        rec = _Reader(data[r.i:r.i + n])
        r.i += n + 1                            # and the 'B'
        session = rec.long()                    # TxnHeader: clientId,
        rec.int()                               # cxid,
        zxid, time_ms, op = rec.long(), rec.long(), rec.int()
        t = Txn(zxid, session, time_ms, op)
        try:
            _parse_body(op, rec.b[rec.i:], t)
        except Exception:
            pass
        out.append(t)
    return out


def read_txn_logs(data_dirs, quorum=None):
    """{zxid: Txn} of the committed transactions in the given servers'
    dataDirs (one per server of the ensemble).

    A server's log can hold proposals that were never committed: a
    leader cut off from its followers logs its own proposals (the
    closeSession of every session it expires, say) and may keep them on
    disk after it rejoins (it is then brought up to date with a snapshot).
    A committed transaction was logged by a quorum before it was
    committed, and nothing here purges logs, so only zxids found in the
    logs of at least `quorum` servers (default: a majority) count.
    """
    import glob
    quorum = quorum or len(data_dirs) // 2 + 1
    txns, seen = {}, {}
    for d in data_dirs:
        mine = set()
        for path in sorted(glob.glob(os.path.join(d, 'version-2', 'log.*'))):
            for t in read_txn_log(path):
                txns.setdefault(t.zxid, t)
                mine.add(t.zxid)
        for z in mine:
            seen[z] = seen.get(z, 0) + 1
    return {z: t for z, t in txns.items() if seen[z] >= quorum}


class TxnHistory:
    """What the ensemble itself recorded about lock nodes: who created a
    node (by its czxid, the fencing token) and when the leader removed it
    (its delete, a multi delete, or its session's close or expiry)."""

    def __init__(self, txns):
        self.txns = txns
        self.order = sorted(txns)
        self.created = {}             # czxid -> (path, session)
        self.removed_by_path = {}     # path -> Txn
        self.closed = {}              # session -> Txn
        for z in self.order:
            t = txns[z]
            if t.op in _CREATES and t.path:
                self.created[z] = (t.path, t.session)
            elif t.op == OP_DELETE and t.path:
                self.removed_by_path.setdefault(t.path, t)
            elif t.op == OP_MULTI:
                for p in t.deletes:
                    self.removed_by_path.setdefault(p, t)
            elif t.op == OP_CLOSE_SESSION:
                self.closed.setdefault(t.session, t)

    def removal(self, czxid):
        """(Txn that ended the node created at czxid, how) or (None, why)."""
        if czxid not in self.created:
            return None, 'no create with zxid 0x%x in the logs' % czxid
        path, session = self.created[czxid]
        cands = []
        d = self.removed_by_path.get(path)
        if d is not None and d.zxid > czxid:
            cands.append((d, 'deleted'))
        c = self.closed.get(session)
        if c is not None and c.zxid > czxid:
            cands.append((c, 'session 0x%x closed/expired' % session))
        if not cands:
            return None, 'not removed'
        return min(cands, key=lambda x: x[0].zxid)
