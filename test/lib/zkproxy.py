"""
A TCP proxy for ZooKeeper client connections, for tests.

Some failures cannot be produced with real servers on demand: a reply that
is lost after the server carried the request out, a request that arrives
just after another client changed the node it names, an error code that
only a server the session has left would send.  A test puts this proxy
between a client (a PostgreSQL backend running zklock) and one ZooKeeper
server and makes exactly that happen, at exactly the request it means:

    proxy = ZkProxy(zk.host_port(1)).start()
    b.query("SET zklock.hosts = %s", [proxy.address])
    proxy.hook = lambda req: ...        # sees every request first
    ...
    proxy.stop()

Every connection accepted on 127.0.0.1:<free port> is forwarded to the
server.  Both directions are cut into frames (4-byte big-endian length,
then the payload) so that the proxy acts on whole requests and replies,
however the bytes were split on the wire:

  client -> server   the first frame is the ConnectRequest (no header);
                     every later one starts with RequestHeader
                     (int32 xid, int32 type), and for the ops that carry a
                     path the path follows (int32 length + UTF-8), then,
                     for exists/getData/getChildren/getChildren2, the
                     watch flag.
  server -> client   the first frame is the ConnectResponse; every later
                     one starts with ReplyHeader (int32 xid, int64 zxid,
                     int32 err); watch notifications have xid -1.

What a test can do (all thread-safe):

  * read the log: requests() and replies(), each record with its
    connection id, xid, op, path, watch flag and time (monotonic);
  * hook = f(request): called on the connection's own thread for every
    request after the ConnectRequest, BEFORE it is forwarded.  It may run
    any code synchronously (delete a node with kazoo first, wait for an
    event: the request, and everything the client sends after it on that
    connection, is held for as long as the hook runs), register a reply
    rule (on_reply), and return None (forward as is) or a Verdict
    (forward other bytes instead, drop the connection before or after
    forwarding);
  * hold a request (Verdict(hold=True)) until the client sends its next
    one on the connection, as a ZooKeeper 3.8.0 server does that lost the
    wake-up of its commit processor (ZOOKEEPER-4537): the held request is
    forwarded right before the next request (a ping too), or never if the
    connection ends first;
  * on_reply(cid, xid, ...): hold the reply to that xid for a while,
    rewrite its err, strip its body, swallow it, and/or drop the
    connection once it came;
  * drop(cid): end a connection as a network failure would, the client
    still receiving what was already sent to it;
  * stop(): close everything.

ZooKeeper answers a session's requests in order and libzookeeper drops
the connection on a reply whose xid is not the one it expects next
(ZRUNTIMEINCONSISTENCY), so a test never invents a reply out of thin air:
it has the server answer a harmless stand-in with the same xid (see
Verdict.replace and encode_request) and rewrites that answer.

Only the Python standard library is used; nothing listens beyond
127.0.0.1.
"""

import socket
import struct
import threading
import time
import traceback

# Request types (ZooDefs.OpCode).
OP_NAMES = {
    0: 'notification', 1: 'create', 2: 'delete', 3: 'exists',
    4: 'getData', 5: 'setData', 6: 'getACL', 7: 'setACL',
    8: 'getChildren', 9: 'sync', 11: 'ping', 12: 'getChildren2',
    13: 'check', 14: 'multi', 15: 'create2', 16: 'reconfig',
    17: 'checkWatches', 18: 'removeWatches', 19: 'createContainer',
    20: 'deleteContainer', 21: 'createTTL', 22: 'multiRead',
    100: 'auth', 101: 'setWatches', 102: 'sasl', 103: 'getEphemerals',
    104: 'getAllChildrenNumber', 105: 'setWatches2', 106: 'addWatch',
    -10: 'createSession', -11: 'closeSession', -1: 'error',
}
OP_CREATE, OP_DELETE, OP_EXISTS, OP_GETDATA, OP_SETDATA = 1, 2, 3, 4, 5
OP_GETCHILDREN, OP_SYNC, OP_PING, OP_GETCHILDREN2 = 8, 9, 11, 12
OP_MULTI, OP_CREATE2, OP_CREATE_CONTAINER = 14, 15, 19
OP_AUTH, OP_SET_WATCHES, OP_SASL, OP_CLOSE = 100, 101, 102, -11

