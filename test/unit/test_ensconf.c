/*-------------------------------------------------------------------------
 *
 * test_ensconf.c
 *	  Unit tests of the /zookeeper/config parser (src/recipe/ensconf.c),
 *	  run without any PostgreSQL or ZooKeeper server.
 *
 * Covers the config of a dynamic ensemble as ZooKeeper 3.8 writes it,
 * the wildcard client address (written out, or a bare port) replaced by
 * the line's quorum host as Curator does, observers, IPv6 addresses in
 * brackets, 3.6's multi-address quorum part, a server without a client
 * port (the config is refused, not followed in part), version 0 (a static
 * ensemble, never followed), garbage, a NUL byte, 1 MB of data, a list
 * that does not fit the buffer, and the "auto" check of zklock.hosts
 * against the advertised addresses.
 *
 * Output is TAP, as test_recipe's: "ok K - ..." per assertion, the plan
 * at the end, exit status 1 if anything failed.
 *
 * test/unit/test_ensconf.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/ensconf.h"
#include "tap.h"

/* Parse text; check the result, the list and the version. */
static void
expect(const char *what, const char *text, ZkecResult want,
	   const char *want_list, uint64_t want_version)
{
	char		out[ZKEC_LIST_MAX];
	uint64_t	version = 12345;
	ZkecResult	r = zkec_parse(text, strlen(text), out, sizeof(out), &version);

	if (!ok(r == want && strcmp(out, want_list) == 0 &&
			version == want_version, "%s", what))
		diag("got result %d list \"%s\" version %llx; want %d \"%s\" %llx",
			 (int) r, out, (unsigned long long) version, (int) want,
			 want_list, (unsigned long long) want_version);
}

