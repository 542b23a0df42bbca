"""
TLS between zklock and ZooKeeper for the tests (issue 41): the recipe of
doc/04-operations.md, "Encrypting the wire (TLS)", on 127.0.0.1.

Debian's libzookeeper (3.8.0) has no TLS, so zklock reaches a TLS-only
ensemble through a local tunnel: the servers listen only on their
`secureClientPort` (Netty, client certificates required, no plain
`clientPort`), and one stunnel client service per server on the database
host verifies the server's certificate and presents the host's own;
zklock.hosts names the tunnels' local ports.

  Certificates(dir).make()   a CA, one PKCS12 key store per server (SANs:
                             IP 127.0.0.1 and DNS zkN.test), the trust
                             store, the database host's client certificate
                             (PEM, for stunnel), and a second, unrelated CA
                             with a key store for server 1 (the "wrong
                             certificate" of test_tls)
  TlsZooKeeper(certs, n=3)   a harness.ZooKeeper whose client_ports are the
                             secure ports; four letter words go over TLS
  Tunnels(certs, targets, dir)  one stunnel process in the foreground
                             with a client service per server; start(),
                             reload(), kill(), stop()

Everything is registered with the harness, so stop_all() stops it at exit
whatever happens; a test stops what it started in `finally` as well.
Processes are stopped by their own pid only.
"""

import os
import re
import signal
import socket
import ssl
import subprocess

import harness

# The manifest of Debian's zookeeper.jar names some of the split Netty
# jars but not netty-codec, netty-resolver and
# netty-transport-native-unix-common, and netty-all.jar holds no classes
# of its own: NettyServerCnxnFactory needs them named
# (ClassNotFoundException: io.netty.handler.codec.ByteToMessageDecoder
# otherwise).
TLS_CLASSPATH = ':'.join('/usr/share/java/%s.jar' % j for j in (
    'zookeeper', 'zookeeper-jute', 'slf4j-api', 'slf4j-simple',
    'netty-buffer', 'netty-codec', 'netty-common', 'netty-handler',
    'netty-resolver', 'netty-transport', 'netty-transport-native-epoll',
    'netty-transport-native-unix-common'))

STORE_PASSWORD = 'zklock-test'      # throwaway stores of a throwaway CA
STUNNEL = '/usr/bin/stunnel4'


def server_name(sid):
    """The name in server sid's certificate (and stunnel's checkHost)."""
    return 'zk%d.test' % sid


def _run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise RuntimeError('%s failed (%d): %s' % (
            ' '.join(cmd[:3]), r.returncode, (r.stderr or r.stdout)[-2000:]))


