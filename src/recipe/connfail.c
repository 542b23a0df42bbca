/*-------------------------------------------------------------------------
 *
 * connfail.c
 *	  How a connection to ZooKeeper failed, read from one line of the
 *	  client library's log (see connfail.h).
 *
 * libzookeeper reports a failed connection only in its log: its API
 * says CONNECTING, whatever happened.  The line handle_socket_error_msg
 * writes (3.8.0: "Socket %s zk retcode=%d, errno=%d(%s): %s", the
 * address in brackets in other versions) carries the library's return
 * code and the errno.  A reset (retcode -4, ZCONNECTIONLOSS, errno 104,
 * ECONNRESET) is what a TLS tunnel does when it cannot reach or verify
 * its server; a refused connection (111) or a server that closed it
 * (the library's 112) is something else.  A timeout (-7) logs whatever
 * errno was left by an earlier call, so it is never a reset.
 *
 * Called on libzookeeper's threads (session/log.c), so plain C: no
 * PostgreSQL, no allocation.  test/unit exercises it.
 *
 * src/recipe/connfail.c
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "recipe/connfail.h"

#define ZKCF_RETCODE " zk retcode="
#define ZKCF_ERRNO "errno="
#define ZKCF_CONNECTIONLOSS "-4,"
#define ZKCF_ECONNRESET 104		/* Linux's; the library prints the number */

ZkConnFailure
zkcf_classify(const char *line)
{
	const char *rc = strstr(line, ZKCF_RETCODE);
	const char *at = rc ? strstr(rc, ZKCF_ERRNO) : NULL;
	int			err = 0;
	int			digits = 0;

	if (at == NULL)
		return ZKCF_NONE;
	for (at += strlen(ZKCF_ERRNO); *at >= '0' && *at <= '9'; at++)
	{
		if (++digits > 6)
			return ZKCF_OTHER;
		err = err * 10 + (*at - '0');
	}
	if (digits > 0 && err == ZKCF_ECONNRESET &&
		strncmp(rc + strlen(ZKCF_RETCODE), ZKCF_CONNECTIONLOSS,
				strlen(ZKCF_CONNECTIONLOSS)) == 0)
		return ZKCF_RESET;
	return ZKCF_OTHER;
}
