"""
libpq's calls that psycopg2 does not offer, through ctypes: the fast-path
function call (PQfn, protocol message 'F') and a statement whose
parameters are sent with their types at Bind (PQexecParams).  The tests
use them to reach the server the way a client library other than
psycopg2 can.

    c = RawConn('host=/tmp port=5432 dbname=postgres user=postgres')
    c.execute('BEGIN')                       # -> None, or raises PqError
    c.fn(oid, ['chan', 'payload'])           # text arguments
    c.execute_params('SELECT $1', ['1'], [23])
    c.close()
"""

import ctypes
import ctypes.util

_lib = ctypes.CDLL(ctypes.util.find_library('pq') or 'libpq.so.5')

PGRES_COMMAND_OK = 1
PGRES_TUPLES_OK = 2
CONNECTION_OK = 0
PG_DIAG_SQLSTATE = ord('C')


class _ArgUnion(ctypes.Union):
    _fields_ = [('ptr', ctypes.c_void_p), ('integer', ctypes.c_int)]


class _ArgBlock(ctypes.Structure):
    _fields_ = [('len', ctypes.c_int), ('isint', ctypes.c_int),
                ('u', _ArgUnion)]


_lib.PQconnectdb.restype = ctypes.c_void_p
_lib.PQconnectdb.argtypes = [ctypes.c_char_p]
_lib.PQstatus.argtypes = [ctypes.c_void_p]
_lib.PQerrorMessage.restype = ctypes.c_char_p
_lib.PQerrorMessage.argtypes = [ctypes.c_void_p]
_lib.PQfinish.argtypes = [ctypes.c_void_p]
_lib.PQexec.restype = ctypes.c_void_p
_lib.PQexec.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_lib.PQexecParams.restype = ctypes.c_void_p
_lib.PQexecParams.argtypes = [
    ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
    ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_char_p),
    ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int), ctypes.c_int]
_lib.PQfn.restype = ctypes.c_void_p
_lib.PQfn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                      ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                      ctypes.POINTER(_ArgBlock), ctypes.c_int]
_lib.PQresultStatus.argtypes = [ctypes.c_void_p]
_lib.PQresultErrorField.restype = ctypes.c_char_p
_lib.PQresultErrorField.argtypes = [ctypes.c_void_p, ctypes.c_int]
_lib.PQresultErrorMessage.restype = ctypes.c_char_p
_lib.PQresultErrorMessage.argtypes = [ctypes.c_void_p]
_lib.PQntuples.argtypes = [ctypes.c_void_p]
_lib.PQnfields.argtypes = [ctypes.c_void_p]
_lib.PQgetvalue.restype = ctypes.c_char_p
_lib.PQgetvalue.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
_lib.PQclear.argtypes = [ctypes.c_void_p]


class PqError(Exception):
    """A statement or call that failed; .pgcode is its SQLSTATE."""

    def __init__(self, pgcode, message):
        super().__init__('%s: %s' % (pgcode, message))
        self.pgcode = pgcode
        self.message = message


class RawConn:
    """One libpq connection driven through ctypes (blocking calls)."""

    def __init__(self, conninfo):
        self._conn = _lib.PQconnectdb(conninfo.encode())
        if _lib.PQstatus(self._conn) != CONNECTION_OK:
            msg = _lib.PQerrorMessage(self._conn).decode(errors='replace')
            _lib.PQfinish(self._conn)
            raise ConnectionError(msg)

    def _result(self, res):
        """Rows of a result (list of tuples of str), or raise PqError."""
        if not res:
            raise PqError(None, _lib.PQerrorMessage(self._conn).decode())
        try:
            status = _lib.PQresultStatus(res)
            if status not in (PGRES_COMMAND_OK, PGRES_TUPLES_OK):
                code = _lib.PQresultErrorField(res, PG_DIAG_SQLSTATE)
                raise PqError(code.decode() if code else None,
                              (_lib.PQresultErrorMessage(res) or b'')
                              .decode(errors='replace').strip())
            return [tuple((_lib.PQgetvalue(res, r, f) or b'').decode()
                          for f in range(_lib.PQnfields(res)))
                    for r in range(_lib.PQntuples(res))]
        finally:
            _lib.PQclear(res)

    def execute(self, sql):
        return self._result(_lib.PQexec(self._conn, sql.encode()))

    def execute_params(self, sql, params, types):
        """The extended protocol: each parameter sent as text with its type
        oid, so the type's input function (a domain's CHECK) runs at Bind."""
        n = len(params)
        vals = (ctypes.c_char_p * n)(*[p.encode() for p in params])
        oids = (ctypes.c_uint * n)(*types)
        return self._result(_lib.PQexecParams(
            self._conn, sql.encode(), n, oids, vals, None, None, 0))

    def fn(self, fnoid, args):
        """A fast-path call of function fnoid with text arguments; its
        result is not read (the tests call void functions)."""
        bufs = [ctypes.create_string_buffer(a.encode()) for a in args]
        blocks = (_ArgBlock * len(args))()
        for blk, a, buf in zip(blocks, args, bufs):
            blk.len = len(a.encode())
            blk.isint = 0
            blk.u.ptr = ctypes.cast(buf, ctypes.c_void_p)
        out = ctypes.create_string_buffer(1024)
        outlen = ctypes.c_int(0)
        return self._result(_lib.PQfn(self._conn, fnoid, out,
                                      ctypes.byref(outlen), 0, blocks,
                                      len(args)))

    def close(self):
        if self._conn:
            _lib.PQfinish(self._conn)
            self._conn = None
