/*-------------------------------------------------------------------------
 *
 * printable.h
 *	  Text that came from outside the server, made safe for its log.
 *
 * Another client's node data (waitlog.c) and libzookeeper's messages
 * (session/log.c) reach the server log.  A newline in them would forge a
 * log line, an escape sequence would drive the terminal of whoever reads
 * the log; PostgreSQL cleans its own application_name the same way.
 * Pure C, no PostgreSQL call: session/log.c uses it on libzookeeper's
 * threads.
 *
 * src/printable.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_PRINTABLE_H
#define ZKLOCK_PRINTABLE_H

#include <stddef.h>

/*
 * Copy the n bytes at src into dst (dstlen bytes, at least 1), cut to
 * fit, anything but printable ASCII as '?', NUL-terminated.
 */
static inline void
zk_copy_printable(char *dst, size_t dstlen, const char *src, size_t n)
{
	if (n >= dstlen)
		n = dstlen - 1;
	for (size_t i = 0; i < n; i++)
		dst[i] = (src[i] >= 32 && src[i] < 127) ? src[i] : '?';
	dst[n] = '\0';
}

#endif							/* ZKLOCK_PRINTABLE_H */
