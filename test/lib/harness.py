"""
Test harness for zklock: throwaway ZooKeeper ensembles and PostgreSQL
clusters on loopback, plus helpers to drive backends and to look at
ZooKeeper directly.

Used by the test suites (make test: test/conftest.py) and meant to be
reused by later tools (a 3-server ensemble, several clusters, make demo,
make bench).

Rules every class here follows:
  * everything listens on 127.0.0.1 only, on ports picked free at start;
  * every wait is bounded (a TimeoutError says what was awaited);
  * whatever is started is registered and stopped by stop_all(), which runs
    at interpreter exit (atexit) and, after install_signal_handlers(), on
    SIGTERM/SIGHUP too; processes are stopped by their own pid only.

Only the Python 3.11 standard library, kazoo and psycopg2 are used.
Use /usr/bin/python3 (Debian's kazoo and psycopg2 live there).
"""

import atexit
import concurrent.futures
import functools
import os
import pwd
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import psycopg2

# The PostgreSQL under test: the one whose pg_config `make test
# PG_CONFIG=...` names (test/run.sh exports it), Debian's 15 by default.
# Every binary, pg_regress and the major's number come from it.
PG_CONFIG = os.environ.get('PG_CONFIG') or '/usr/lib/postgresql/15/bin/pg_config'


def _pg_config(flag):
    return subprocess.run([PG_CONFIG, flag], capture_output=True, text=True,
                          check=True).stdout.strip()


PG_BIN = _pg_config('--bindir')
PG_VERSION = _pg_config('--version')            # "PostgreSQL 17.6"
PG_MAJOR = int(re.match(r'PostgreSQL (\d+)', PG_VERSION).group(1))
PG_REGRESS = os.path.normpath(os.path.join(
    os.path.dirname(_pg_config('--pgxs')), '..', 'test', 'regress', 'pg_regress'))
# Extra environment of every postmaster started here, "NAME=VALUE ...":
# `make test SANITIZE=1` (test/sanitize.sh) preloads the ASan runtime.
PG_ENV = os.environ.get('ZKLOCK_PG_ENV', '').split()
ZK_CLASSPATH = '/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar'
PG_OS_USER = 'postgres'          # initdb refuses root: clusters run as this user


# ---------------------------------------------------------------------------
# small utilities
# ---------------------------------------------------------------------------

def log(msg):
    """Progress line on stderr (stdout carries the results)."""
    print('[harness %s] %s' % (time.strftime('%H:%M:%S'), msg),
          file=sys.stderr, flush=True)


def wait_until(pred, timeout, what='condition', interval=0.05):
    """Call pred() until it returns something truthy, which is returned.
    Raises TimeoutError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError('timed out after %.1fs waiting for %s'
                               % (timeout, what))
        time.sleep(interval)


# test/run_tests.py runs several pytest processes (lanes) side by side and
# gives each a port range of its own below the kernel's ephemeral range
# (32768-60999): ZKLOCK_PORT_RANGE=FIRST-LAST.  Ports are then handed out
# in turn from that range, so that no other lane's server (nor any
# outgoing connection, which takes an ephemeral port) can take a port
# between its pick here and the server's bind.  Without it: port 0, the
# kernel's pick, as a single run always did.
_port_range = None
_port_next = None
_port_lock = threading.Lock()


def _ranged_port():
    global _port_range, _port_next
    if _port_range is None:
        first, last = (int(x) for x in
                       os.environ['ZKLOCK_PORT_RANGE'].split('-'))
        _port_range = (first, last)
        _port_next = first
    first, last = _port_range
    for _ in range(last - first + 1):
        port = _port_next
        _port_next = first if port >= last else port + 1
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(('127.0.0.1', port))
            return port
        except OSError:
            continue                    # taken (or in TIME_WAIT): the next
        finally:
            s.close()
    raise RuntimeError('no free port left in ZKLOCK_PORT_RANGE=%s'
                       % os.environ['ZKLOCK_PORT_RANGE'])


def free_ports(count):
    """`count` distinct TCP ports that are free on 127.0.0.1 right now.
    All sockets are held open together, so the ports differ."""
    if os.environ.get('ZKLOCK_PORT_RANGE'):
        with _port_lock:
            return [_ranged_port() for _ in range(count)]
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(('127.0.0.1', 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port():
    return free_ports(1)[0]


def closed_port():
    """A port where nothing listens (connections are refused)."""
    return free_port()


def make_workdir(prefix='zklock-test-'):
    """A fresh directory under /tmp, traversable by the postgres user."""
    path = tempfile.mkdtemp(prefix=prefix)
    os.chmod(path, 0o755)
    return path


def running_as_root():
    return os.geteuid() == 0


def as_pg_user(cmd):
    """Prefix a command so that it runs as the postgres OS user when we
    are root (initdb and postgres refuse to run as root)."""
    if running_as_root():
        return ['runuser', '-u', PG_OS_USER, '--'] + list(cmd)
    return list(cmd)


def chown_to_pg_user(path):
    """Give `path` to the postgres OS user (no-op when not root)."""
    if running_as_root():
        pw = pwd.getpwnam(PG_OS_USER)
        os.chown(path, pw.pw_uid, pw.pw_gid)


def tail(path, lines=40):
    """The last `lines` lines of a text file ('' if it does not exist)."""
    try:
        with open(path, 'r', errors='replace') as f:
            return ''.join(f.readlines()[-lines:])
    except OSError:
        return ''


def _all_threads_stopped(pid):
    """Every thread of process pid is in the stopped state (T)."""
    try:
        tids = os.listdir('/proc/%d/task' % pid)
    except FileNotFoundError:
        return False
    for tid in tids:
        try:
            with open('/proc/%d/task/%s/stat' % (pid, tid)) as f:
                # "pid (comm) S ...": the state follows the last ')'
                state = f.read().rsplit(')', 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            continue                    # a thread that just exited
        if state not in ('T', 't'):
            return False
    return True


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# ---------------------------------------------------------------------------
# registry of started things: stopped at exit, even on failure or Ctrl-C
# ---------------------------------------------------------------------------

_live = []
_live_lock = threading.Lock()


def _register(obj):
    with _live_lock:
        if obj not in _live:
            _live.append(obj)


def _unregister(obj):
    with _live_lock:
        if obj in _live:
            _live.remove(obj)


def stop_all():
    """Stop everything still running, newest first (PostgreSQL before the
    ZooKeeper it talks to).  Never raises."""
    while True:
        with _live_lock:
            if not _live:
                return
            obj = _live.pop()
        try:
            obj.stop()
        except BaseException as e:          # keep stopping the others
            log('error while stopping %r: %s' % (obj, e))


atexit.register(stop_all)


def install_signal_handlers():
    """Turn SIGTERM and SIGHUP into SystemExit, so that `finally` blocks
    and atexit run (SIGINT already raises KeyboardInterrupt)."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


