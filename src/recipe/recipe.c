/*-------------------------------------------------------------------------
 *
 * recipe.c
 *	  Pure logic of ZooKeeper's lock recipes: resource encoding, node names,
 *	  recognising other clients' contenders, serial-number ordering and the
 *	  choice of the single node a waiter watches.
 *
 * This file must stay free of PostgreSQL and ZooKeeper calls: it is linked
 * into the unit-test program (test/unit) as well as into the extension, and
 * everything subtle about the recipe is tested there without a server.
 *
 * src/recipe/recipe.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/recipe.h"

/*
 * The markers that precede ZooKeeper's sequence suffix in the recipes we
 * recognise.  Order does not matter: none is a suffix of another.
 */
static const struct
{
	const char *marker;
	ZkrMode		mode;
}			markers[] =
{
	{"__WRIT__", ZKR_MODE_EXCLUSIVE},	/* Curator InterProcessReadWriteLock */
	{"__READ__", ZKR_MODE_SHARED},
	{"lock-", ZKR_MODE_EXCLUSIVE},	/* Curator InterProcessMutex, go-zk */
	{"__lock__", ZKR_MODE_EXCLUSIVE},	/* kazoo Lock / WriteLock */
	{"__rlock__", ZKR_MODE_SHARED}, /* kazoo ReadLock */
};

