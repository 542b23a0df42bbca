/*-------------------------------------------------------------------------
 *
 * showtext.c
 *	  UTF-8 bytes that come from outside this database, shown as text of
 *	  this database or, when it cannot hold them, as \x hex.
 *
 * Two views show bytes that this database did not write: zk_lock_queue's
 * owner (node data of any client) and zk_stat_locks' name (counted in
 * UTF-8 by every database of the cluster, whatever its encoding).  A
 * conversion that raises ERROR would fail the whole view, in every
 * database that cannot hold one row (22P05 in LATIN1 for a CJK name, 22021
 * in UTF-8 for the raw bytes a SQL_ASCII database counted), so both show
 * such bytes the same way: "\x" and their hex, as bytea prints.  The
 * conversion runs with noError and is only kept when it took every byte.
 *
 * src/monitor/showtext.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "mb/pg_wchar.h"

#include "monitor/showtext.h"

void
zkt_append_hex(StringInfo buf, const char *data, int len)
{
	static const char digits[] = "0123456789abcdef";

	enlargeStringInfo(buf, 2 + 2 * len);
	appendStringInfoString(buf, "\\x");
	for (int i = 0; i < len; i++)
	{
		unsigned char ch = (unsigned char) data[i];

		appendStringInfoChar(buf, digits[ch >> 4]);
		appendStringInfoChar(buf, digits[ch & 0x0F]);
	}
}

void
zkt_append_utf8(StringInfo buf, const char *data, int len)
{
	int			enc = GetDatabaseEncoding();
	bool		ascii = true;
	Oid			proc;

	/* a NUL byte is invalid too: text cannot hold it in any encoding */
	if (!pg_verify_mbstr(PG_UTF8, data, len, true))
	{
		zkt_append_hex(buf, data, len);
		return;
	}
	for (int i = 0; i < len && ascii; i++)
		ascii = !IS_HIGHBIT_SET(data[i]);

	/*
	 * Every server encoding is a superset of ASCII, and SQL_ASCII takes any
	 * byte but NUL as it is.
	 */
	if (ascii || enc == PG_UTF8 || enc == PG_SQL_ASCII)
	{
		appendBinaryStringInfo(buf, data, len);
		return;
	}

	proc = FindDefaultConversionProc(PG_UTF8, enc);
	if (OidIsValid(proc))
	{
		/* the conversion functions' contract on the output's size */
		int			room = len * MAX_CONVERSION_GROWTH + 1;
		unsigned char *out = palloc(room);
		int			done;

		done = pg_do_encoding_conversion_buf(proc, PG_UTF8, enc,
											 (unsigned char *) data, len,
											 out, room, true);
		if (done == len)
		{
			appendStringInfoString(buf, (char *) out);
			pfree(out);
			return;
		}
		pfree(out);
	}
	/* a character the database encoding has no equivalent for */
	zkt_append_hex(buf, data, len);
}