# ---------------------------------------------------------------------------
# ZooKeeper
# ---------------------------------------------------------------------------

class ZooKeeper:
    """A throwaway ZooKeeper ensemble of n servers on 127.0.0.1.

    n == 1 runs standalone; n > 1 writes server.N lines and myid files.
    Servers are addressed by their id `sid`, 1..n (the N of server.N and
    of myid).  tick_ms is small so that session timeouts down to
    2*tick_ms are allowed.

        zk = ZooKeeper(n=3); zk.start()
        zk.connect_string          # '127.0.0.1:p1,127.0.0.1:p2,...'
        zk.kill(2); zk.restart(2); zk.pause(1); zk.resume(1)
        zk.four_letter(1, 'wchp')
        zk.stop()

    dynamic=True: ZooKeeper's dynamic reconfiguration (reconfigEnabled,
    a dynamic file whose server lines carry the client addresses, so that
    /zookeeper/config advertises them).  Servers join and leave on new
    loopback ports:

        zk = ZooKeeper(n=3, dynamic=True); zk.start()
        sids = zk.add_servers(3)       # started, then `reconfig -add`
        zk.remove_servers([1, 2, 3])   # `reconfig -remove`; still running
        zk.stop_server(1)              # ... until stopped
        zk.members                     # the ensemble's sids now

    The servers run with -Dzookeeper.skipACL=yes so that the test may
    reconfigure without the super digest: these are the test's own
    servers, on loopback only.

    A static ensemble (dynamic=False, n > 1) changes its membership by
    restarts, one server at a time, each with a zoo.cfg naming the new
    members (the rolling replacement of reconfigEnabled=false):

        sid = zk.new_server()          # a new sid, ports (and address)
        zk.run_with_members(sid, {2, 3, sid})   # (re)started with them
        zk.static_members[2]           # the membership server 2 runs with

    distinct_hosts=True: server sid listens on 127.0.0.(10 + sid) instead
    of 127.0.0.1 (still loopback).  libzookeeper tells servers apart by
    address only, not by port (addrvec_contains, 3.8.0), so a client moved
    between servers of one address would not move: tests of
    zoo_set_servers need an address per server, as real servers have.
    """

    # the server's jars (a subclass may need more: test/lib/tunnels.py)
    classpath = ZK_CLASSPATH

    def __init__(self, n=1, base_dir=None, tick_ms=500, min_session_ms=None,
                 max_session_ms=60000, container_check_ms=None,
                 jvm_opts=None, name='zk', force_sync=False, dynamic=False,
                 distinct_hosts=False):
        assert n >= 1
        assert not dynamic or n >= 2, 'a dynamic ensemble has 2+ servers'
        self.n = n
        self.dynamic = dynamic
        self.distinct_hosts = distinct_hosts
        self._sids = list(range(1, n + 1))
        self.members = set(self._sids)     # in the ensemble's config
        self.name = name
        self.tick_ms = tick_ms
        self.min_session_ms = min_session_ms or 2 * tick_ms
        self.max_session_ms = max_session_ms
        self.container_check_ms = container_check_ms
        self.force_sync = force_sync     # fsync the transaction log
        self.jvm_opts = list(jvm_opts or [])
        if dynamic:
            self.jvm_opts.append('-Dzookeeper.skipACL=yes')
        self._own_base = base_dir is None
        self.base_dir = base_dir or make_workdir('zklock-zk-')
        self.dir = os.path.join(self.base_dir, name)
        ports = free_ports(3 * n)
        self.client_ports = {sid: ports[3 * (sid - 1)] for sid in self.sids}
        self.quorum_ports = {sid: ports[3 * (sid - 1) + 1] for sid in self.sids}
        self.election_ports = {sid: ports[3 * (sid - 1) + 2] for sid in self.sids}
        self.procs = {}             # sid -> Popen (running or stopped)
        # static ensemble: sid -> the sids its zoo.cfg names (default: all)
        self.static_members = {}
        self.paused = set()
        self._log_files = {}
        self._configured = False

    def __repr__(self):
        return '<ZooKeeper %s n=%d %s>' % (self.name, self.n,
                                          self.connect_string)

    # -- layout -----------------------------------------------------------

    @property
    def sids(self):
        """Every server ever configured (removed ones too)."""
        return list(self._sids)

    @property
    def connect_string(self):
        """The client addresses of the ensemble's members."""
        return ','.join(self.host_port(s)
                        for s in self.sids if s in self.members)

    def address(self, sid):
        """The loopback address server sid listens on."""
        if self.distinct_hosts:
            assert sid < 240
            return '127.0.0.%d' % (10 + sid)
        return '127.0.0.1'

    def host_port(self, sid):
        return '%s:%d' % (self.address(sid), self.client_ports[sid])

    def server_dir(self, sid):
        return os.path.join(self.dir, 'server%d' % sid)

    def log_path(self, sid):
        return os.path.join(self.server_dir(sid), 'zookeeper.log')

    def _server_line(self, sid):
        """A dynamic file's line: quorum and election ports, role, and
        the client address that /zookeeper/config then advertises."""
        return 'server.%d=%s:%d:%d:participant;%s' % (
            sid, self.address(sid), self.quorum_ports[sid],
            self.election_ports[sid], self.host_port(sid))

    def _configure(self, sids=None):
        """Write zoo.cfg (and myid) for every server (or those given)."""
        for sid in (self.sids if sids is None else sids):
            d = self.server_dir(sid)
            data = os.path.join(d, 'data')
            os.makedirs(data, exist_ok=True)
            cfg = [
                'tickTime=%d' % self.tick_ms,
                'initLimit=20',
                'syncLimit=10',
                'dataDir=%s' % data,
                'maxClientCnxns=0',
                'minSessionTimeout=%d' % self.min_session_ms,
                'maxSessionTimeout=%d' % self.max_session_ms,
                'admin.enableServer=false',
                '4lw.commands.whitelist=*',
                # throwaway data: skip fsync, unless a test measures
                # what a production server does
                'forceSync=%s' % ('yes' if self.force_sync else 'no'),
                'preAllocSize=1024',     # small transaction-log files
            ]
            if self.dynamic:
                # the members, and a server joining: itself (it syncs as
                # a non-voting follower until `reconfig -add`)
                dyn = os.path.join(d, 'zoo.cfg.dynamic')
                with open(dyn, 'w') as f:
                    f.write(''.join(self._server_line(o) + '\n'
                                    for o in self.sids
                                    if o in self.members or o == sid))
                cfg += ['reconfigEnabled=true', 'standaloneEnabled=false',
                        'dynamicConfigFile=%s' % dyn]
                with open(os.path.join(data, 'myid'), 'w') as f:
                    f.write('%d\n' % sid)
            else:
                cfg[4:4] = ['clientPort=%d' % self.client_ports[sid],
                            'clientPortAddress=%s' % self.address(sid)]
            if self.n > 1 and not self.dynamic:
                for other in sorted(self.static_members.get(sid, self.sids)):
                    cfg.append('server.%d=%s:%d:%d' % (
                        other, self.address(other), self.quorum_ports[other],
                        self.election_ports[other]))
                with open(os.path.join(data, 'myid'), 'w') as f:
                    f.write('%d\n' % sid)
            with open(os.path.join(d, 'zoo.cfg'), 'w') as f:
                f.write('\n'.join(cfg) + '\n')
        self._configured = True

    # -- processes --------------------------------------------------------

    def _exec_prefix(self, sid):
        """What runs the server's java command (a subclass may put it in a
        network namespace)."""
        return []

    def _spawn(self, sid):
        cmd = self._exec_prefix(sid) + [
            'java', '-Xms32m', '-Xmx256m', '-XX:+UseSerialGC',
            '-XX:TieredStopAtLevel=1', '-Djava.net.preferIPv4Stack=true',
            '-Dzookeeper.admin.enableServer=false',
            '-Dorg.slf4j.simpleLogger.showDateTime=true',
            '-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS']
        if self.container_check_ms is not None:
            cmd.append('-Dznode.container.checkIntervalMs=%d'
                       % self.container_check_ms)
        cmd += self.jvm_opts
        cmd += ['-cp', self.classpath,
                'org.apache.zookeeper.server.quorum.QuorumPeerMain',
                os.path.join(self.server_dir(sid), 'zoo.cfg')]
        old = self._log_files.pop(sid, None)
        if old:
            old.close()
        logf = open(self.log_path(sid), 'ab')
        self._log_files[sid] = logf
        # Own session: a Ctrl-C on the terminal reaches only the runner,
        # which then stops the server itself.
        self.procs[sid] = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=logf,
            stderr=subprocess.STDOUT, cwd=self.server_dir(sid),
            start_new_session=True)
        self.paused.discard(sid)

    def is_running(self, sid):
        p = self.procs.get(sid)
        return p is not None and p.poll() is None

    def pid(self, sid):
        p = self.procs.get(sid)
        return p.pid if p is not None else None

    def start(self, timeout=60):
        """Start every server and wait until each one serves clients
        (standalone, or an elected leader with its followers)."""
        if not self._configured:
            self._configure()
        _register(self)
        for sid in self.sids:
            if not self.is_running(sid):
                self._spawn(sid)
        log('starting ZooKeeper %s (%s)' % (self.name, self.connect_string))
        self.wait_serving(timeout=timeout)
        return self

    def wait_serving(self, sids=None, timeout=60):
        """Wait until the given servers (default: every running, not
        paused server) answer `srvr` with a Mode line."""
        sids = sids or [s for s in self.sids
                        if self.is_running(s) and s not in self.paused]

        def ready():
            for sid in sids:
                if not self.is_running(sid):
                    raise RuntimeError(
                        'ZooKeeper server %d exited (status %s); log tail:\n%s'
                        % (sid, self.procs[sid].returncode,
                           tail(self.log_path(sid))))
                if self.mode(sid) is None:
                    return False
            return True
        wait_until(ready, timeout, 'ZooKeeper servers %s to serve' % sids,
                   interval=0.2)

    def mode(self, sid):
        """'standalone', 'leader', 'follower', ... or None when the server
        does not serve (down, paused, or no quorum)."""
        try:
            out = self.four_letter(sid, 'srvr', timeout=1.0)
        except OSError:
            return None
        m = re.search(r'^Mode:\s*(\S+)', out, re.M)
        return m.group(1) if m else None

    def leader(self):
        """sid of the current leader (or of the standalone server)."""
        for sid in self.sids:
            if sid in self.members and \
                    self.mode(sid) in ('leader', 'standalone'):
                return sid
        return None

    # -- dynamic reconfiguration (dynamic=True) -----------------------------

    def _reconfig(self, timeout=60, **kw):
        """kazoo's reconfig on a member, retried while an election
        (the one a removed leader causes) refuses it; returns the new
        config's text."""
        from kazoo.exceptions import KazooException
        client = connect_kazoo(self.connect_string, timeout=timeout)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    data, _ = client.reconfig(
                        joining=kw.get('joining'), leaving=kw.get('leaving'),
                        new_members=None)
                    return data.decode()
                except KazooException as e:
                    if time.monotonic() >= deadline:
                        raise RuntimeError('reconfig %r failed: %r'
                                           % (kw, e)) from None
                    time.sleep(0.2)
        finally:
            client.stop()
            client.close()

    def add_servers(self, count, timeout=60):
        """Start `count` new servers on new loopback ports (their dynamic
        file: the members and themselves), wait until each syncs as a
        follower, then add them with one `reconfig -add`.  Returns their
        sids."""
        assert self.dynamic
        new = [self.new_server() for _ in range(count)]
        self._configure(new)
        for sid in new:
            self._spawn(sid)
        wait_until(lambda: all(self.mode(s) == 'follower' for s in new),
                   timeout, 'new ZooKeeper servers %s to follow' % new,
                   interval=0.2)
        text = self._reconfig(
            joining=','.join(self._server_line(s) for s in new),
            timeout=timeout)
        self.members |= set(new)
        log('ZooKeeper %s: added %s; config now:\n%s' % (self.name, new,
                                                         text))
        return new

    def new_server(self):
        """A new sid with ports of its own (and, with distinct_hosts, an
        address of its own); neither configured nor started."""
        sid = max(self._sids) + 1
        c, q, e = free_ports(3)
        self.client_ports[sid] = c
        self.quorum_ports[sid] = q
        self.election_ports[sid] = e
        self._sids.append(sid)
        self.n = len(self._sids)
        return sid

    # -- static membership changes (dynamic=False) --------------------------

    def run_with_members(self, sid, members, timeout=60):
        """Static ensemble: stop server sid if it runs, rewrite its zoo.cfg
        with `members` as the ensemble, start it, and wait until it serves
        and the leader counts every running server of the leader's own
        membership as synced (a server still running an older membership
        cannot sync with a leader of the new one, and the reverse: those
        are left out of the count).  Returns the seconds taken."""
        assert not self.dynamic and self.n > 1
        assert sid in members
        t0 = time.monotonic()
        self.static_members[sid] = frozenset(members)
        self._configure([sid])
        self._terminate(sid)
        self._spawn(sid)
        _register(self)

        def served():
            if not self.is_running(sid):
                raise RuntimeError(
                    'ZooKeeper server %d exited (status %s); log tail:\n%s'
                    % (sid, self.procs[sid].returncode,
                       tail(self.log_path(sid))))
            return self.mode(sid) in ('leader', 'follower')
        wait_until(served, timeout, 'ZooKeeper server %d to serve with '
                   'members %s' % (sid, sorted(members)), interval=0.1)

        def synced():
            leader = next((s for s in self.sids if self.is_running(s) and
                           self.mode(s) == 'leader'), None)
            if leader is None:
                return False
            mine = self.static_members.get(leader, frozenset(self._sids))
            want = len([s for s in self.sids if s != leader and
                        self.is_running(s) and
                        self.static_members.get(s, frozenset(self._sids))
                        == mine])
            count = self.synced_followers(leader)
            return count is not None and count >= want
        wait_until(synced, timeout, 'the leader to count the servers of '
                   'its membership synced (after server %d)' % sid,
                   interval=0.1)
        return time.monotonic() - t0

    def remove_servers(self, sids, timeout=60):
        """`reconfig -remove` the servers (they keep running, and
        serving as non-voting followers, until stopped); wait until a
        leader among the members serves."""
        assert self.dynamic
        text = self._reconfig(leaving=','.join(str(s) for s in sids),
                              timeout=timeout)
        self.members -= set(sids)
        wait_until(self.leader, timeout, 'a leader among the members',
                   interval=0.1)
        log('ZooKeeper %s: removed %s; config now:\n%s'
            % (self.name, list(sids), text))
        return text

    def _terminate(self, sid, timeout=15):
        """Stop one server by its pid: SIGTERM, then SIGKILL after
        `timeout` seconds."""
        p = self.procs.get(sid)
        if p is None or p.poll() is not None:
            return
        if sid in self.paused:
            p.send_signal(signal.SIGCONT)   # a stopped JVM ignores SIGTERM
            self.paused.discard(sid)
        p.terminate()
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)

    def stop(self):
        """Stop every server (bounded) and close the log files."""
        for sid in self.sids:
            self._terminate(sid)
        for f in self._log_files.values():
            f.close()
        self._log_files.clear()
        _unregister(self)

    def kill(self, sid):
        """SIGKILL one server (a crash)."""
        p = self.procs.get(sid)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(10)
        self.paused.discard(sid)

    def pause(self, sid):
        """SIGSTOP one server (a freeze: connections stay open, nothing
        answers), and wait until every thread of its JVM has stopped: the
        stop takes effect as each thread is next scheduled, and a request
        sent meanwhile was seen answered (test_faults, on a loaded 2-core
        machine running four lanes)."""
        p = self.procs[sid]
        p.send_signal(signal.SIGSTOP)
        self.paused.add(sid)
        wait_until(lambda: _all_threads_stopped(p.pid), 10,
                   'every thread of ZooKeeper server %d stopped' % sid,
                   interval=0.005)

    def resume(self, sid):
        """SIGCONT a paused server."""
        self.procs[sid].send_signal(signal.SIGCONT)
        self.paused.discard(sid)

    def restart(self, sid, timeout=60):
        """Stop (if running) and start one server, waiting until the
        ensemble serves again."""
        self._terminate(sid)
        self._spawn(sid)
        self.wait_serving(timeout=timeout)

    def stop_server(self, sid, timeout=15):
        """Stop one server cleanly (SIGTERM, SIGKILL after `timeout` s)."""
        self._terminate(sid, timeout=timeout)

    def start_servers(self, sids=None, timeout=60):
        """Start the given servers (default: every server that is not
        running), resume paused ones, and wait until every server
        serves.  Brings an ensemble back to full strength after a fault."""
        sids = self.sids if sids is None else list(sids)
        for sid in sids:
            if sid in self.paused and self.is_running(sid):
                self.resume(sid)
            elif not self.is_running(sid):
                self._spawn(sid)
        deadline = time.monotonic() + timeout
        self.wait_serving(timeout=timeout)
        self.wait_synced(timeout=max(1.0, deadline - time.monotonic()))

    def wait_synced(self, timeout=60):
        """With n > 1: wait until the leader counts every other running
        server as a synced follower (`mntr` zk_synced_followers).  A
        server answers `srvr` as a follower before its sync with the
        leader is complete; killing the leader in that window can wedge
        ZooKeeper 3.8 for a while (its SyncThread dies and it acks with
        an old epoch), so a test that breaks the ensemble again waits
        for this first."""
        if self.n == 1:
            return
        want = len([s for s in self.sids if self.is_running(s)
                    and s not in self.paused]) - 1

        def synced():
            leader = self.leader()
            if leader is None:
                return False
            count = self.synced_followers(leader)
            return count is not None and count >= want
        wait_until(synced, timeout, 'the leader to count %d synced '
                   'follower(s)' % want, interval=0.1)

    def synced_followers(self, leader):
        """The followers server `leader` counts as synced (`mntr`
        zk_synced_followers), or None when it does not answer so."""
        try:
            out = self.four_letter(leader, 'mntr', timeout=2.0)
        except OSError:
            return None
        m = re.search(r'^zk_synced_followers\s+(\d+)', out, re.M)
        return int(m.group(1)) if m else None

    def sid_of(self, host_port):
        """The sid of the server listening at 'host:port' (as zk_status()
        reports it), or None."""
        try:
            port = int(str(host_port).rsplit(':', 1)[1])
        except (IndexError, ValueError):
            return None
        for sid, p in self.client_ports.items():
            if p == port:
                return sid
        return None

    # -- four letter words ------------------------------------------------

    def _connect(self, sid, timeout):
        """A socket to one server's client port (a subclass may reach it
        from inside a network namespace)."""
        return socket.create_connection((self.address(sid),
                                         self.client_ports[sid]),
                                        timeout=timeout)

    def four_letter(self, sid, word, timeout=5.0):
        """Send a four letter word (e.g. 'srvr', 'wchp', 'cons') to one
        server and return its whole answer as text."""
        with self._connect(sid, timeout) as s:
            s.sendall(word.encode('ascii'))
            chunks = []
            deadline = time.monotonic() + timeout
            while True:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        return b''.join(chunks).decode('utf-8', 'replace')

    def _serving_sids(self, sid=None):
        if sid:
            return [sid]
        return [s for s in self.sids
                if self.is_running(s) and s not in self.paused]

    def watches_by_path(self, sid=None):
        """Parse `wchp`: {path: set of session ids (int)}.

        Beware: ZooKeeper lists only *data* watches here (exists, getData);
        getChildren watches are missing, see watch_counts().  With several
        servers, a session's watches live on the server it is connected
        to: sid=None merges every running server's answer."""
        result = {}
        for s in self._serving_sids(sid):
            path = None
            for line in self.four_letter(s, 'wchp').splitlines():
                if not line.strip():
                    continue
                if line[0] in ' \t':
                    if path is not None:
                        result.setdefault(path, set()).add(
                            int(line.strip(), 16))
                else:
                    path = line.strip()
                    result.setdefault(path, set())
        return result

    def watch_counts(self, sid=None):
        """{'data': n, 'child': m}: how many (path, session) watches the
        server(s) hold.  `mntr`'s zk_watch_count counts data and child
        watches, `wchs` only data watches; the difference is the number of
        getChildren watches, which no other four letter word shows.  The
        two answers are separate requests: poll when watches change."""
        total = data = 0
        for s in self._serving_sids(sid):
            m = re.search(r'^zk_watch_count\s+(\d+)',
                          self.four_letter(s, 'mntr'), re.M)
            w = re.search(r'^Total watches:\s*(\d+)',
                          self.four_letter(s, 'wchs'), re.M)
            if not m or not w:
                raise RuntimeError('server %d: no watch counts in mntr/wchs'
                                   % s)
            total += int(m.group(1))
            data += int(w.group(1))
        return {'data': data, 'child': total - data}

    def requests_by_session(self, sid=None):
        """{session id (int): packets the server has received on that
        session's connection} from `cons`: a session's own requests
        (pings included), not those of other clients or of four letter
        words.  A session reconnected to another server starts again
        from 0 there; sid=None merges every serving server's answer."""
        counts = {}
        for s in self._serving_sids(sid):
            text = self.four_letter(s, 'cons')
            for m in re.finditer(r'\(([^()]*)\)', text):
                kv = dict(item.split('=', 1) for item in m.group(1).split(',')
                          if '=' in item)
                if 'sid' in kv and 'recved' in kv:
                    counts[int(kv['sid'], 16)] = int(kv['recved'])
        return counts

    def ephemerals(self, sid=None):
        """{path: owner session id (int)} of every ephemeral node, from
        `dump` (answered by a standalone server or the leader: sid=None
        asks the current leader)."""
        sid = sid or self.leader()
        if sid is None:
            raise RuntimeError('no leader to ask for dump')
        result = {}
        session = None
        for line in self.four_letter(sid, 'dump', timeout=30).splitlines():
            text = line.strip()
            m = re.fullmatch(r'0x([0-9a-fA-F]+):?', text)
            if m:
                session = int(m.group(1), 16)
            elif text.startswith('/') and session is not None:
                result[text] = session
        return result