class Certificates:
    """The certificates of one test run, made once into `dir` (about a
    second per key store: openssl, then keytool for the trust store)."""

    def __init__(self, base_dir, n=3):
        self.dir = os.path.join(base_dir, 'tls')
        self.n = n

    def path(self, name):
        return os.path.join(self.dir, name)

    @property
    def ca_pem(self):
        return self.path('ca.pem')

    @property
    def trust_store(self):
        return self.path('trust.p12')

    def key_store(self, sid, wrong_ca=False):
        return self.path('zk%d%s.p12' % (sid, '-other-ca' if wrong_ca else ''))

    @property
    def client_pem(self):
        return self.path('db.pem')

    @property
    def client_key(self):
        return self.path('db.key')

    def _ca(self, name, cn):
        _run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes',
              '-keyout', name + '.key', '-out', name + '.pem', '-days', '2',
              '-subj', '/CN=' + cn], self.dir)

    def _leaf(self, name, ca, cn, sans, usage):
        _run(['openssl', 'req', '-newkey', 'rsa:2048', '-nodes',
              '-keyout', name + '.key', '-out', name + '.csr',
              '-subj', '/CN=' + cn], self.dir)
        with open(self.path(name + '.ext'), 'w') as f:
            if sans:
                f.write('subjectAltName=%s\n' % sans)
            f.write('extendedKeyUsage=%s\n' % usage)
        _run(['openssl', 'x509', '-req', '-in', name + '.csr',
              '-CA', ca + '.pem', '-CAkey', ca + '.key', '-CAcreateserial',
              '-out', name + '.pem', '-days', '2',
              '-extfile', name + '.ext'], self.dir)

    def _p12(self, name, ca):
        _run(['openssl', 'pkcs12', '-export', '-in', name + '.pem',
              '-inkey', name + '.key', '-certfile', ca + '.pem',
              '-out', name + '.p12', '-name', 'zk',
              '-passout', 'pass:' + STORE_PASSWORD], self.dir)

    def make(self):
        if os.path.exists(self.trust_store):
            return self
        os.makedirs(self.dir, exist_ok=True)
        self._ca('ca', 'zklock test CA')
        self._ca('other-ca', 'another CA')
        for sid in range(1, self.n + 1):
            # servers connect to each other from 127.0.0.1 too (sslQuorum
            # checks the peer's address against these SANs)
            sans = 'IP:127.0.0.1,DNS:%s' % server_name(sid)
            usage = 'serverAuth,clientAuth'
            self._leaf('zk%d' % sid, 'ca', server_name(sid), sans, usage)
            self._p12('zk%d' % sid, 'ca')
        self._leaf('zk1-other-ca', 'other-ca', server_name(1),
                   'IP:127.0.0.1,DNS:%s' % server_name(1),
                   'serverAuth,clientAuth')
        self._p12('zk1-other-ca', 'other-ca')
        self._leaf('db', 'ca', 'db1.test', 'DNS:db1.test', 'clientAuth')
        _run(['keytool', '-importcert', '-noprompt', '-alias', 'ca',
              '-file', 'ca.pem', '-keystore', 'trust.p12',
              '-storetype', 'PKCS12', '-storepass', STORE_PASSWORD],
             self.dir)
        return self

    def probe_context(self):
        """The test's own TLS client, for four letter words: presents the
        client certificate and trusts both CAs, so that it also reaches
        the server with the other CA's certificate (the tunnel must not:
        that is what test_tls checks)."""
        c = ssl.create_default_context(cafile=self.ca_pem)
        c.load_verify_locations(self.path('other-ca.pem'))
        c.check_hostname = False        # several servers, one address
        c.load_cert_chain(self.client_pem, self.client_key)
        return c

    def kazoo_args(self):
        """KazooClient arguments for a direct TLS connection to the
        servers' secure ports (independent of the tunnels)."""
        return dict(use_ssl=True, ca=self.ca_pem, certfile=self.client_pem,
                    keyfile=self.client_key, verify_certs=True)


class TlsZooKeeper(harness.ZooKeeper):
    """A ZooKeeper ensemble that serves clients over TLS only.

    client_ports are the servers' secure client ports; no server has a
    plain client port.  key_stores maps a sid to another key store (the
    wrong-certificate test).  With ssl_quorum the servers also talk to
    each other over TLS."""

    classpath = TLS_CLASSPATH

    def __init__(self, certs, n=3, key_stores=None, ssl_quorum=True, **kw):
        super().__init__(n=n, **kw)
        self.certs = certs
        self.key_stores = dict(key_stores or {})
        self.ssl_quorum = ssl_quorum

    def _configure(self):
        super()._configure()
        for sid in self.sids:
            path = os.path.join(self.server_dir(sid), 'zoo.cfg')
            with open(path) as f:
                lines = f.read().splitlines()
            # the plain port becomes the secure one: nothing listens in clear
            lines = [re.sub(r'^clientPort(Address)?=', r'secureClientPort\1=', l)
                     for l in lines]
            store = self.key_stores.get(sid, self.certs.key_store(sid))
            lines += [
                'serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory',
                'ssl.keyStore.location=%s' % store,
                'ssl.keyStore.password=%s' % STORE_PASSWORD,
                'ssl.keyStore.type=PKCS12',
                'ssl.trustStore.location=%s' % self.certs.trust_store,
                'ssl.trustStore.password=%s' % STORE_PASSWORD,
                'ssl.trustStore.type=PKCS12',
            ]
            if self.ssl_quorum and self.n > 1:
                lines += [
                    'sslQuorum=true',
                    'ssl.quorum.keyStore.location=%s' % store,
                    'ssl.quorum.keyStore.password=%s' % STORE_PASSWORD,
                    'ssl.quorum.keyStore.type=PKCS12',
                    'ssl.quorum.trustStore.location=%s' % self.certs.trust_store,
                    'ssl.quorum.trustStore.password=%s' % STORE_PASSWORD,
                    'ssl.quorum.trustStore.type=PKCS12',
                ]
            with open(path, 'w') as f:
                f.write('\n'.join(lines) + '\n')

    def _connect(self, sid, timeout):
        """Four letter words over TLS (Netty answers them on the secure
        port), with the client certificate."""
        raw = socket.create_connection(('127.0.0.1', self.client_ports[sid]),
                                       timeout=timeout)
        try:
            return self.certs.probe_context().wrap_socket(raw)
        except BaseException:
            raw.close()
            raise

    def listening_ports(self, sid):
        """The TCP ports server sid's JVM listens on (from /proc)."""
        return _listening_ports(self.pid(sid))


