/*-------------------------------------------------------------------------
 *
 * checks.c
 *	  Property checks of src/recipe/recipe.c on arbitrary bytes (see checks.h).
 *
 * The expected answers come from small, deliberately naive models written
 * here from the SPEC (a regular-expression-style matcher for child names,
 * a byte-by-byte encoder, a percent-decoder), not from recipe.c's code.
 *
 * Input format of zkf_check_queue (missing bytes read as zero):
 *
 *	 byte  0     flags: bit 0 self is shared (else exclusive);
 *	             bits 1-2 protocol of self's name (0 curator-rw,
 *	             1 curator-mutex, 2 kazoo, 3 curator-rw);
 *	             bit 3 self is one of the listed names (a foreign node,
 *	             possibly no contender) instead of a name zklock builds;
 *	             bit 4 the list is made of 6-byte records (below)
 *	             instead of '\n'-separated names
 *	 byte  1     where self goes in the list / which listed name is self
 *	 bytes 2-5   self's sequence number (little-endian)
 *	 byte  6     own-node mask: listed name i is one of this backend's
 *	             other nodes if bit (i % 8) is set
 *	 bytes 7-22  the 16 bytes of self's UUID
 *	 bytes 23-   the child list
 *
 * A 6-byte record is: kind, sequence (4 bytes, little-endian), prefix.
 * kind % 6 picks the marker (the five recipe markers, or "lease-"),
 * (kind / 6) % 6 the form of the number ("%010d" as ZooKeeper prints it,
 * "%010u", nine digits, eleven digits, '-' and nine, '-' and ten), and a
 * non-zero prefix byte puts "p<hex>-" in front.
 *
 * test/fuzz/checks.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/recipe.h"
#include "checks.h"

#define MAX_NAMES 512

#define HEADER_BYTES 23
#define RECORD_BYTES 6

/* ----------------------------------------------------------------
 * resource-name encoding
 * ----------------------------------------------------------------
 */

static bool
model_safe(unsigned char c)
{
	return strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
				  "0123456789._-", c) != NULL && c != '\0';
}

/*
 * The SPEC's encoding, written naively: split on '/', reject empty
 * levels, encode "." and ".." entirely, other unsafe bytes as %XX.
 * out must have room for 3 * size + 1 bytes.
 */
static ZkrEncodeResult
model_encode(const uint8_t *in, size_t size, char *out)
{
	size_t		o = 0;
	size_t		start = 0;

	if (size == 0)
		return ZKR_ENCODE_EMPTY;
	if (size > ZKR_MAX_RESOURCE_BYTES)
		return ZKR_ENCODE_TOO_LONG;
	for (;;)
	{
		size_t		end = start;
		bool		all;

		while (end < size && in[end] != '/')
			end++;
		if (end == start)
			return ZKR_ENCODE_EMPTY_LEVEL;
		all = (end - start == 1 && memcmp(in + start, ".", 1) == 0) ||
			(end - start == 2 && memcmp(in + start, "..", 2) == 0);
		if (start > 0)
			out[o++] = '/';
		for (size_t i = start; i < end; i++)
		{
			if (!all && model_safe(in[i]))
				out[o++] = (char) in[i];
			else
				o += (size_t) sprintf(out + o, "%%%02X", in[i]);
		}
		if (end == size)
			break;
		start = end + 1;
	}
	out[o] = '\0';
	return ZKR_ENCODE_OK;
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;					/* lower case is not what we write */
}