# ---------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------

def _conf_value(value):
    """Render a value for postgresql.conf."""
    if isinstance(value, bool):
        return 'on' if value else 'off'
    if isinstance(value, (int, float)):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


class PgCluster:
    """A throwaway PostgreSQL cluster (of the major under test) run by the postgres OS user.

        pg = PgCluster('a', {'zklock.hosts': zk.connect_string}); pg.start()
        conn = pg.connect()                    # psycopg2, autocommit
        pg.psql('CREATE DATABASE x')
        pg.stop()

    Listens on 127.0.0.1:<free port>, unix socket in its own directory,
    trust authentication, server log in pg.log_path.
    """

    def __init__(self, name='main', extra_conf=None, base_dir=None,
                 port=None, bin_dir=None, initdb_args=()):
        self.name = name
        # another major's binaries (a pg_upgrade test); PG_BIN by default
        self.bin = bin_dir or PG_BIN
        self.initdb_args = list(initdb_args)
        self.extra_conf = dict(extra_conf or {})
        self._own_base = base_dir is None
        self.base_dir = base_dir or make_workdir('zklock-pg-')
        self.dir = os.path.join(self.base_dir, 'pg-' + name)
        self.data_dir = os.path.join(self.dir, 'data')
        self.socket_dir = self.dir
        self.log_path = os.path.join(self.dir, 'postgresql.log')
        self.port = port or free_port()
        self.host = '127.0.0.1'

    def __repr__(self):
        return '<PgCluster %s port=%d>' % (self.name, self.port)

    def _run(self, cmd, timeout, check=True):
        """Run a command as the postgres OS user, bounded; returns the
        CompletedProcess (stdout and stderr as text)."""
        r = subprocess.run(as_pg_user(cmd), cwd=self.dir, timeout=timeout,
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True)
        if check and r.returncode != 0:
            raise RuntimeError('%s failed (status %d):\n%s%s' % (
                ' '.join(cmd), r.returncode, r.stdout, r.stderr))
        return r

    @property
    def initialized(self):
        return os.path.exists(os.path.join(self.data_dir, 'PG_VERSION'))

    def init(self, timeout=120):
        """initdb (trust, no fsync, C locale) and write the configuration."""
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)
        chown_to_pg_user(self.dir)
        self._run([self.bin + '/initdb', '-D', self.data_dir, '-A', 'trust',
                   '-U', 'postgres', '--no-sync', '-E', 'UTF8',
                   '--locale=C'] + self.initdb_args, timeout=timeout)
        conf = {
            'listen_addresses': '127.0.0.1',
            'port': self.port,
            'unix_socket_directories': self.socket_dir,
            'max_connections': 300,
            'shared_buffers': '32MB',
            'fsync': False,
            'synchronous_commit': False,
            'full_page_writes': False,
            'log_line_prefix': '%m [%p] %q%a ',
            'log_min_messages': 'warning',
            'log_min_error_statement': 'error',
            # a backend whose client vanished while it waits for a lock
            # notices within a second and exits (test hygiene)
            'client_connection_check_interval': '1s',
        }
        conf.update(self.extra_conf)
        self._write_conf('harness.conf', conf)
        with open(os.path.join(self.data_dir, 'postgresql.conf'), 'a') as f:
            f.write("\ninclude = 'harness.conf'\n")

    def init_standby(self, primary, timeout=120):
        """Make this (not yet initialised) cluster a streaming hot standby
        of `primary`: pg_basebackup -R from it (trust replication on
        127.0.0.1 is in initdb's default pg_hba.conf), then this
        cluster's own port, socket directory and log.  start() as usual;
        it waits until the standby accepts read-only connections."""
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)
        chown_to_pg_user(self.dir)
        self._run([self.bin + '/pg_basebackup', '-h', primary.host,
                   '-p', str(primary.port), '-U', 'postgres',
                   '-D', self.data_dir, '-R', '-X', 'stream', '--no-sync',
                   '-c', 'fast'], timeout=timeout)
        conf = dict(primary.extra_conf)
        conf.update({
            'listen_addresses': '127.0.0.1',
            'port': self.port,
            'unix_socket_directories': self.socket_dir,
            'hot_standby': True,
        })
        conf.update(self.extra_conf)
        # harness.conf (copied from the primary) is included last, so the
        # primary's port and socket directory are overridden here
        path = os.path.join(self.data_dir, 'harness.conf')
        with open(path, 'a') as f:
            f.write('# standby of %s\n' % primary.name)
            for k, v in conf.items():
                f.write('%s = %s\n' % (k, _conf_value(v)))
        self.extra_conf = conf

    def _write_conf(self, filename, settings):
        path = os.path.join(self.data_dir, filename)
        with open(path, 'w') as f:
            f.write('# written by test/lib/harness.py\n')
            for k, v in settings.items():
                f.write('%s = %s\n' % (k, _conf_value(v)))
        chown_to_pg_user(path)

    def set_conf(self, settings, reload=True):
        """Add or change settings (in harness.conf) and reload."""
        self.extra_conf.update(settings)
        path = os.path.join(self.data_dir, 'harness.conf')
        with open(path, 'a') as f:
            for k, v in settings.items():
                f.write('%s = %s\n' % (k, _conf_value(v)))
        if reload and self.is_running():
            self._run([self.bin + '/pg_ctl', '-D', self.data_dir, 'reload'],
                      timeout=30)

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data_dir, 'postmaster.pid')) as f:
                return int(f.readline().strip())
        except (OSError, ValueError):
            return None

    def is_running(self):
        pid = self.postmaster_pid()
        return pid is not None and pid_alive(pid)

    def start(self, timeout=60):
        """initdb if needed, then pg_ctl start (waits until it accepts
        connections)."""
        if not self.initialized:
            self.init()
        _register(self)
        log('starting PostgreSQL %s on 127.0.0.1:%d (data %s)'
            % (self.name, self.port, self.data_dir))
        try:
            self._run((['env'] + PG_ENV if PG_ENV else []) +
                      [self.bin + '/pg_ctl', '-D', self.data_dir,
                       '-l', self.log_path, '-w', '-t', str(timeout),
                       'start'], timeout=timeout + 10)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            raise RuntimeError('%s\nserver log tail:\n%s'
                               % (e, tail(self.log_path)))
        return self

    def stop(self, mode='fast', timeout=60):
        """pg_ctl stop -m fast (bounded); falls back to -m immediate and,
        at last, SIGKILL of the postmaster by its pid."""
        try:
            if self.is_running():
                try:
                    self._run([self.bin + '/pg_ctl', '-D', self.data_dir,
                               '-m', mode, '-w', '-t', str(timeout), 'stop'],
                              timeout=timeout + 10)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    log('pg_ctl stop -m %s failed (%s); trying immediate'
                        % (mode, e))
                    try:
                        self._run([self.bin + '/pg_ctl', '-D', self.data_dir,
                                   '-m', 'immediate', '-w', '-t', '20',
                                   'stop'], timeout=30)
                    except (RuntimeError, subprocess.TimeoutExpired):
                        pid = self.postmaster_pid()
                        if pid and pid_alive(pid):
                            os.kill(pid, signal.SIGKILL)
        finally:
            _unregister(self)

    def restart(self, timeout=60):
        self.stop()
        self.start(timeout=timeout)

    def dsn(self, dbname='postgres', user='postgres'):
        return 'host=%s port=%d dbname=%s user=%s' % (self.host, self.port,
                                                     dbname, user)

    def connect(self, dbname='postgres', user='postgres', autocommit=True,
                **kw):
        """A psycopg2 connection (autocommit unless told otherwise)."""
        kw.setdefault('connect_timeout', 10)
        conn = psycopg2.connect(host=self.host, port=self.port,
                                dbname=dbname, user=user, **kw)
        conn.autocommit = autocommit
        return conn

    def psql(self, sql, dbname='postgres', user='postgres', timeout=60,
             check=True):
        """Run SQL with psql (-X -q -At, stop at the first error); returns
        stdout.  Raises RuntimeError with psql's messages on failure."""
        cmd = [self.bin + '/psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1',
               '-h', self.host, '-p', str(self.port), '-U', user,
               '-d', dbname, '-c', sql]
        r = subprocess.run(cmd, timeout=timeout, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError('psql failed (status %d): %s%s'
                               % (r.returncode, r.stdout, r.stderr))
        return r.stdout

    def log_tail(self, lines=40):
        return tail(self.log_path, lines)

    def log_size(self):
        """Current size of the server log; pass it to log_since() later."""
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def log_since(self, offset):
        """Server log text written after `offset` (from log_size())."""
        try:
            with open(self.log_path, 'r', errors='replace') as f:
                f.seek(offset)
                return f.read()
        except OSError:
            return ''


# ---------------------------------------------------------------------------
# a backend driven from its own thread
# ---------------------------------------------------------------------------

class PidNsPgCluster(PgCluster):
    """A PgCluster whose postmaster runs in a PID namespace of its own
    (unshare --pid --fork --mount-proc; root only), as in a container:
    its processes get small pids counted from 1, so two such clusters
    have backends with equal pids.  That is what a primary and its
    streaming standby (init_standby) in containers look like to zklock:
    one system identifier, colliding pids.

    The postmaster is pid 1 of its namespace and postmaster.pid holds that
    pid, which means another process (init) outside: pg_ctl must never
    stop or signal it.  This class keeps unshare's process and stops the
    postmaster by its pid as the host sees it (unshare's only child)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._proc = None
        self._log = None

    def _host_pid(self):
        """The postmaster's pid outside its namespace, or None."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        p = self._proc.pid
        try:
            with open('/proc/%d/task/%d/children' % (p, p)) as f:
                kids = f.read().split()
        except OSError:
            return None
        return int(kids[0]) if kids else None

    def postmaster_pid(self):
        return self._host_pid()

    def is_running(self):
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout=60):
        """Start the postmaster in a new PID namespace (in the foreground
        of unshare's child, which it is) and wait until it accepts
        connections (a standby: read-only ones)."""
        if not running_as_root():
            raise RuntimeError('a PID namespace needs root')
        if not self.initialized:
            self.init()
        pw = pwd.getpwnam(PG_OS_USER)
        _register(self)
        log('starting PostgreSQL %s in its own PID namespace on '
            '127.0.0.1:%d (data %s)' % (self.name, self.port, self.data_dir))
        self._log = open(self.log_path, 'ab')
        self._proc = subprocess.Popen(
            ['unshare', '--pid', '--fork', '--mount-proc',
             'setpriv', '--reuid=%d' % pw.pw_uid, '--regid=%d' % pw.pw_gid,
             '--init-groups', '--'] +
            (['env'] + PG_ENV if PG_ENV else []) +
            [self.bin + '/postgres', '-D', self.data_dir],
            cwd=self.dir, stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT)

        def ready():
            if self._proc.poll() is not None:
                raise RuntimeError('postmaster of %s exited (status %s):\n%s'
                                   % (self.name, self._proc.returncode,
                                      tail(self.log_path)))
            try:
                self.connect(connect_timeout=2).close()
                return True
            except psycopg2.OperationalError:
                return False
        wait_until(ready, timeout, 'PostgreSQL %s accepts connections'
                   % self.name, interval=0.1)
        return self

    def stop(self, mode='fast', timeout=60):
        """SIGINT (fast shutdown) to the postmaster by its host pid; SIGKILL
        if it has not ended in time (the kernel then kills its whole
        namespace).  Never pg_ctl (see the class comment)."""
        sig = {'smart': signal.SIGTERM, 'fast': signal.SIGINT,
               'immediate': signal.SIGQUIT}[mode]
        try:
            pid = self._host_pid()
            if pid is not None:
                os.kill(pid, sig)
            if self._proc is not None:
                try:
                    self._proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    pid = self._host_pid()
                    if pid is not None:
                        os.kill(pid, signal.SIGKILL)
                    self._proc.wait(20)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None
            _unregister(self)


