/*-------------------------------------------------------------------------
 *
 * ensconf.c
 *	  /zookeeper/config read into a client connect string (ensconf.h).
 *
 * The data is what ZooKeeper's QuorumMaj.toString() writes (3.5 to 3.9):
 * one line per server, then the version,
 *
 *	  server.4=127.0.0.14:21811:21812:participant;127.0.0.14:21810
 *	  server.7=[::1]:2888:3888:observer;[0:0:0:0:0:0:0:0]:2181
 *	  version=100000007
 *
 * A server line is "quorum addresses[;client]": the quorum part is one or
 * more "host:port:port[:role]" joined by '|' (3.6's multi-address), the
 * client part "[host:]port".  ZooKeeper's QuorumServer reads a bare port
 * as 0.0.0.0:port and prints a wildcard as it is, which would point a
 * client at itself: like Curator's EnsembleTracker, the line's (first)
 * quorum host takes its place.  A line without a client part has no
 * client port (a server serving TLS only, say): such a config is not
 * followed at all, since a partial list could strand a session on fewer
 * servers than the ensemble has.
 *
 * The version is the hex zxid of the reconfig that wrote the config; a
 * static ensemble's config says version=0 (or nothing), and is never
 * followed: there is no order between two servers' static configs, and a
 * server not yet restarted would send the client back to the old list.
 *
 * Anything that does not parse refuses the whole config (ZKEC_BAD): the
 * session then keeps the list it has.
 *
 * src/recipe/ensconf.c
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "recipe/ensconf.h"

/* the C locale's classes, spelled out: pure code uses no <ctype.h> */
static bool
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' ||
		c == '\f' || c == '\v';
}