/* Properties of an encoded path that do not need the model. */
static const char *
check_encoded_shape(const uint8_t *in, size_t size, const char *out)
{
	size_t		len = strlen(out);
	uint8_t    *dec;
	size_t		d = 0;
	const char *why = NULL;

	if (len == 0)
		return "encode: OK with an empty output";
	if (out[0] == '/')
		return "encode: output starts with '/' (would be absolute)";
	if (out[len - 1] == '/')
		return "encode: output ends with '/'";
	for (size_t i = 0; i < len; i++)
		if (!(model_safe((unsigned char) out[i]) || out[i] == '%' ||
			  out[i] == '/'))
			return "encode: output byte outside [A-Za-z0-9._%/-]";

	/* every level: not empty, not "." or ".." */
	for (size_t s = 0; s <= len;)
	{
		size_t		e = s;

		while (e < len && out[e] != '/')
			e++;
		if (e == s)
			return "encode: output has an empty level";
		if ((e - s == 1 && out[s] == '.') ||
			(e - s == 2 && out[s] == '.' && out[s + 1] == '.'))
			return "encode: output has a \".\" or \"..\" level";
		s = e + 1;
	}

	/* percent-decoding gives the input back */
	dec = malloc(len + 1);
	if (dec == NULL)
		abort();
	for (size_t i = 0; i < len && why == NULL; i++)
	{
		if (out[i] == '%')
		{
			int			hi = i + 2 < len + 1 ? hexval(out[i + 1]) : -1;
			int			lo = hi >= 0 ? hexval(out[i + 2]) : -1;

			if (hi < 0 || lo < 0)
				why = "encode: '%' not followed by two upper-case hex digits";
			else
			{
				dec[d++] = (uint8_t) (hi * 16 + lo);
				i += 2;
			}
		}
		else
			dec[d++] = (uint8_t) out[i];
	}
	if (why == NULL && (d != size || memcmp(dec, in, size) != 0))
		why = "encode: output does not decode back to the input";
	free(dec);
	return why;
}

const char *
zkf_check_encode(const uint8_t *data, size_t size)
{
	/* the buffer functions.c passes, allocated to its exact size */
	const size_t full = ZKR_MAX_ENCODED_BYTES + 1;
	char	   *model = malloc(3 * (size > 0 ? size : 1) + 1);
	char	   *out = malloc(full);
	ZkrEncodeResult want;
	ZkrEncodeResult got;
	const char *why = NULL;
	size_t		needed;
	uint32_t	h = 2166136261u;

	if (model == NULL || out == NULL)
		abort();
	if (size > ZKF_MAX_INPUT)
		size = ZKF_MAX_INPUT;

	want = model_encode(data, size, model);
	got = zkr_encode_resource((const char *) data, size, out, full);
	if (got != want)
	{
		why = got == ZKR_ENCODE_OK ? "encode: accepted a name the SPEC rejects" :
			want == ZKR_ENCODE_OK ? "encode: rejected a valid name" :
			"encode: wrong error code";
		goto done;
	}

	/* smaller buffers: the input's own error or NO_ROOM, never a write
	 * past the end */
	for (size_t i = 0; i < size; i++)
		h = (h ^ data[i]) * 16777619u;
	needed = (want == ZKR_ENCODE_OK) ? strlen(out) + 1 : 3 * size + 1;
	{
		size_t		sizes[] = {0, 1, 2, 3, 4, needed - 1, needed - 2,
		needed - 3, h % (needed + 1), (h >> 11) % (needed + 1), needed};

		for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		{
			size_t		s = sizes[k];
			char	   *small;
			ZkrEncodeResult r;

			if (s > needed)		/* needed - 2 etc. underflowed */
				continue;
			small = malloc(s);	/* malloc(0): any write is an error */
			if (small == NULL && s > 0)
				abort();
			r = zkr_encode_resource((const char *) data, size, small, s);
			if (want == ZKR_ENCODE_OK && s == needed)
			{
				if (r != ZKR_ENCODE_OK)
					why = "encode: failed with a buffer of exactly the needed size";
				else if (strcmp(small, out) != 0)
					why = "encode: output depends on the buffer size";
			}
			else if (want == ZKR_ENCODE_OK && r != ZKR_ENCODE_NO_ROOM)
				why = "encode: a too small buffer did not give NO_ROOM";
			else if (want != ZKR_ENCODE_OK && r != want &&
					 r != ZKR_ENCODE_NO_ROOM)
				why = "encode: a small buffer changed the error code";
			free(small);
			if (why)
				goto done;
		}
	}

	if (want == ZKR_ENCODE_OK)
	{
		if (strcmp(out, model) != 0)
			why = "encode: output differs from the SPEC's encoding";
		else
			why = check_encoded_shape(data, size, out);
	}

done:
	free(model);
	free(out);
	return why;
}