class Backend:
    """One PostgreSQL backend (one psycopg2 connection, autocommit) whose
    statements run on a dedicated daemon thread, so that a test can start
    a blocking statement (a lock wait) and watch it from outside.

        b = Backend(pg, 'waiter', dbname='zklock_test')
        fut = b.submit("SELECT zk_lock_exclusive(%s)", ['r'])   # Future
        ...
        rows = fut.result(timeout=10)          # list of tuples, or None
        b.scalar("SELECT 1")                   # synchronous, bounded
        b.close()

    A failed statement's Future raises the psycopg2 error (see .pgcode).
    """

    def __init__(self, cluster, name='backend', dbname='postgres',
                 user='postgres', **kw):
        self.cluster = cluster
        self.name = name
        self.conn = cluster.connect(dbname=dbname, user=user,
                                    application_name=name, **kw)
        self.pid = self.conn.get_backend_pid()
        self._jobs = queue.Queue()
        self._busy = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._work, daemon=True,
                                        name='backend-%s' % name)
        self._thread.start()

    def __repr__(self):
        return '<Backend %s pid=%d>' % (self.name, self.pid)

    def _work(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fut, sql, args = job
            if not fut.set_running_or_notify_cancel():
                continue
            self._busy.set()
            try:
                with self.conn.cursor() as cur:
                    cur.execute(sql, args)
                    rows = cur.fetchall() if cur.description else None
                fut.set_result(rows)
            except BaseException as e:
                fut.set_exception(e)
            finally:
                self._busy.clear()

    def submit(self, sql, args=None):
        """Queue a statement; returns a concurrent.futures.Future of its
        rows (list of tuples, or None for statements without result)."""
        if self._closed:
            raise RuntimeError('backend %s is closed' % self.name)
        fut = concurrent.futures.Future()
        fut.started_at = time.monotonic()
        self._jobs.put((fut, sql, args))
        return fut

    def query(self, sql, args=None, timeout=30):
        """Run a statement and wait (bounded) for its rows."""
        return self.submit(sql, args).result(timeout)

    def scalar(self, sql, args=None, timeout=30):
        """Run a statement and return the first column of its first row."""
        rows = self.query(sql, args, timeout)
        return rows[0][0] if rows else None

    @property
    def busy(self):
        return self._busy.is_set()

    def cancel(self):
        """Cancel the running statement (like pg_cancel_backend)."""
        try:
            self.conn.cancel()
        except psycopg2.Error:
            pass

    def close(self, timeout=10):
        """Cancel whatever runs, stop the thread and close the connection.
        Bounded; never raises."""
        if self._closed:
            return
        self._closed = True
        if self.busy:
            self.cancel()
        self._jobs.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            # still stuck: have the server end this backend
            terminate_backend(self.cluster, self.pid)
            self._thread.join(timeout)
        try:
            self.conn.close()
        except Exception:
            pass


def stop_shared(sh, names):
    """Stop what a module set up in its shared namespace: the kazoo client
    sh.kz, then each object sh.<name> in the order given.  Every one is
    tried; returns the errors (a list of text)."""
    errors = []
    kz = getattr(sh, 'kz', None)
    if kz is not None:
        try:
            kz.stop()
            kz.close()
        except Exception as e:
            errors.append('kazoo: %s' % e)
    for name in names:
        obj = getattr(sh, name, None)
        if obj is None:
            continue
        try:
            obj.stop()
        except Exception as e:
            errors.append('%s: %s' % (name, e))
    return errors


def terminate_backend(cluster, pid, dbname='postgres'):
    """pg_terminate_backend(pid) from a fresh connection; never raises."""
    try:
        c = cluster.connect(dbname=dbname)
        try:
            with c.cursor() as cur:
                cur.execute('SELECT pg_terminate_backend(%s)', [pid])
        finally:
            c.close()
    except Exception as e:
        log('could not terminate backend %s: %s' % (pid, e))


# ---------------------------------------------------------------------------
# looking at ZooKeeper directly (kazoo)
# ---------------------------------------------------------------------------

# A contender child of a lock parent (SPEC section 1).  ZooKeeper's
# "%010d" gives ten digits, or '-' and nine or ten digits after the
# parent's counter wrapped past 2^31.
CONTENDER_RE = re.compile(
    r'^(.*)(lock-|__lock__|__rlock__|__WRIT__|__READ__)([0-9]{10}|-[0-9]{9,10})$')
EXCLUSIVE_MARKERS = ('lock-', '__lock__', '__WRIT__')


def parse_contender(name):
    """(mode, seq) for a contender name, mode 'exclusive' or 'shared' and
    seq the sequence number as an unsigned 32-bit serial; None if the
    name is not a contender."""
    m = CONTENDER_RE.match(name)
    if not m:
        return None
    mode = 'exclusive' if m.group(2) in EXCLUSIVE_MARKERS else 'shared'
    return mode, int(m.group(3)) & 0xFFFFFFFF


def serial_cmp(a, b):
    """RFC 1982 comparison of 32-bit serial numbers: -1, 0 or 1."""
    if a == b:
        return 0
    return -1 if 0 < ((b - a) & 0xFFFFFFFF) < 0x80000000 else 1


def encode_resource(resource):
    """The relative znode path of a resource name (SPEC section 2):
    bytes outside [A-Za-z0-9._-] percent-encoded per level, '.' and '..'
    levels encoded entirely."""
    levels = []
    for level in resource.encode('utf-8').split(b'/'):
        if level in (b'.', b'..'):
            levels.append(''.join('%%%02X' % c for c in level))
            continue
        out = []
        for c in level:
            ch = chr(c)
            if ch.isascii() and (ch.isalnum() or ch in '._-'):
                out.append(ch)
            else:
                out.append('%%%02X' % c)
        levels.append(''.join(out))
    return '/'.join(levels)


class Contender:
    """One contender node of a lock parent."""

    def __init__(self, parent, name, mode, seq, stat):
        self.parent = parent
        self.name = name
        self.path = parent.rstrip('/') + '/' + name
        self.mode = mode
        self.seq = seq
        self.stat = stat              # kazoo ZnodeStat (may be None)

    @property
    def session_id(self):
        return self.stat.ephemeralOwner if self.stat else None

    @property
    def czxid(self):
        return self.stat.czxid if self.stat else None

    def __repr__(self):
        return '<Contender %s %s seq=%d>' % (self.mode, self.name, self.seq)


class ZkInspector:
    """Reads the lock tree directly from ZooKeeper with a kazoo client
    (sets no watches), to check what the extension really did.

        kz = connect_kazoo(zk.connect_string)
        zi = ZkInspector(kz, '/zklock')
        zi.contenders('nightly')      # sorted queue of that lock
        zi.walk()                     # every path under the root
        zi.leftovers()                # contender/ephemeral nodes anywhere
    """

    def __init__(self, kz, root='/zklock'):
        self.kz = kz
        self.root = root.rstrip('/') or '/'

    def parent_path(self, resource):
        """The lock parent of a resource name."""
        return self.root.rstrip('/') + '/' + encode_resource(resource)

    def contenders(self, resource=None, parent=None, with_stat=True):
        """The contenders of a lock, ordered as the recipe orders them
        (serial sequence, then name).  Nodes that vanish while being read
        are skipped."""
        from kazoo.exceptions import NoNodeError
        parent = parent or self.parent_path(resource)
        try:
            names = self.kz.get_children(parent)
        except NoNodeError:
            return []
        result = []
        for name in names:
            parsed = parse_contender(name)
            if not parsed:
                continue
            stat = None
            if with_stat:
                stat = self.kz.exists(parent + '/' + name)
                if stat is None:
                    continue
            result.append(Contender(parent, name, parsed[0], parsed[1], stat))

        def order(a, b):
            return serial_cmp(a.seq, b.seq) or (a.name > b.name) - (a.name < b.name)
        result.sort(key=functools.cmp_to_key(order))
        return result

    def wait_contenders(self, resource, count, timeout=10, parent=None):
        """Wait until the lock has exactly `count` contenders; returns them."""
        last = []

        def check():
            nonlocal last
            last = self.contenders(resource, parent=parent)
            return len(last) == count
        try:
            wait_until(check, timeout,
                       '%d contender(s) of %s' % (count, resource or parent))
        except TimeoutError as e:
            raise AssertionError('%s; have %r' % (e, last)) from None
        return last

    def walk(self, path=None):
        """Every path under `path` (default: the root), parents first.
        Missing root -> []."""
        from kazoo.exceptions import NoNodeError
        path = path or self.root
        out = []
        stack = [path]
        while stack:
            p = stack.pop()
            try:
                children = self.kz.get_children(p)
            except NoNodeError:
                continue
            for c in sorted(children, reverse=True):
                child = p.rstrip('/') + '/' + c
                out.append(child)
                stack.append(child)
        return out

    def contender_paths(self, path='/', skip=('/zookeeper',), batch=2000):
        """Every contender-named node under `path` (not under `skip`),
        found by a level-by-level walk with pipelined (asynchronous)
        getChildren requests, so that a tree of tens of thousands of
        lingering lock parents is read in a second or two.  Sets no
        watch."""
        from kazoo.exceptions import NoNodeError
        found = []
        level = [path]
        while level:
            nxt = []
            for i in range(0, len(level), batch):
                chunk = level[i:i + batch]
                pending = [(p, self.kz.get_children_async(p)) for p in chunk]
                for p, res in pending:
                    try:
                        children = res.get(timeout=30)
                    except NoNodeError:
                        continue
                    for c in children:
                        child = p.rstrip('/') + '/' + c
                        if any(child == k or child.startswith(k + '/')
                               for k in skip):
                            continue
                        if parse_contender(c):
                            found.append(child)
                        nxt.append(child)
            level = nxt
        return found

    def leftovers(self, path=None):
        """Nodes under the root that must not outlive their owner: every
        contender-named node and every ephemeral node.  Lock parents
        (containers, possibly empty) are not leftovers."""
        bad = []
        for p in self.walk(path):
            name = p.rsplit('/', 1)[1]
            stat = self.kz.exists(p)
            if stat is None:
                continue
            if parse_contender(name) or stat.ephemeralOwner:
                bad.append((p, stat.ephemeralOwner))
        return bad

    def data(self, path):
        """A node's data as text, or None if it does not exist."""
        from kazoo.exceptions import NoNodeError
        try:
            value, _ = self.kz.get(path)
        except NoNodeError:
            return None
        return value.decode('utf-8', 'replace')


def connect_kazoo(connect_string, timeout=15):
    """A started kazoo client (read-only use by tests).  Stop it with
    kz.stop(); kz.close()."""
    from kazoo.client import KazooClient
    kz = KazooClient(hosts=connect_string, timeout=10)
    kz.start(timeout=timeout)
    return kz
