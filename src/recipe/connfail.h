/*-------------------------------------------------------------------------
 *
 * connfail.h
 *	  How a connection to ZooKeeper failed, read from one line of the
 *	  client library's log (pure, unit-tested).
 *
 * src/recipe/connfail.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_CONNFAIL_H
#define ZKLOCK_CONNFAIL_H

typedef enum ZkConnFailure
{
	ZKCF_NONE,					/* not a socket error line */
	ZKCF_RESET,					/* the connection was reset (ECONNRESET) */
	ZKCF_OTHER					/* any other socket error or timeout */
} ZkConnFailure;

/*
 * The failure a libzookeeper log line reports, from its message part
 * ("Socket [host:port] zk retcode=-4, errno=104(Connection reset by
 * peer): failed while receiving a server response"); line is
 * NUL-terminated.  Safe on any thread: reads only the line.
 */
extern ZkConnFailure zkcf_classify(const char *line);

#endif							/* ZKLOCK_CONNFAIL_H */