# Requests whose record starts with the path.
PATH_OPS = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 15, 17, 18, 19, 20, 21,
            103, 104, 106}
# ... and whose path is followed by the watch flag.
WATCH_OPS = {3, 4, 8, 12}
CREATE_OPS = {1, 15, 19, 21}

# Special xids.
XID_NOTIFICATION = -1
XID_PING = -2
XID_AUTH = -4
XID_SET_WATCHES = -8
XID_NAMES = {XID_AUTH: 'auth', XID_SET_WATCHES: 'setWatches'}

# Error codes a test may want to send (KeeperException.Code).
ZOK = 0
ZNONODE = -101
ZBADVERSION = -103
ZNODEEXISTS = -110
ZSESSIONEXPIRED = -112
ZSESSIONMOVED = -118

# A frame longer than this is not ZooKeeper talking (jute.maxbuffer is
# about 1 MB by default): the connection is ended as a protocol error
# rather than buffering without bound.
MAX_FRAME = 64 * 1024 * 1024

# Socket timeout: bounds how long a blocked recv/sendall may stall before
# the loops look at their flags again (stop(), the drain deadline).
IO_TIMEOUT = 2.0


class ProtocolError(Exception):
    """The byte stream does not parse as ZooKeeper frames."""


# ---------------------------------------------------------------------------
# jute encoding
# ---------------------------------------------------------------------------

class _Decoder:
    """Reads jute fields (big-endian) from one frame's payload."""

    def __init__(self, data, pos=0):
        self.data = data
        self.pos = pos

    def _take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError('record shorter than its fields')
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int(self):
        return struct.unpack('>i', self._take(4))[0]

    def long(self):
        return struct.unpack('>q', self._take(8))[0]

    def bool(self):
        return self._take(1) != b'\x00'

    def buffer(self):
        n = self.int()
        return None if n < 0 else self._take(n)

    def string(self):
        raw = self.buffer()
        return None if raw is None else raw.decode('utf-8', 'replace')


def encode_string(text):
    raw = text.encode('utf-8')
    return struct.pack('>i', len(raw)) + raw


def encode_request(xid, op, path=None, watch=None):
    """The payload of a request made of a header, a path and, if watch is
    not None, the watch flag: exists, getData, getChildren, sync, delete
    without its version...  Used to have the server answer a harmless
    stand-in (e.g. exists without watch) in place of a client's request,
    under the client's xid, so that the reply keeps its place in order."""
    out = struct.pack('>ii', xid, op)
    if path is not None:
        out += encode_string(path)
    if watch is not None:
        out += b'\x01' if watch else b'\x00'
    return out


def frame(payload):
    """Length-prefix a payload."""
    return struct.pack('>i', len(payload)) + payload


# ---------------------------------------------------------------------------
# records
# ---------------------------------------------------------------------------

class Request:
    """One client request as the proxy saw it.

    seq       global arrival order over all connections
    cid       connection id (1, 2, ... in accept order)
    xid, op   from the RequestHeader (op None for the ConnectRequest)
    name      op name ('exists', 'connect', ...)
    path      for the ops that carry one, else None
    watch     the watch flag of exists/getData/getChildren(2), else None
    subops    for a multi: [(op, path), ...] as far as they parse
    time      time.monotonic() on arrival
    payload   the bytes received (without the length prefix); None for
              auth packets, which carry credentials that a test log has
              no business keeping
    fate      'forwarded', 'replaced', 'held' (kept back, see Verdict),
              'lost' (never reached the server)
    released  time.monotonic() when a held request went on (else None)
    reply     the Reply to this xid, once it came (None before, and for
              pings, whose xid is not unique)
    """

    __slots__ = ('seq', 'cid', 'xid', 'op', 'name', 'path', 'watch',
                 'subops', 'time', 'payload', 'fate', 'reply', 'session_id',
                 'released')

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    def __repr__(self):
        xid = '-' if self.xid is None else '%#x' % (self.xid & 0xFFFFFFFF)
        extra = ''
        if self.path is not None:
            extra += ' ' + self.path
        if self.watch:
            extra += ' watch'
        if self.subops:
            extra += ' %r' % (self.subops,)
        return '<req #%d conn %d xid %s %s%s>' % (self.seq, self.cid, xid,
                                                   self.name, extra)