/* ----------------------------------------------------------------
 * child names, ordering and decisions
 * ----------------------------------------------------------------
 */

static const struct
{
	const char *marker;
	ZkrMode		mode;
}			model_markers[] =
{
	{"lock-", ZKR_MODE_EXCLUSIVE},
	{"__lock__", ZKR_MODE_EXCLUSIVE},
	{"__rlock__", ZKR_MODE_SHARED},
	{"__WRIT__", ZKR_MODE_EXCLUSIVE},
	{"__READ__", ZKR_MODE_SHARED},
};
#define N_MARKERS (sizeof(model_markers) / sizeof(model_markers[0]))

typedef struct ModelChild
{
	bool		match;
	ZkrMode		mode;
	uint32_t	seq;
	size_t		prefix_len;
	size_t		marker_len;
} ModelChild;

static bool
digits(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/*
 * ^(.*)(lock-|__lock__|__rlock__|__WRIT__|__READ__)([0-9]{10}|-[0-9]{9,10})$
 * with the greedy (.*) (the longest prefix wins), restricted to values
 * ZooKeeper's 32-bit counter can print (-2^31 .. 2^32-1, read as a
 * 32-bit serial number).
 */
static ModelChild
model_parse(const char *name)
{
	ModelChild best = {false, ZKR_MODE_NONE, 0, 0, 0};
	size_t		len = strlen(name);

	for (size_t m = 0; m < N_MARKERS; m++)
	{
		size_t		ml = strlen(model_markers[m].marker);

		for (int form = 0; form < 3; form++)
		{
			size_t		w = form == 0 ? 10 : form == 1 ? 10 : 11;
			const char *seq;
			long long	v = 0;
			bool		neg;

			if (len < ml + w)
				continue;
			seq = name + len - w;
			neg = form > 0;
			if (neg ? (seq[0] != '-' || !digits(seq + 1, w - 1)) :
				!digits(seq, w))
				continue;
			if (memcmp(seq - ml, model_markers[m].marker, ml) != 0)
				continue;
			for (size_t i = neg ? 1 : 0; i < w; i++)
				v = v * 10 + (seq[i] - '0');
			if (neg)
				v = -v;
			if (v < -2147483648LL || v > 4294967295LL)
				continue;
			if (!best.match || len - w - ml > best.prefix_len)
			{
				best.match = true;
				best.mode = model_markers[m].mode;
				best.seq = (uint32_t) (int64_t) v;
				best.prefix_len = len - w - ml;
				best.marker_len = ml;
			}
		}
	}
	return best;
}

/* RFC 1982, with the documented tie-break for distance exactly 2^31 */
static int
model_seq_cmp(uint32_t a, uint32_t b)
{
	uint32_t	d = a - b;

	if (d == 0)
		return 0;
	if (d == 0x80000000u)
		return a < b ? -1 : 1;
	return (int32_t) d > 0 ? 1 : -1;
}

static int
sign(int v)
{
	return (v > 0) - (v < 0);
}

static int
u32_cmp(const void *a, const void *b)
{
	uint32_t	x = *(const uint32_t *) a;
	uint32_t	y = *(const uint32_t *) b;

	return (x > y) - (x < y);
}

/*
 * If all sequence numbers lie within less than half the circle, the RFC
 * 1982 order is a total order on them; return true and the smallest one
 * in *anchor.  (Wider spreads cannot come from one parent's counter.)
 */
static bool
within_half_circle(const ZkrContender *c, int n, uint32_t *anchor)
{
	uint32_t   *s;
	uint64_t	maxgap;
	int			at;

	*anchor = n > 0 ? c[0].seq : 0;
	if (n <= 1)
		return true;
	s = malloc(sizeof(uint32_t) * (size_t) n);
	if (s == NULL)
		abort();
	for (int i = 0; i < n; i++)
		s[i] = c[i].seq;
	qsort(s, (size_t) n, sizeof(uint32_t), u32_cmp);
	/* the gap across the wrap, from the largest back to the smallest */
	maxgap = (uint64_t) s[0] + 0x100000000ull - s[n - 1];
	at = 0;
	for (int i = 1; i < n; i++)
		if ((uint64_t) (s[i] - s[i - 1]) > maxgap)
		{
			maxgap = s[i] - s[i - 1];
			at = i;
		}
	*anchor = s[at];
	free(s);
	return maxgap > 0x80000000ull;
}

static bool
in_list(const char *name, const char *const *list, int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(name, list[i]) == 0)
			return true;
	return false;
}