static bool
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool
is_alnum(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static char
to_lower(char c)
{
	return (c >= 'A' && c <= 'Z') ? (char) (c - 'A' + 'a') : c;
}

/* n bytes equal, ignoring ASCII case (host names) */
static bool
equal_nocase(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (to_lower(a[i]) != to_lower(b[i]))
			return false;
	return true;
}

/* a longer line is no config of ZooKeeper's */
#define LINE_MAX_LEN 1024

/* [from, to) of a text, trimmed of blanks */
typedef struct Span
{
	const char *p;
	size_t		n;
} Span;

static Span
trim(const char *p, size_t n)
{
	Span		s;

	while (n > 0 && is_space(*p))
	{
		p++;
		n--;
	}
	while (n > 0 && is_space(p[n - 1]))
		n--;
	s.p = p;
	s.n = n;
	return s;
}

static bool
span_is(Span s, const char *word)
{
	return s.n == strlen(word) && memcmp(s.p, word, s.n) == 0;
}

static bool
valid_port(Span s)
{
	unsigned long v = 0;

	if (s.n == 0 || s.n > 5)
		return false;
	for (size_t i = 0; i < s.n; i++)
	{
		if (!is_digit(s.p[i]))
			return false;
		v = v * 10 + (unsigned long) (s.p[i] - '0');
	}
	return v >= 1 && v <= 65535;
}

/* A host: a name or IPv4 address, or an IPv6 address in brackets. */
static bool
valid_host(Span s)
{
	if (s.n == 0)
		return false;
	if (s.p[0] == '[')
		return s.n > 2 && s.p[s.n - 1] == ']';
	for (size_t i = 0; i < s.n; i++)
	{
		char		c = s.p[i];

		if (!(is_alnum(c) || c == '.' || c == '-' || c == '_' || c == ':'))
			return false;
	}
	return true;
}

/* The wildcard address a server binds to: not one a client can reach. */
static bool
is_wildcard(Span s)
{
	return span_is(s, "0.0.0.0") || span_is(s, "::") ||
		span_is(s, "[::]") || span_is(s, "0:0:0:0:0:0:0:0") ||
		span_is(s, "[0:0:0:0:0:0:0:0]");
}

/* Append "host:port" (host bracketed if a bare IPv6 address) to out. */
static bool
append_address(char *out, size_t outsz, size_t *used, Span host, Span port)
{
	bool		bracket = host.p[0] != '[' && memchr(host.p, ':', host.n);
	size_t		need = (*used > 0 ? 1 : 0) + host.n + (bracket ? 2 : 0) +
		1 + port.n;

	if (*used + need + 1 > outsz)
		return false;
	if (*used > 0)
		out[(*used)++] = ',';
	if (bracket)
		out[(*used)++] = '[';
	memcpy(out + *used, host.p, host.n);
	*used += host.n;
	if (bracket)
		out[(*used)++] = ']';
	out[(*used)++] = ':';
	memcpy(out + *used, port.p, port.n);
	*used += port.n;
	out[*used] = '\0';
	return true;
}

/*
 * One server line's value (after "server.N="): appends its client
 * address.  Returns ZKEC_OK, ZKEC_NO_CLIENT or ZKEC_BAD.
 */
static ZkecResult
server_line(Span v, char *out, size_t outsz, size_t *used)
{
	const char *semi = memchr(v.p, ';', v.n);
	Span		quorum = trim(v.p, semi ? (size_t) (semi - v.p) : v.n);
	const char *bar = memchr(quorum.p, '|', quorum.n);
	Span		first = trim(quorum.p, bar ? (size_t) (bar - quorum.p) : quorum.n);
	Span		qhost;
	const char *rest;
	Span		client;
	Span		chost;
	Span		cport;
	const char *colon;

	/* the first quorum address: host:port:port[:role] */
	if (first.n == 0)
		return ZKEC_BAD;
	if (first.p[0] == '[')
	{
		const char *close = memchr(first.p, ']', first.n);

		if (close == NULL)
			return ZKEC_BAD;
		qhost.p = first.p;
		qhost.n = (size_t) (close - first.p) + 1;
	}
	else
	{
		const char *c = memchr(first.p, ':', first.n);

		if (c == NULL)
			return ZKEC_BAD;
		qhost.p = first.p;
		qhost.n = (size_t) (c - first.p);
	}
	if (!valid_host(qhost))
		return ZKEC_BAD;
	rest = qhost.p + qhost.n;
	{
		/* ":port:port[:role]" */
		Span		tail = {rest, first.n - qhost.n};
		Span		parts[4];
		int			n = 0;
		const char *p = tail.p;
		const char *end = tail.p + tail.n;

		if (tail.n == 0 || *p != ':')
			return ZKEC_BAD;
		p++;
		while (n < 4)
		{
			const char *c = memchr(p, ':', (size_t) (end - p));

			parts[n].p = p;
			parts[n].n = c ? (size_t) (c - p) : (size_t) (end - p);
			n++;
			if (c == NULL)
				break;
			p = c + 1;
		}
		if (n < 2 || n > 3 || !valid_port(parts[0]) || !valid_port(parts[1]))
			return ZKEC_BAD;
		if (n == 3 && !span_is(parts[2], "participant") &&
			!span_is(parts[2], "observer"))
			return ZKEC_BAD;
	}

	if (semi == NULL)
		return ZKEC_NO_CLIENT;
	client = trim(semi + 1, v.n - (size_t) (semi + 1 - v.p));
	if (client.n == 0)
		return ZKEC_NO_CLIENT;
	colon = NULL;
	for (size_t i = client.n; i > 0; i--)
		if (client.p[i - 1] == ':')
		{
			colon = client.p + i - 1;
			break;
		}
	if (colon == NULL)
	{
		/* a bare port: ZooKeeper binds it on 0.0.0.0 */
		chost.p = "0.0.0.0";
		chost.n = 7;
		cport = client;
	}
	else
	{
		chost = trim(client.p, (size_t) (colon - client.p));
		cport = trim(colon + 1, client.n - (size_t) (colon + 1 - client.p));
	}
	if (!valid_port(cport))
		return ZKEC_BAD;
	if (is_wildcard(chost))
		chost = qhost;
	else if (!valid_host(chost))
		return ZKEC_BAD;
	if (!append_address(out, outsz, used, chost, cport))
		return ZKEC_BAD;
	return ZKEC_OK;
}

static bool
parse_version(Span v, uint64_t *version)
{
	uint64_t	x = 0;

	if (v.n == 0 || v.n > 16)
		return false;
	for (size_t i = 0; i < v.n; i++)
	{
		char		c = to_lower(v.p[i]);

		if (is_digit(c))
			x = (x << 4) | (uint64_t) (c - '0');
		else if (c >= 'a' && c <= 'f')
			x = (x << 4) | (uint64_t) (c - 'a' + 10);
		else
			return false;
	}
	*version = x;
	return true;
}

ZkecResult
zkec_parse(const char *data, size_t len, char *out, size_t outsz,
		   uint64_t *version)
{
	const char *p = data;
	const char *end = data + len;
	size_t		used = 0;
	int			servers = 0;
	bool		no_client = false;
	bool		have_version = false;
	uint64_t	ver = 0;

	*version = 0;
	if (outsz == 0)
		return ZKEC_BAD;
	out[0] = '\0';
	if (data == NULL || memchr(data, '\0', len) != NULL)
		return ZKEC_BAD;

	while (p < end)
	{
		const char *nl = memchr(p, '\n', (size_t) (end - p));
		size_t		n = nl ? (size_t) (nl - p) : (size_t) (end - p);
		Span		line = trim(p, n);
		const char *eq;
		Span		key;
		Span		value;

		p = nl ? nl + 1 : end;
		if (n > LINE_MAX_LEN)
			goto bad;
		if (line.n == 0)
			continue;
		eq = memchr(line.p, '=', line.n);
		if (eq == NULL)
			goto bad;
		key = trim(line.p, (size_t) (eq - line.p));
		value = trim(eq + 1, line.n - (size_t) (eq + 1 - line.p));
		if (key.n > 7 && memcmp(key.p, "server.", 7) == 0)
		{
			ZkecResult r;

			for (size_t i = 7; i < key.n; i++)
				if (!is_digit(key.p[i]))
					goto bad;
			r = server_line(value, out, outsz, &used);
			if (r == ZKEC_BAD)
				goto bad;
			if (r == ZKEC_NO_CLIENT)
				no_client = true;
			servers++;
		}
		else if (span_is(key, "version"))
		{
			if (have_version || !parse_version(value, &ver))
				goto bad;
			have_version = true;
		}
		/* another key (none in 3.5-3.9): not ours to judge */
	}
	if (servers == 0)
		goto bad;
	*version = ver;
	if (ver == 0)
	{
		out[0] = '\0';
		return ZKEC_STATIC;
	}
	if (no_client)
	{
		out[0] = '\0';
		return ZKEC_NO_CLIENT;
	}
	return ZKEC_OK;

bad:
	out[0] = '\0';
	*version = 0;
	return ZKEC_BAD;
}

/* Is the n bytes at entry one of list's comma-separated entries? */
static bool
in_list(const char *entry, size_t n, const char *list)
{
	const char *p = list;

	while (*p != '\0')
	{
		const char *comma = strchr(p, ',');
		Span		e = trim(p, comma ? (size_t) (comma - p) : strlen(p));

		if (e.n == n && equal_nocase(e.p, entry, n))
			return true;
		if (comma == NULL)
			break;
		p = comma + 1;
	}
	return false;
}

bool
zkec_hosts_covered(const char *hosts, const char *list)
{
	const char *p = hosts;
	int			entries = 0;

	while (*p != '\0')
	{
		const char *comma = strchr(p, ',');
		size_t		n = comma ? (size_t) (comma - p) : strlen(p);
		Span		e = trim(p, n);

		/* "host:port/" (a lone slash is no chroot) */
		if (comma == NULL && e.n > 0 && e.p[e.n - 1] == '/')
			e = trim(e.p, e.n - 1);
		if (e.n > 0)
		{
			if (!in_list(e.p, e.n, list))
				return false;
			entries++;
		}
		if (comma == NULL)
			break;
		p = comma + 1;
	}
	return entries > 0;
}