class Reply:
    """One server frame as the proxy saw it (and what it did with it).

    cid, xid, zxid, err   from the ReplyHeader (for the ConnectResponse,
                          xid/zxid/err are None and session_id is set)
    name                  'connect', 'notification', 'ping' or the op name
                          of the request it answers
    path                  notification path, or a create's created path
    event_type, state     of a notification
    sent_err              the err the client was given (after a rewrite)
    fate                  'forwarded', 'rewritten', 'swallowed'
    time                  time.monotonic() on arrival
    """

    __slots__ = ('seq', 'cid', 'xid', 'zxid', 'err', 'name', 'path',
                 'event_type', 'state', 'session_id', 'sent_err', 'fate',
                 'time')

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    def __repr__(self):
        xid = '-' if self.xid is None else '%#x' % (self.xid & 0xFFFFFFFF)
        return '<reply #%d conn %d xid %s %s err %s%s%s>' % (
            self.seq, self.cid, xid, self.name, self.err,
            ' -> %s' % self.sent_err if self.sent_err != self.err else '',
            ' ' + self.fate if self.fate != 'forwarded' else '')


class Verdict:
    """What the hook wants done with a request.

    replace   bytes: forward this payload instead of the client's (the
              proxy adds the length prefix; keep the client's xid, see
              encode_request)
    drop      None, 'before' (end the connection instead of forwarding:
              the request is lost) or 'after' (forward, then end the
              connection: the server may or may not read it first, and
              its reply is lost; on_reply(..., swallow=True, drop=True)
              is the deterministic way to lose only the reply)
    hold      True: keep the request until the client's next request on
              this connection arrives, then forward it first (its fate
              is 'held' meanwhile, req.released the time it went on)
    """

    def __init__(self, replace=None, drop=None, hold=False):
        assert drop in (None, 'before', 'after'), drop
        assert not (hold and (drop or replace is not None))
        self.replace = replace
        self.drop = drop
        self.hold = hold


class _ReplyRule:
    __slots__ = ('err', 'strip_body', 'swallow', 'drop', 'delay')

    def __init__(self, err, strip_body, swallow, drop, delay):
        self.err = err
        self.strip_body = strip_body
        self.swallow = swallow
        self.drop = drop
        self.delay = delay


# ---------------------------------------------------------------------------
# connections
# ---------------------------------------------------------------------------

class _FrameReader:
    """Cuts a socket's byte stream into frames, whatever the recv sizes.
    read() returns the next payload, or None at end of stream or once
    keep_going() turns false (checked at every socket timeout)."""

    def __init__(self, sock, keep_going):
        self.sock = sock
        self.keep_going = keep_going
        self.buf = bytearray()

    def read(self):
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack('>i', self.buf[:4])[0]
                if n < 0 or n > MAX_FRAME:
                    raise ProtocolError('frame length %d' % n)
                if len(self.buf) >= 4 + n:
                    payload = bytes(self.buf[4:4 + n])
                    del self.buf[:4 + n]
                    return payload
            if not self.keep_going():
                return None
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return None             # reset, or shut down by us
            if not data:
                if self.buf:
                    raise ProtocolError('end of stream inside a frame '
                                        '(%d bytes)' % len(self.buf))
                return None
            self.buf += data