static bool
conflicts(ZkrMode self_mode, ZkrMode other)
{
	return self_mode != ZKR_MODE_SHARED || other == ZKR_MODE_EXCLUSIVE;
}

static const char *
check_decision(const ZkrContender *c, int n, const char *self, ZkrMode mode,
			   const char *const *own, int n_own, ZkrDecision *dout)
{
	ZkrDecision d = zkr_decide(c, n, self, mode, own, n_own);
	int			want_self = -1;
	int			blockers = 0;
	int			last = -1;

	*dout = d;
	for (int i = 0; i < n; i++)
		if (strcmp(c[i].name, self) == 0)
		{
			want_self = i;
			break;
		}
	if (want_self < 0)
	{
		if (d.found || d.held || d.self != -1 || d.predecessor != -1 ||
			d.blockers != 0)
			return "decide: self is no contender, yet found/held/indices set";
		return NULL;
	}
	if (!d.found || d.self != want_self)
		return "decide: self not found at its index";

	/*
	 * Every contender is judged against self (zkr_contender_cmp), not by
	 * its index: the node to watch is the conflicting one closest below
	 * self.  In an ordinary queue (sequence numbers within half the 32-bit
	 * circle) that is the greatest conflicting one ahead in the sorted
	 * array.
	 */
	{
		uint32_t	best = 0;

		for (int i = 0; i < n; i++)
		{
			uint32_t	dist;

			if (i == want_self || zkr_contender_cmp(&c[i], &c[want_self]) >= 0 ||
				in_list(c[i].name, own, n_own) || !conflicts(mode, c[i].mode))
				continue;
			blockers++;
			dist = c[want_self].seq - c[i].seq;
			if (last < 0 || dist < best ||
				(dist == best && strcmp(c[i].name, c[last].name) > 0))
			{
				last = i;
				best = dist;
			}
		}
	}
	if (d.blockers != blockers)
		return "decide: wrong number of blockers";
	if (d.held != (blockers == 0))
		return "decide: held although something conflicting is ahead (or not held with nothing ahead)";
	if (d.held)
		return d.predecessor == -1 ? NULL :
			"decide: held but a predecessor is named";
	if (d.predecessor < 0 || d.predecessor >= n || d.predecessor == d.self ||
		zkr_contender_cmp(&c[d.predecessor], &c[d.self]) >= 0)
		return "decide: predecessor out of range or not ahead of self";
	if (in_list(c[d.predecessor].name, own, n_own))
		return "decide: predecessor is one of our own nodes";
	if (!conflicts(mode, c[d.predecessor].mode))
		return "decide: predecessor does not conflict (shared waits for shared)";
	if (d.predecessor != last)
		return "decide: predecessor is not the conflicting one closest ahead";
	return NULL;
}

typedef struct Input
{
	const uint8_t *p;
	size_t		n;
} Input;

static uint8_t
byte_at(Input in, size_t i)
{
	return i < in.n ? in.p[i] : 0;
}

static char *
dup_bytes(const uint8_t *p, size_t n)
{
	char	   *s = malloc(n + 1);

	if (s == NULL)
		abort();
	memcpy(s, p, n);
	s[n] = '\0';				/* an embedded NUL just ends the name early */
	return s;
}