int
main(void)
{
	char		out[ZKEC_LIST_MAX];
	uint64_t	version;

	expect("3.8's config of three servers",
		   "server.4=127.0.0.14:21811:21812:participant;127.0.0.14:21810\n"
		   "server.5=127.0.0.15:21811:21812:participant;127.0.0.15:21810\n"
		   "server.6=127.0.0.16:21811:21812:participant;127.0.0.16:21810\n"
		   "version=100000007",
		   ZKEC_OK,
		   "127.0.0.14:21810,127.0.0.15:21810,127.0.0.16:21810",
		   0x100000007ULL);
	expect("a trailing newline and CRLF line ends",
		   "server.1=zk1.example:2888:3888:participant;zk1.example:2181\r\n"
		   "version=2\r\n",
		   ZKEC_OK, "zk1.example:2181", 2);
	expect("wildcard client address 0.0.0.0: the quorum host",
		   "server.1=10.0.0.1:2888:3888:participant;0.0.0.0:2181\n"
		   "version=5",
		   ZKEC_OK, "10.0.0.1:2181", 5);
	expect("a bare client port: the quorum host",
		   "server.1=10.0.0.1:2888:3888;2181\nversion=5",
		   ZKEC_OK, "10.0.0.1:2181", 5);
	expect("IPv6 wildcard as ZooKeeper prints it: the quorum host",
		   "server.1=10.0.0.1:2888:3888:participant;[0:0:0:0:0:0:0:0]:2181\n"
		   "version=5",
		   ZKEC_OK, "10.0.0.1:2181", 5);
	expect("observers are followed like participants",
		   "server.1=a:1:2:participant;a:2181\n"
		   "server.9=b:1:2:observer;b:2182\nversion=a",
		   ZKEC_OK, "a:2181,b:2182", 10);
	expect("IPv6 addresses in brackets",
		   "server.1=[::1]:2888:3888:participant;[::1]:2181\n"
		   "server.2=[fe80::2]:2888:3888;0.0.0.0:2182\nversion=ff",
		   ZKEC_OK, "[::1]:2181,[fe80::2]:2182", 0xff);
	expect("3.6's multi-address quorum part: the first host",
		   "server.1=10.0.0.1:2888:3888|10.0.1.1:2888:3888;2181\nversion=3",
		   ZKEC_OK, "10.0.0.1:2181", 3);
	expect("a server without a client port: not followed at all",
		   "server.1=a:1:2:participant;a:2181\n"
		   "server.2=b:1:2:participant\nversion=7",
		   ZKEC_NO_CLIENT, "", 7);
	expect("version 0: a static ensemble, never followed",
		   "server.1=a:1:2:participant;a:2181\nversion=0",
		   ZKEC_STATIC, "", 0);
	expect("no version line: static",
		   "server.1=a:1:2:participant;a:2181\n",
		   ZKEC_STATIC, "", 0);
	expect("no server line: not a config", "version=5", ZKEC_BAD, "", 0);
	expect("empty data", "", ZKEC_BAD, "", 0);
	expect("garbage", "hello world", ZKEC_BAD, "", 0);
	expect("a server line that does not parse refuses the whole config",
		   "server.1=a:1:2:participant;a:2181\nserver.2=b;b:2181\nversion=5",
		   ZKEC_BAD, "", 0);
	expect("an unknown role", "server.1=a:1:2:leader;a:2181\nversion=5",
		   ZKEC_BAD, "", 0);
	expect("a port out of range", "server.1=a:1:2;a:65536\nversion=5",
		   ZKEC_BAD, "", 0);
	expect("a version that is no hex number",
		   "server.1=a:1:2;a:2181\nversion=zz", ZKEC_BAD, "", 0);
	expect("two version lines", "server.1=a:1:2;a:2181\nversion=1\nversion=2",
		   ZKEC_BAD, "", 0);
	expect("a host with a blank in it",
		   "server.1=a:1:2;b c:2181\nversion=1", ZKEC_BAD, "", 0);
	expect("a line with no '='", "server.1=a:1:2;a:2181\nxyz\nversion=1",
		   ZKEC_BAD, "", 0);
	expect("an unknown key is left alone",
		   "server.1=a:1:2;a:2181\nfuture=1\nversion=1",
		   ZKEC_OK, "a:2181", 1);

	/* a NUL byte inside the data */
	{
		static const char data[] = "server.1=a:1:2;a:2181\0\nversion=1";

		ok(zkec_parse(data, sizeof(data) - 1, out, sizeof(out), &version) ==
		   ZKEC_BAD && out[0] == '\0', "a NUL byte in the data");
	}

	/* 1 MB of garbage, and 1 MB of valid lines that overflow the list */
	{
		size_t		n = 1024 * 1024;
		char	   *big = malloc(n + 64);
		size_t		used = 0;
		int			i = 0;

		for (size_t k = 0; k < n; k++)
			big[k] = (char) ('A' + (k * 7919) % 50);
		ok(zkec_parse(big, n, out, sizeof(out), &version) == ZKEC_BAD,
		   "1 MB of garbage");
		while (used < n)
			used += (size_t) sprintf(big + used,
									 "server.%d=h%d:1:2:participant;h%d:2181\n",
									 i, i, i), i++;
		used += (size_t) sprintf(big + used, "version=9");
		ok(zkec_parse(big, used, out, sizeof(out), &version) == ZKEC_BAD &&
		   out[0] == '\0',
		   "a list longer than the buffer is refused, not cut (%d servers)", i);
		free(big);
	}

	/* a buffer just too small, and just large enough */
	{
		const char *d = "server.1=a:1:2;a:2181\nserver.2=b:1:2;b:2181\nversion=1";
		char		small[14];

		ok(zkec_parse(d, strlen(d), small, 13, &version) == ZKEC_BAD,
		   "a 13-byte buffer for a 13-byte list (no room for the NUL)");
		ok(zkec_parse(d, strlen(d), small, 14, &version) == ZKEC_OK &&
		   strcmp(small, "a:2181,b:2181") == 0, "a 14-byte buffer");
	}

	/* zklock.follow_ensemble = auto: zklock.hosts against the config */
	ok(zkec_hosts_covered("127.0.0.1:1,127.0.0.1:2",
						  "127.0.0.1:2,127.0.0.1:3,127.0.0.1:1"),
	   "every host of zklock.hosts advertised: followed");
	ok(!zkec_hosts_covered("127.0.0.1:1,127.0.0.1:4",
						   "127.0.0.1:2,127.0.0.1:3,127.0.0.1:1"),
	   "one host not advertised: not followed");
	ok(!zkec_hosts_covered("127.0.0.1:22181", "10.0.0.1:2181"),
	   "a local TLS tunnel is never replaced by the servers' addresses");
	ok(zkec_hosts_covered(" ZK1.example:2181 , zk2.example:2181/",
						  "zk1.EXAMPLE:2181,zk2.example:2181"),
	   "names case-insensitively, blanks and a trailing slash ignored");
	ok(!zkec_hosts_covered("zk1:2181", "zk1:21810"),
	   "a port is compared whole, not as a prefix");
	ok(!zkec_hosts_covered("", "a:1"), "an empty connect string");

	printf("1..%d\n", n_tests);
	return n_failed > 0 ? 1 : 0;
}