class Connection:
    """One proxied client connection (read its fields; act through the
    ZkProxy methods).

    cid          id, 1, 2, ... in accept order
    session_id   the session the server gave or confirmed in its
                 ConnectResponse (None before it; 0 if it refused, e.g.
                 expired)
    opened       time.monotonic() at accept
    end_reason   why it ended ('client closed', 'dropped: ...', ...),
                 None while it runs
    closed       threading.Event, set once both sockets are closed
    """

    def __init__(self, cid, client, server):
        self.cid = cid
        self.client = client
        self.server = server
        self.session_id = None
        self.opened = time.monotonic()
        self.end_reason = None
        self.ended_at = None
        self.dropped = False            # ended by the proxy, not a peer
        self.closed = threading.Event()
        self.lock = threading.Lock()
        self.pending = {}               # xid -> Request awaiting its reply
        self.rules = {}                 # xid -> _ReplyRule
        self.held = None                # (Request, payload) held back
        self.threads = []
        self._running = 0

    def __repr__(self):
        return '<conn %d session %s%s>' % (
            self.cid, '%#x' % self.session_id if self.session_id else None,
            ' ended: %s' % self.end_reason if self.end_reason else '')

    @property
    def ended(self):
        return self.end_reason is not None


def _shutdown(sock, how):
    try:
        sock.shutdown(how)
    except OSError:
        pass