static char *
record_name(const uint8_t *r)
{
	static const char *const marks[] = {"lock-", "__lock__", "__rlock__",
	"__WRIT__", "__READ__", "lease-"};
	uint32_t	seq = (uint32_t) r[1] | (uint32_t) r[2] << 8 |
		(uint32_t) r[3] << 16 | (uint32_t) r[4] << 24;
	char		num[32];
	char		pre[8] = "";
	char	   *s;

	switch ((r[0] / 6) % 6)
	{
		case 0:
			snprintf(num, sizeof(num), "%010d", (int) (int32_t) seq);
			break;
		case 1:
			snprintf(num, sizeof(num), "%010u", (unsigned) seq);
			break;
		case 2:
			snprintf(num, sizeof(num), "%09u", (unsigned) (seq % 1000000000u));
			break;
		case 3:
			snprintf(num, sizeof(num), "%011u", (unsigned) seq);
			break;
		case 4:
			snprintf(num, sizeof(num), "-%09u", (unsigned) (seq % 1000000000u));
			break;
		default:
			snprintf(num, sizeof(num), "-%010u", (unsigned) seq);
			break;
	}
	if (r[5] != 0)
		snprintf(pre, sizeof(pre), "p%02x-", r[5]);
	s = malloc(strlen(pre) + strlen(marks[r[0] % 6]) + strlen(num) + 1);
	if (s == NULL)
		abort();
	sprintf(s, "%s%s%s", pre, marks[r[0] % 6], num);
	return s;
}