def _listening_ports(pid):
    inodes = set()
    fd_dir = '/proc/%d/fd' % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        m = re.match(r'socket:\[(\d+)\]$', target)
        if m:
            inodes.add(m.group(1))
    ports = set()
    for table in ('/proc/net/tcp', '/proc/net/tcp6'):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            # local address, state 0A = LISTEN, inode
            if cols[3] == '0A' and cols[9] in inodes:
                ports.add(int(cols[1].rsplit(':', 1)[1], 16))
    return ports


class Tunnels:
    """One stunnel process with a client service per server: local port
    -> that server's secure port, verifying the chain to the CA and the
    server's name (checkHost), presenting the client certificate.

    The process runs in the foreground (the test owns it, not a service
    manager); its log is `log_path`."""

    def __init__(self, certs, targets, base_dir, name='tunnels', ca_file=None):
        """targets: {name: (secure port, the name the server's certificate
        must carry)}."""
        self.certs = certs
        self.targets = dict(targets)
        self.name = name
        self.dir = os.path.join(base_dir, name)
        self.ca_file = ca_file or certs.ca_pem
        ports = harness.free_ports(len(self.targets))
        self.ports = dict(zip(sorted(self.targets), ports))
        self.proc = None
        self._logf = None
        os.makedirs(self.dir, exist_ok=True)
        self.conf_path = os.path.join(self.dir, 'stunnel.conf')
        self.log_path = os.path.join(self.dir, 'stunnel.log')
        self._write_conf()

    def __repr__(self):
        return '<Tunnels %s %s>' % (self.name, self.hosts)

    @property
    def hosts(self):
        """zklock.hosts: the local ends."""
        return ','.join('127.0.0.1:%d' % self.ports[t]
                        for t in sorted(self.targets))

    def name_of(self, host_port):
        """The service whose local end is 'host:port' (as zk_status()
        and zk_sessions show the server), or None."""
        try:
            port = int(str(host_port).rsplit(':', 1)[1])
        except (IndexError, ValueError):
            return None
        for t, p in self.ports.items():
            if p == port:
                return t
        return None

    def _write_conf(self):
        lines = ['foreground = yes', 'pid =', 'syslog = no',
                 'debug = info']
        for t in sorted(self.targets):
            port, cert_name = self.targets[t]
            lines += [
                '', '[%s]' % t,
                'client = yes',
                'accept = 127.0.0.1:%d' % self.ports[t],
                'connect = 127.0.0.1:%d' % port,
                'CAfile = %s' % self.ca_file,
                'verifyChain = yes',
                'checkHost = %s' % cert_name,
                'cert = %s' % self.certs.client_pem,
                'key = %s' % self.certs.client_key,
            ]
        with open(self.conf_path, 'w') as f:
            f.write('\n'.join(lines) + '\n')

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout=15):
        """Start stunnel and wait until every local port accepts."""
        harness._register(self)
        if self._logf is None:
            self._logf = open(self.log_path, 'ab')
        self.proc = subprocess.Popen(
            [STUNNEL, self.conf_path], stdin=subprocess.DEVNULL,
            stdout=self._logf, stderr=subprocess.STDOUT, cwd=self.dir,
            start_new_session=True)

        def listening():
            if self.proc.poll() is not None:
                raise RuntimeError('stunnel exited (%s): %s' % (
                    self.proc.returncode, harness.tail(self.log_path)))
            return self.ports and set(self.ports.values()) <= \
                _listening_ports(self.proc.pid)
        harness.wait_until(listening, timeout, 'stunnel %s to listen'
                           % self.name, interval=0.02)
        return self

    def reload(self, ca_file=None, timeout=15):
        """SIGHUP: stunnel reads its configuration again (optionally with
        another CAfile) for new connections; open ones stay.  Waits until
        the log says the new configuration was loaded."""
        if ca_file is not None:
            self.ca_file = ca_file
            self._write_conf()
        done = self.log_text().count('Configuration successful')
        self.proc.send_signal(signal.SIGHUP)
        harness.wait_until(
            lambda: self.log_text().count('Configuration successful') > done,
            timeout, 'stunnel %s to reload' % self.name, interval=0.02)

    def kill(self):
        """SIGKILL (a crash of the tunnel: every connection through it
        ends at once)."""
        if self.running():
            self.proc.kill()
            self.proc.wait(10)

    def stop(self):
        if self.running():
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._logf is not None:
            self._logf.close()
            self._logf = None
        harness._unregister(self)

    def log_text(self):
        return harness.tail(self.log_path, 400)