class ZkProxy:
    """See the module docstring.  upstream: 'host:port' of one ZooKeeper
    server.  drain_timeout bounds how long an ended connection waits for
    the client to close its side (see drop)."""

    def __init__(self, upstream, hook=None, drain_timeout=10.0,
                 name='zkproxy'):
        host, port = upstream.rsplit(':', 1)
        self.upstream = (host, int(port))
        self.hook = hook
        self.drain_timeout = drain_timeout
        self.name = name
        self.errors = []                # hook exceptions, protocol errors
        self._lock = threading.Lock()
        self._requests = []
        self._replies = []
        self._conns = {}
        self._next_cid = 1
        self._seq = 0
        self._stopping = threading.Event()
        self._listener = None
        self._accept_thread = None
        self.port = None

    def __repr__(self):
        return '<ZkProxy %s %s -> %s:%d>' % (self.name, self.address,
                                            *self.upstream)

    @property
    def address(self):
        """'127.0.0.1:<port>', for zklock.hosts."""
        return '127.0.0.1:%d' % self.port

    # -- life cycle -------------------------------------------------------

    def start(self, port=0):
        """Listen on port (0: a free one; another's port, given back
        after its stop(): the client that used it can reconnect)."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(('127.0.0.1', port))
        s.listen(16)
        # accept() wakes up now and then to notice stop()
        s.settimeout(0.2)
        self._listener = s
        self.port = s.getsockname()[1]
        self._accept_thread = threading.Thread(
            target=self._accept_loop, daemon=True,
            name='%s-accept' % self.name)
        self._accept_thread.start()
        return self

    def refuse_new(self):
        """Close the listening socket: connections already made go on, a
        new one is refused (an outage that starts now, for a client that
        will try to reconnect).  Safe from a hook; stop() still ends the
        rest."""
        if self._listener is not None:
            try:
                self._listener.close()
            except OSError:
                pass

    def stop(self, timeout=10.0):
        """Stop accepting, end every connection abruptly (both sockets
        shut down at once, nothing drained) and wait, bounded, for the
        threads.  Never raises; may be called twice."""
        self._stopping.set()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        with self._lock:
            conns = list(self._conns.values())
        for c in conns:
            self._end(c, 'proxy stopped', graceful=False)
        deadline = time.monotonic() + timeout
        for c in conns:
            for t in c.threads:
                t.join(max(0.0, deadline - time.monotonic()))
        if self._listener is not None:
            try:
                self._listener.close()
            except OSError:
                pass

    def _accept_loop(self):
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError as e:
                # like a server that is down: the client tries again
                self._error('connect to %s:%d failed: %s'
                            % (self.upstream + (e,)))
                client.close()
                continue
            for s in (client, server):
                s.settimeout(IO_TIMEOUT)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                conn = Connection(self._next_cid, client, server)
                self._next_cid += 1
                self._conns[conn.cid] = conn
            conn._running = 2
            for target, tag in ((self._client_loop, 'c2s'),
                                (self._server_loop, 's2c')):
                t = threading.Thread(target=target, args=(conn,),
                                     daemon=True, name='%s-%d-%s'
                                     % (self.name, conn.cid, tag))
                conn.threads.append(t)
            for t in conn.threads:
                t.start()

    # -- ending connections -------------------------------------------------

    def _end(self, conn, reason, graceful=True, dropped=True):
        """End a connection once (later calls do nothing).

        The server side is shut down both ways: it sees the connection
        go, and whatever it still sends is discarded (a lost reply).  The
        client side is, if graceful, only shut down for writing: a FIN
        follows the bytes already sent, so the client reads every frame
        the proxy delivered before it sees the end of stream, as with a
        server that closes (closing a socket with unread input would
        send a RST instead, which may discard them).  The client loop then
        reads and discards until the client closes, at most
        drain_timeout seconds."""
        with conn.lock:
            if conn.end_reason is not None:
                if not graceful:            # stop(): no more draining
                    _shutdown(conn.client, socket.SHUT_RDWR)
                return
            conn.end_reason = reason
            conn.ended_at = time.monotonic()
            conn.dropped = dropped
        _shutdown(conn.server, socket.SHUT_RDWR)
        _shutdown(conn.client, socket.SHUT_WR if graceful
                  else socket.SHUT_RDWR)

    def _thread_done(self, conn):
        """The last of a connection's two threads closes both sockets
        (only then: closing a socket another thread still reads could
        hand its descriptor number to a new socket under it)."""
        with conn.lock:
            conn._running -= 1
            last = conn._running == 0
        if last:
            for s in (conn.client, conn.server):
                try:
                    s.close()
                except OSError:
                    pass
            conn.closed.set()

    def _error(self, text):
        with self._lock:
            self.errors.append(text)

    # -- client -> server ---------------------------------------------------

    def _client_loop(self, conn):
        def keep_going():
            if self._stopping.is_set():
                return False
            if conn.ended_at is not None:
                return time.monotonic() < conn.ended_at + self.drain_timeout
            return True
        reader = _FrameReader(conn.client, keep_going)
        first = True
        try:
            while True:
                try:
                    payload = reader.read()
                except ProtocolError as e:
                    if not conn.ended:
                        self._error('conn %d client: %s' % (conn.cid, e))
                    break
                if payload is None:
                    break
                if conn.ended:
                    continue                # draining: discarded
                req = self._parse_request(conn, payload, first)
                first = False
                self._forward_request(conn, req, payload)
        except Exception:
            self._error('conn %d client loop:\n%s'
                        % (conn.cid, traceback.format_exc()))
        finally:
            self._end(conn, 'client closed', dropped=False)
            self._thread_done(conn)

    def _parse_request(self, conn, payload, first):
        with self._lock:
            self._seq += 1
            seq = self._seq
        req = Request(seq=seq, cid=conn.cid, time=time.monotonic(),
                      payload=payload)
        if first:
            # ConnectRequest: protocolVersion, lastZxidSeen, timeOut,
            # sessionId, passwd[, readOnly]
            req.name = 'connect'
            try:
                d = _Decoder(payload)
                d.int()
                d.long()
                d.int()
                req.session_id = d.long()
            except ProtocolError:
                pass
        else:
            d = _Decoder(payload)
            try:
                req.xid = d.int()
                req.op = d.int()
                req.name = OP_NAMES.get(req.op, 'op%d' % req.op)
                if req.op in PATH_OPS:
                    req.path = d.string()
                    if req.op in WATCH_OPS:
                        req.watch = d.bool()
                elif req.op == OP_MULTI:
                    req.subops = _parse_multi(d)
            except ProtocolError as e:
                # forwarded all the same: the server is the judge
                self._error('conn %d: unparsable request (%d bytes): %s'
                            % (conn.cid, len(payload), e))
            if req.op in (OP_AUTH, OP_SASL):
                req.payload = None
        with self._lock:
            self._requests.append(req)
        return req

    def _forward_request(self, conn, req, payload):
        verdict = None
        hook = self.hook
        if hook is not None and req.xid is not None:
            try:
                verdict = hook(req)
            except Exception:
                # forwarded unchanged, so a broken hook does not hang the
                # client; the test sees proxy.errors
                self._error('hook failed on %r:\n%s'
                            % (req, traceback.format_exc()))
        if conn.ended:
            req.fate = 'lost'       # the hook dropped the connection
            return
        if conn.held is not None:
            # the server "wakes up": what it held goes first, in order
            held, held_payload = conn.held
            conn.held = None
            held.released = time.monotonic()
            self._send_request(conn, held, held_payload)
            if conn.ended:
                req.fate = 'lost'
                return
        if verdict is not None and verdict.hold:
            req.fate = 'held'
            conn.held = (req, payload)
            return
        if verdict is not None and verdict.drop == 'before':
            req.fate = 'lost'
            self._end(conn, 'dropped before forwarding %r' % req)
            return
        if verdict is not None and verdict.replace is not None:
            payload = verdict.replace
            req.fate = 'replaced'
        else:
            req.fate = 'forwarded'
        if not self._send_request(conn, req, payload):
            return
        if verdict is not None and verdict.drop == 'after':
            self._end(conn, 'dropped after forwarding %r' % req)

    def _send_request(self, conn, req, payload):
        if req.fate == 'held':
            req.fate = 'forwarded'
        if req.xid is not None and req.xid >= 0:
            # registered before sending: the reply may be quick
            with conn.lock:
                conn.pending[req.xid] = req
        try:
            conn.server.sendall(frame(payload))
        except OSError as e:
            req.fate = 'lost'
            self._end(conn, 'send to server failed: %s' % e, dropped=False)
            return False
        return True

    # -- server -> client ---------------------------------------------------

    def _server_loop(self, conn):
        reader = _FrameReader(conn.server,
                              lambda: not self._stopping.is_set())
        first = True
        try:
            while True:
                try:
                    payload = reader.read()
                except ProtocolError as e:
                    if not conn.ended:
                        self._error('conn %d server: %s' % (conn.cid, e))
                    break
                if payload is None:
                    break
                if conn.ended:
                    break
                payload, rule, rep = self._handle_reply(conn, payload,
                                                        first)
                first = False
                if rule is not None and rule.delay:
                    # everything the server sends after it waits too
                    time.sleep(rule.delay)
                if payload is not None:
                    try:
                        conn.client.sendall(frame(payload))
                    except OSError:
                        break
                if rule is not None and rule.drop:
                    self._end(conn, 'dropped at %r' % rep)
                    break
        except Exception:
            self._error('conn %d server loop:\n%s'
                        % (conn.cid, traceback.format_exc()))
        finally:
            self._end(conn, 'server closed', dropped=False)
            self._thread_done(conn)

    def _handle_reply(self, conn, payload, first):
        """Log one server frame and apply the reply rule for its xid.
        Returns (payload to deliver or None, the rule applied or None,
        the Reply record)."""
        with self._lock:
            self._seq += 1
            seq = self._seq
        rep = Reply(seq=seq, cid=conn.cid, time=time.monotonic(),
                    fate='forwarded')
        rule = None
        d = _Decoder(payload)
        try:
            if first:
                # ConnectResponse: protocolVersion, timeOut, sessionId, ...
                rep.name = 'connect'
                d.int()
                d.int()
                rep.session_id = conn.session_id = d.long()
            else:
                rep.xid, rep.zxid, rep.err = d.int(), d.long(), d.int()
                rep.sent_err = rep.err
                if rep.xid == XID_NOTIFICATION:
                    rep.name = 'notification'
                    rep.event_type, rep.state = d.int(), d.int()
                    rep.path = d.string()
                elif rep.xid == XID_PING:
                    rep.name = 'ping'
                else:
                    with conn.lock:
                        req = conn.pending.pop(rep.xid, None)
                        rule = conn.rules.pop(rep.xid, None)
                    if req is not None:
                        req.reply = rep
                        rep.name = req.name
                        if req.op in CREATE_OPS and rep.err == ZOK:
                            rep.path = d.string()
                    else:
                        rep.name = XID_NAMES.get(rep.xid, 'reply')
        except ProtocolError as e:
            self._error('conn %d: unparsable reply %r: %s'
                        % (conn.cid, payload[:64], e))
        with self._lock:
            self._replies.append(rep)
        if rule is None:
            return payload, None, rep
        if rule.swallow:
            rep.fate = 'swallowed'
            return None, rule, rep
        if rule.err is not None:
            body = b'' if rule.strip_body else payload[16:]
            payload = payload[:12] + struct.pack('>i', rule.err) + body
            rep.sent_err = rule.err
            rep.fate = 'rewritten'
        return payload, rule, rep

    # -- what tests call ----------------------------------------------------

    def connections(self):
        """Every connection so far, in accept order."""
        with self._lock:
            return [self._conns[k] for k in sorted(self._conns)]

    def connection(self, cid):
        with self._lock:
            return self._conns[cid]

    def requests(self, cid=None, ops=None, path=None):
        """Logged requests (oldest first), optionally only those of one
        connection, with op in `ops`, or with this exact path."""
        with self._lock:
            reqs = list(self._requests)
        return [r for r in reqs
                if (cid is None or r.cid == cid)
                and (ops is None or r.op in ops)
                and (path is None or r.path == path)]

    def replies(self, cid=None):
        with self._lock:
            reps = list(self._replies)
        return [r for r in reps if cid is None or r.cid == cid]

    def on_reply(self, cid, xid, err=None, strip_body=False, swallow=False,
                 drop=False, delay=0.0):
        """Act on the server's reply to `xid` on connection `cid`, once:
        hold it (and so everything the server sends after it) for `delay`
        seconds; deliver it with `err` in place of the server's (and, with
        strip_body, without its body, as a server's error reply is), or
        swallow it; then, with drop, end the connection (see drop()).

        Register it before the request is forwarded (from the hook),
        or the reply may have passed already."""
        conn = self.connection(cid)
        with conn.lock:
            conn.rules[xid] = _ReplyRule(err, strip_body, swallow, drop,
                                         delay)

    def drop(self, cid, reason='dropped by the test'):
        """End a connection as a network failure would: the server sees it
        go and anything it still sends is lost; the client gets what the
        proxy already delivered, then the end of stream."""
        self._end(self.connection(cid), reason)

    def drop_all(self, reason='dropped by the test'):
        for c in self.connections():
            self._end(c, reason)


def _parse_multi(d):
    """[(op, path), ...] of a multi request: MultiHeader (type, done,
    err) then each op's record, until the header with done set.  Stops
    quietly at an op it cannot skip (the list is for the log only)."""
    ops = []
    for _ in range(100000):
        op, done = d.int(), d.bool()
        d.int()                             # err, -1 in a request
        if done or op == -1:
            break
        path = d.string()
        ops.append((op, path))
        if op in (1, 15, 19, 21):           # CreateRequest (+ ttl)
            d.buffer()
            for _ in range(max(0, d.int())):
                d.int()
                d.string()
                d.string()
            d.int()
            if op == 21:
                d.long()
        elif op in (2, 13):                 # delete, check: version
            d.int()
        elif op == 5:                       # setData: data, version
            d.buffer()
            d.int()
        elif op in (4, 8):                  # reads in a multiRead: watch
            d.bool()
        else:
            break
    return ops