const char *
zkf_check_queue(const uint8_t *data, size_t size)
{
	Input		in = {data, size > ZKF_MAX_INPUT ? ZKF_MAX_INPUT : size};
	uint8_t		flags = byte_at(in, 0);
	ZkrMode		mode = (flags & 1) ? ZKR_MODE_SHARED : ZKR_MODE_EXCLUSIVE;
	ZkrProtocol protocol = (ZkrProtocol) ((flags >> 1) & 3);
	bool		foreign_self = (flags & 8) != 0;
	bool		records = (flags & 16) != 0;
	uint32_t	self_seq;
	uint8_t		own_mask = byte_at(in, 6);
	uint8_t		uuid_bytes[16];
	char		uuid[ZKR_UUID_LEN + 1];
	char	   *names[MAX_NAMES + 1];
	int			n = 0;
	char	   *self = NULL;
	const char *own[MAX_NAMES + 1];
	int			n_own = 0;
	ZkrContender *cs = NULL;
	int			k;
	const char *why = NULL;
	uint32_t	anchor;

	self_seq = (uint32_t) byte_at(in, 2) | (uint32_t) byte_at(in, 3) << 8 |
		(uint32_t) byte_at(in, 4) << 16 | (uint32_t) byte_at(in, 5) << 24;
	for (int i = 0; i < 16; i++)
		uuid_bytes[i] = byte_at(in, 7 + (size_t) i);
	if (protocol > ZKR_PROTOCOL_KAZOO)
		protocol = ZKR_PROTOCOL_CURATOR_RW;

	/* the child list */
	if (in.n > HEADER_BYTES)
	{
		const uint8_t *p = in.p + HEADER_BYTES;
		size_t		left = in.n - HEADER_BYTES;

		if (records)
			for (; left >= RECORD_BYTES && n < MAX_NAMES;
				 p += RECORD_BYTES, left -= RECORD_BYTES)
				names[n++] = record_name(p);
		else
			while (n < MAX_NAMES)
			{
				const uint8_t *nl = memchr(p, '\n', left);
				size_t		len = nl ? (size_t) (nl - p) : left;

				names[n++] = dup_bytes(p, len);
				if (nl == NULL)
					break;
				p += len + 1;
				left -= len + 1;
			}
	}

	/* our other nodes under this parent */
	for (int i = 0; i < n; i++)
		if (own_mask & (1u << (i % 8)))
			own[n_own++] = names[i];

	/* self: a node zklock names itself, or one of the listed names */
	if (foreign_self)
	{
		self = dup_bytes((const uint8_t *) (n > 0 ? names[byte_at(in, 1) % n] : ""),
						 n > 0 ? strlen(names[byte_at(in, 1) % n]) : 0);
	}
	else
	{
		char		prefix[ZKR_MAX_PREFIX_BYTES];
		char		small[8];
		size_t		plen;
		ZkrContender c;
		ModelChild	mc;
		int			pos = byte_at(in, 1) % (n + 1);

		zkr_format_uuid(uuid_bytes, uuid);
		if (strlen(uuid) != ZKR_UUID_LEN)
		{
			why = "uuid: not 36 characters";
			goto done;
		}
		if (!zkr_protocol_has_mode(protocol, mode))
		{
			if (zkr_protocol_prefix(protocol, mode, uuid, prefix,
									sizeof(prefix)) != 0)
			{
				why = "prefix: built for a mode the protocol does not have";
				goto done;
			}
			protocol = ZKR_PROTOCOL_CURATOR_RW;
		}
		plen = zkr_protocol_prefix(protocol, mode, uuid, prefix, sizeof(prefix));
		if (plen == 0 || plen != strlen(prefix))
		{
			why = "prefix: not built";
			goto done;
		}
		/* a too small buffer gives 0, never a truncated prefix */
		if (zkr_protocol_prefix(protocol, mode, uuid, small, sizeof(small)) != 0)
		{
			why = "prefix: a truncated prefix was returned";
			goto done;
		}
		self = malloc(plen + 12);
		if (self == NULL)
			abort();
		/* what ZooKeeper appends: "%010d" of the parent's counter */
		sprintf(self, "%s%010d", prefix, (int) (int32_t) self_seq);
		if (!zkr_has_prefix(self, prefix))
		{
			why = "prefix: our node does not carry its own prefix";
			goto done;
		}
		mc = model_parse(self);
		if (!zkr_parse_child(self, &c) || !mc.match)
		{
			why = "prefix: our own node is not recognised as a contender";
			goto done;
		}
		if (c.mode != mode || c.seq != self_seq ||
			c.prefix_len + mc.marker_len != plen)
		{
			why = "prefix: our own node parses to another mode, sequence or prefix";
			goto done;
		}
		memmove(names + pos + 1, names + pos, sizeof(char *) * (size_t) (n - pos));
		names[pos] = self;
		self = NULL;
		n++;
	}

	/* every name, as the SPEC's expression reads it */
	for (int i = 0; i < n; i++)
	{
		ZkrContender c;
		ModelChild	mc = model_parse(names[i]);
		bool		r;

		memset(&c, 0x5A, sizeof(c));
		r = zkr_parse_child(names[i], &c);
		if (r != mc.match)
			why = r ? "parse: a non-contender was recognised" :
				"parse: a contender was not recognised";
		else if (c.name != names[i])
			why = "parse: name does not point to the caller's string";
		else if (!r && c.mode != ZKR_MODE_NONE)
			why = "parse: a non-contender has a mode";
		else if (r && (c.mode != mc.mode || c.seq != mc.seq ||
					   c.prefix_len != mc.prefix_len))
			why = "parse: wrong mode, sequence or prefix length";
		if (why)
			goto done;
	}

	cs = malloc(sizeof(ZkrContender) * (size_t) (n > 0 ? n : 1));
	if (cs == NULL)
		abort();
	k = zkr_collect((const char *const *) names, n, cs);

	/* exactly the contenders, each once */
	{
		int			want = 0;
		bool	   *seen = calloc((size_t) (n > 0 ? n : 1), sizeof(bool));

		if (seen == NULL)
			abort();
		for (int i = 0; i < n; i++)
			if (model_parse(names[i]).match)
				want++;
		if (k != want)
			why = "collect: wrong number of contenders";
		for (int j = 0; j < k && why == NULL; j++)
		{
			int			at = -1;
			ModelChild	mc;

			for (int i = 0; i < n; i++)
				if (cs[j].name == names[i])
					at = i;
			if (at < 0)
				why = "collect: a contender that is not in the list";
			else if (seen[at])
				why = "collect: a contender appears twice";
			else
			{
				seen[at] = true;
				mc = model_parse(names[at]);
				if (!mc.match || cs[j].mode != mc.mode || cs[j].seq != mc.seq ||
					cs[j].prefix_len != mc.prefix_len)
					why = "collect: a contender with wrong fields";
			}
		}
		free(seen);
		if (why)
			goto done;
	}

	/* the comparison: reflexive, antisymmetric, RFC 1982 */
	for (int i = 0; i < k; i++)
	{
		int			lim = k <= 64 ? k : 8;

		if (zkr_contender_cmp(&cs[i], &cs[i]) != 0 ||
			zkr_seq_cmp(cs[i].seq, cs[i].seq) != 0)
		{
			why = "cmp: not reflexive";
			goto done;
		}
		for (int t = 0; t < lim; t++)
		{
			int			j = k <= 64 ? t : (int) (((unsigned) i * 7u + (unsigned) t * 13u) % (unsigned) k);
			int			a = zkr_seq_cmp(cs[i].seq, cs[j].seq);
			int			b = zkr_seq_cmp(cs[j].seq, cs[i].seq);
			int			ca = zkr_contender_cmp(&cs[i], &cs[j]);
			int			cb = zkr_contender_cmp(&cs[j], &cs[i]);

			if (sign(a) != -sign(b) || sign(ca) != -sign(cb))
				why = "cmp: not antisymmetric";
			else if (sign(a) != model_seq_cmp(cs[i].seq, cs[j].seq))
				why = "cmp: not the RFC 1982 order";
			else if (sign(ca) != (a != 0 ? sign(a) :
								  sign(strcmp(cs[i].name, cs[j].name))))
				why = "cmp: ties are not broken by name";
			if (why)
				goto done;
		}
	}

	/* sorted, where the serial order is a total order */
	if (within_half_circle(cs, k, &anchor))
		for (int i = 0; i + 1 < k; i++)
		{
			uint32_t	x = cs[i].seq - anchor;
			uint32_t	y = cs[i + 1].seq - anchor;

			if (x > y || (x == y && strcmp(cs[i].name, cs[i + 1].name) > 0))
			{
				why = "sort: contenders out of order";
				goto done;
			}
			if (zkr_contender_cmp(&cs[i], &cs[i + 1]) > 0)
			{
				why = "sort: a contender compares greater than the next";
				goto done;
			}
		}

	/* the decision, for the given mode and the other one */
	{
		const char *me = foreign_self ? self : NULL;
		ZkrDecision dx;
		ZkrDecision ds;

		if (me == NULL)
		{
			/* the node zklock built is the one inserted at pos */
			me = names[byte_at(in, 1) % n];
		}
		why = check_decision(cs, k, me, mode, own, n_own,
							 mode == ZKR_MODE_EXCLUSIVE ? &dx : &ds);
		if (why == NULL)
			why = check_decision(cs, k, me,
								 mode == ZKR_MODE_EXCLUSIVE ? ZKR_MODE_SHARED :
								 ZKR_MODE_EXCLUSIVE, own, n_own,
								 mode == ZKR_MODE_EXCLUSIVE ? &ds : &dx);
		if (why == NULL && (ds.blockers > dx.blockers || (dx.held && !ds.held)))
			why = "decide: shared blocked where exclusive would not be";

		/*
		 * The same children listed in another order (ZooKeeper promises
		 * none) must give the same decision, even where serial order is
		 * not transitive (sequence numbers spread over more than half the
		 * circle): zkr_decide judges each contender against self.
		 */
		if (why == NULL)
		{
			const char **rev = malloc(sizeof(char *) * (size_t) (n > 0 ? n : 1));
			ZkrContender *cs2 = malloc(sizeof(ZkrContender) * (size_t) (n > 0 ? n : 1));
			ZkrDecision d1 = mode == ZKR_MODE_EXCLUSIVE ? dx : ds;
			ZkrDecision d2;

			if (rev == NULL || cs2 == NULL)
				abort();
			for (int i = 0; i < n; i++)
				rev[i] = names[(n - 1 - i + byte_at(in, 1)) % n];
			d2 = zkr_decide(cs2, zkr_collect(rev, n, cs2), me, mode, own, n_own);
			if (d1.found != d2.found || d1.held != d2.held ||
				d1.blockers != d2.blockers ||
				(d1.predecessor >= 0 &&
				 strcmp(cs[d1.predecessor].name, cs2[d2.predecessor].name) != 0))
				why = "decide: the decision depends on the order of the listing";
			free(rev);
			free(cs2);
		}
	}

done:
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(self);
	free(cs);
	return why;
}