static bool
is_safe_byte(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		(c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

ZkrEncodeResult
zkr_encode_resource(const char *res, size_t len, char *out, size_t outsize)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t		o = 0;
	size_t		start = 0;

	if (len == 0)
		return ZKR_ENCODE_EMPTY;
	if (len > ZKR_MAX_RESOURCE_BYTES)
		return ZKR_ENCODE_TOO_LONG;

	while (start <= len)
	{
		size_t		end = start;
		bool		dots;

		while (end < len && res[end] != '/')
			end++;
		if (end == start)
			return ZKR_ENCODE_EMPTY_LEVEL;

		/* "." and ".." would be path navigation: encode them entirely */
		dots = (end - start == 1 && res[start] == '.') ||
			(end - start == 2 && res[start] == '.' && res[start + 1] == '.');

		if (start > 0)
		{
			if (o + 1 >= outsize)
				return ZKR_ENCODE_NO_ROOM;
			out[o++] = '/';
		}
		for (size_t i = start; i < end; i++)
		{
			unsigned char c = (unsigned char) res[i];

			if (!dots && is_safe_byte(c))
			{
				if (o + 1 >= outsize)
					return ZKR_ENCODE_NO_ROOM;
				out[o++] = (char) c;
			}
			else
			{
				if (o + 3 >= outsize)
					return ZKR_ENCODE_NO_ROOM;
				out[o++] = '%';
				out[o++] = hex[c >> 4];
				out[o++] = hex[c & 0x0F];
			}
		}
		start = end + 1;
	}
	if (o >= outsize)
		return ZKR_ENCODE_NO_ROOM;
	out[o] = '\0';
	return ZKR_ENCODE_OK;
}

static bool
all_digits(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/*
 * Does name[0..len) end with one of the markers?  Sets *mode and returns
 * the marker's length, or 0.
 */
static size_t
ends_with_marker(const char *name, size_t len, ZkrMode *mode)
{
	for (size_t i = 0; i < sizeof(markers) / sizeof(markers[0]); i++)
	{
		size_t		ml = strlen(markers[i].marker);

		if (len >= ml && memcmp(name + len - ml, markers[i].marker, ml) == 0)
		{
			*mode = markers[i].mode;
			return ml;
		}
	}
	return 0;
}

bool
zkr_parse_child(const char *name, ZkrContender *out)
{
	size_t		len = strlen(name);

	/*
	 * Candidate suffix forms, longest prefix first (the regex's "(.*)" is
	 * greedy): ten digits; then '-' with ten digits; then '-' with nine.
	 */
	static const struct
	{
		size_t		width;
		bool		sign;
	}			forms[] = {{10, false}, {11, true}, {10, true}};

	out->name = name;
	out->mode = ZKR_MODE_NONE;
	out->seq = 0;
	out->prefix_len = 0;

	for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++)
	{
		size_t		w = forms[f].width;
		const char *suffix;
		size_t		ml;
		ZkrMode		mode;
		long long	value;

		if (len < w)
			continue;
		suffix = name + len - w;
		if (forms[f].sign)
		{
			if (suffix[0] != '-' || !all_digits(suffix + 1, w - 1))
				continue;
		}
		else if (!all_digits(suffix, w))
			continue;

		ml = ends_with_marker(name, len - w, &mode);
		if (ml == 0)
			continue;

		value = strtoll(suffix, NULL, 10);
		/* ZooKeeper prints a signed 32-bit counter; anything else is not it */
		if (value < -2147483648LL || value > 4294967295LL)
			continue;
		out->mode = mode;
		out->seq = (uint32_t) (int64_t) value;
		out->prefix_len = len - w - ml;
		return true;
	}
	return false;
}

int
zkr_seq_cmp(uint32_t a, uint32_t b)
{
	uint32_t	d = a - b;

	if (d == 0)
		return 0;
	if (d == 0x80000000u)
		return a < b ? -1 : 1;
	/* a follows b when the forward distance from b to a is under 2^31 */
	return d < 0x80000000u ? 1 : -1;
}

int
zkr_contender_cmp(const ZkrContender *a, const ZkrContender *b)
{
	int			c = zkr_seq_cmp(a->seq, b->seq);

	if (c != 0)
		return c;
	return strcmp(a->name, b->name);
}

static int
contender_qsort_cmp(const void *a, const void *b)
{
	return zkr_contender_cmp((const ZkrContender *) a,
							 (const ZkrContender *) b);
}

void
zkr_sort(ZkrContender *c, int n)
{
	if (n > 1)
		qsort(c, (size_t) n, sizeof(ZkrContender), contender_qsort_cmp);
}

int
zkr_collect(const char *const *names, int n, ZkrContender *out)
{
	int			k = 0;

	for (int i = 0; i < n; i++)
		if (zkr_parse_child(names[i], &out[k]))
			k++;
	zkr_sort(out, k);
	return k;
}

void
zkr_format_uuid(const uint8_t bytes[16], char out[ZKR_UUID_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	int			o = 0;

	for (int i = 0; i < 16; i++)
	{
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[o++] = '-';
		out[o++] = hex[bytes[i] >> 4];
		out[o++] = hex[bytes[i] & 0x0F];
	}
	out[o] = '\0';
}

bool
zkr_protocol_has_mode(ZkrProtocol protocol, ZkrMode mode)
{
	if (mode != ZKR_MODE_EXCLUSIVE && mode != ZKR_MODE_SHARED)
		return false;
	return !(protocol == ZKR_PROTOCOL_CURATOR_MUTEX && mode == ZKR_MODE_SHARED);
}

/* kazoo's names: uuid4().hex, the UUID without its dashes */
static void
uuid_hex(const char *uuid, char hex[ZKR_UUID_LEN + 1])
{
	int			k = 0;

	for (const char *p = uuid; *p && k < ZKR_UUID_LEN; p++)
		if (*p != '-')
			hex[k++] = *p;
	hex[k] = '\0';
}

size_t
zkr_protocol_prefix(ZkrProtocol protocol, ZkrMode mode, const char *uuid,
					char *out, size_t outsize)
{
	bool		excl = (mode == ZKR_MODE_EXCLUSIVE);
	int			n;

	if (!zkr_protocol_has_mode(protocol, mode))
		return 0;

	switch (protocol)
	{
		case ZKR_PROTOCOL_CURATOR_RW:
			n = snprintf(out, outsize, "_c_%s-%s", uuid,
						 excl ? "__WRIT__" : "__READ__");
			break;
		case ZKR_PROTOCOL_CURATOR_MUTEX:
			n = snprintf(out, outsize, "_c_%s-lock-", uuid);
			break;
		case ZKR_PROTOCOL_KAZOO:
			{
				char		hex[ZKR_UUID_LEN + 1];

				uuid_hex(uuid, hex);
				n = snprintf(out, outsize, "%s%s", hex,
							 excl ? "__lock__" : "__rlock__");
				break;
			}
		default:
			return 0;
	}
	if (n < 0 || (size_t) n >= outsize)
		return 0;
	return (size_t) n;
}

bool
zkr_has_prefix(const char *name, const char *prefix)
{
	return strncmp(name, prefix, strlen(prefix)) == 0;
}

static bool
is_own(const char *name, const char *const *own, int n_own)
{
	for (int i = 0; i < n_own; i++)
		if (strcmp(name, own[i]) == 0)
			return true;
	return false;
}

ZkrDecision
zkr_decide(const ZkrContender *c, int n, const char *self, ZkrMode mode,
		   const char *const *own, int n_own)
{
	ZkrDecision d = {false, false, -1, -1, 0};
	uint32_t	best = 0;

	for (int i = 0; i < n; i++)
	{
		if (strcmp(c[i].name, self) == 0)
		{
			d.found = true;
			d.self = i;
			break;
		}
	}
	if (!d.found)
		return d;

	/*
	 * Judge every contender against self, not by its place in the array.
	 * Serial-number order is not transitive once sequence numbers spread
	 * over more than 2^31 (only hand-made names can do that), so a sorted
	 * array may differ between two listings; but for any two contenders
	 * exactly one precedes the other, so two of them can never both find
	 * nothing ahead and hold an exclusive lock together.
	 *
	 * The node to watch is the conflicting one closest below self: the
	 * greatest lower one in an ordinary queue.
	 */
	for (int i = 0; i < n; i++)
	{
		uint32_t	distance;

		if (i == d.self || zkr_contender_cmp(&c[i], &c[d.self]) >= 0)
			continue;
		if (is_own(c[i].name, own, n_own))
			continue;
		if (mode == ZKR_MODE_SHARED && c[i].mode != ZKR_MODE_EXCLUSIVE)
			continue;
		d.blockers++;
		distance = c[d.self].seq - c[i].seq;
		if (d.predecessor < 0 || distance < best ||
			(distance == best &&
			 strcmp(c[i].name, c[d.predecessor].name) > 0))
		{
			d.predecessor = i;
			best = distance;
		}
	}
	d.held = (d.blockers == 0);
	return d;
}

int
zkr_foreign_exclusive_between(const ZkrContender *c, int n, const char *held,
							  const char *self, const char *const *own,
							  int n_own)
{
	int			h = -1;
	int			me = -1;

	for (int i = 0; i < n; i++)
	{
		if (strcmp(c[i].name, held) == 0)
			h = i;
		else if (strcmp(c[i].name, self) == 0)
			me = i;
	}
	if (h < 0 || me < 0 || zkr_contender_cmp(&c[h], &c[me]) >= 0)
		return -1;
	for (int i = 0; i < n; i++)
	{
		if (i == h || i == me || c[i].mode != ZKR_MODE_EXCLUSIVE ||
			is_own(c[i].name, own, n_own))
			continue;
		if (zkr_contender_cmp(&c[h], &c[i]) < 0 &&
			zkr_contender_cmp(&c[i], &c[me]) < 0)
			return i;
	}
	return -1;
}

/*
 * One pass: what is ahead of entry i is summed up by whether every node
 * (every exclusive node) ahead is a zklock node of one single session, and
 * which.
 */
/*
 * One pass.  What lies ahead of entry i is summed up by two runs: the
 * longest tail of the nodes ahead that are zklock nodes of one session
 * (those never conflict with a zklock node of that session), and the same
 * among the exclusive nodes ahead.  The nearest conflicting node ahead is
 * then the last node before the run, if the run is i's own, else the
 * last node.
 */
void
zkr_mark_holding(ZkrQueued *q, int n)
{
	int			run_start = 0;	/* tail of nodes ahead: [run_start, i) */
	bool		run_valid = false;	/* ... all zklock, one session */
	int64_t		run_session = 0;
	int			last_excl = -1; /* the last exclusive node ahead */
	int			erun_before = -1;	/* exclusive node before the exclusive
									 * run */
	bool		erun_valid = false;
	int64_t		erun_session = 0;

	for (int i = 0; i < n; i++)
	{
		int64_t		sid = q[i].session;
		bool		own_run = q[i].zklock && run_valid && run_session == sid;
		bool		own_erun = q[i].zklock && erun_valid && erun_session == sid;

		if (q[i].mode == ZKR_MODE_EXCLUSIVE)
			q[i].waits_for = own_run ? run_start - 1 : i - 1;
		else
			q[i].waits_for = own_erun ? erun_before : last_excl;
		q[i].holding = (q[i].waits_for < 0);

		/* fold entry i into the runs ahead of entry i + 1 */
		if (!q[i].zklock)
			run_valid = false;
		else if (!own_run)
		{
			run_start = i;
			run_valid = true;
			run_session = sid;
		}
		if (q[i].mode == ZKR_MODE_EXCLUSIVE)
		{
			if (!q[i].zklock)
				erun_valid = false;
			else if (!own_erun)
			{
				erun_before = last_excl;
				erun_valid = true;
				erun_session = sid;
			}
			last_excl = i;
		}
	}
}

const char *
zkr_mode_name(ZkrMode mode)
{
	switch (mode)
	{
		case ZKR_MODE_EXCLUSIVE:
			return "exclusive";
		case ZKR_MODE_SHARED:
			return "shared";
		case ZKR_MODE_SEMAPHORE:
			return "semaphore";
		default:
			return "none";
	}
}

/* ----------------------------------------------------------------
 * Counting semaphores
 * ----------------------------------------------------------------
 */

static size_t
fitted(int n, size_t outsize)
{
	return (n < 0 || (size_t) n >= outsize) ? 0 : (size_t) n;
}

size_t
zkr_semaphore_parent(ZkrProtocol protocol, ZkrSemPart part, const char *path,
					 char *out, size_t outsize)
{
	if (protocol == ZKR_PROTOCOL_KAZOO)
		return fitted(part == ZKR_SEM_MUTEX ?
					  snprintf(out, outsize, "%s-__lock__", path) :
					  snprintf(out, outsize, "%s", path), outsize);
	return fitted(snprintf(out, outsize, "%s/%s", path,
						   part == ZKR_SEM_MUTEX ? "locks" : "leases"),
				  outsize);
}

size_t
zkr_semaphore_prefix(ZkrProtocol protocol, ZkrSemPart part, const char *uuid,
					 char *out, size_t outsize)
{
	if (protocol == ZKR_PROTOCOL_KAZOO)
	{
		char		hex[ZKR_UUID_LEN + 1];

		uuid_hex(uuid, hex);
		return fitted(snprintf(out, outsize, "%s%s", hex,
							   part == ZKR_SEM_MUTEX ? "__lock__" : ""),
					  outsize);
	}
	return fitted(snprintf(out, outsize, "_c_%s-%s", uuid,
						   part == ZKR_SEM_MUTEX ? "lock-" : "lease-"),
				  outsize);
}

bool
zkr_semaphore_counts_after_create(ZkrProtocol protocol)
{
	return protocol != ZKR_PROTOCOL_KAZOO;
}

ZkrSemDecision
zkr_semaphore_decide(const char *const *children, int n, const char *self,
					 int max_holders)
{
	bool		found = false;

	for (int i = 0; i < n && !found; i++)
		found = strcmp(children[i], self) == 0;
	if (!found)
		return ZKR_SEM_MISSING;
	return n <= max_holders ? ZKR_SEM_HELD : ZKR_SEM_WAIT;
}

bool
zkr_semaphore_has_room(int n_children, int max_holders)
{
	return n_children < max_holders;
}

static bool
py_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
		c == '\v' || c == '\f';
}

bool
zkr_parse_max_leases(const char *data, int len, int64_t *value)
{
	int			i = 0;
	int			end = len;
	bool		negative = false;
	bool		overflow = false;
	bool		digit_before = false;
	uint64_t	v = 0;

	while (i < end && py_space(data[i]))
		i++;
	while (end > i && py_space(data[end - 1]))
		end--;
	if (i < end && (data[i] == '+' || data[i] == '-'))
		negative = data[i++] == '-';
	if (i >= end)
		return false;
	for (; i < end; i++)
	{
		char		c = data[i];

		if (c == '_')
		{
			/* one underscore, between two digits */
			if (!digit_before || i + 1 >= end ||
				data[i + 1] < '0' || data[i + 1] > '9')
				return false;
			digit_before = false;
			continue;
		}
		if (c < '0' || c > '9')
			return false;
		digit_before = true;
		if (v > (UINT64_MAX - 9) / 10)
			overflow = true;
		else
			v = v * 10 + (uint64_t) (c - '0');
	}
	if (overflow || v > (uint64_t) INT64_MAX)
		*value = negative ? INT64_MIN : INT64_MAX;
	else
		*value = negative ? -(int64_t) v : (int64_t) v;
	return true;
}
