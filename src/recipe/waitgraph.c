/*-------------------------------------------------------------------------
 *
 * waitgraph.c
 *	  Pure logic of zklock's deadlock detection (see waitgraph.h): blockers
 *	  of a waiting node, wait records, cycle search and victim choice.
 *
 * No PostgreSQL or ZooKeeper calls here: deadlock.c gathers what the
 * ensemble and the lock manager say and hands it to these functions, and
 * test/unit exercises them without any server.
 *
 * src/recipe/waitgraph.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/waitgraph.h"

int
zkw_blockers(const ZkrContender *c, const int64_t *owners, int n,
			 const char *self, ZkrMode mode, int64_t self_owner, int *out)
{
	int			me = -1;
	int			k = 0;

	for (int i = 0; i < n; i++)
		if (strcmp(c[i].name, self) == 0)
			me = i;
	if (me < 0)
		return -1;
	for (int i = 0; i < n; i++)
	{
		if (i == me || zkr_contender_cmp(&c[i], &c[me]) >= 0)
			continue;
		if (mode == ZKR_MODE_SHARED && c[i].mode != ZKR_MODE_EXCLUSIVE)
			continue;
		if (owners[i] == self_owner)
			continue;			/* our own node never blocks us */
		out[k++] = i;
	}
	return k;
}

int
zkw_holders_ahead(const ZkrContender *c, int n, const char *self, int *out)
{
	int			me = -1;
	int			first = -1;
	int			first_x = -1;
	int			k = 0;

	for (int i = 0; i < n; i++)
	{
		if (strcmp(c[i].name, self) == 0)
			me = i;
		if (first < 0 || zkr_contender_cmp(&c[i], &c[first]) < 0)
			first = i;
		if (c[i].mode == ZKR_MODE_EXCLUSIVE &&
			(first_x < 0 || zkr_contender_cmp(&c[i], &c[first_x]) < 0))
			first_x = i;
	}
	if (me < 0)
		return -1;
	for (int i = 0; i < n; i++)
	{
		if (i == me || zkr_contender_cmp(&c[i], &c[me]) >= 0)
			continue;
		if (i == first ||
			(c[i].mode != ZKR_MODE_EXCLUSIVE &&
			 (first_x < 0 || zkr_contender_cmp(&c[i], &c[first_x]) < 0)))
			out[k++] = i;
	}
	return k;
}

bool
zkw_same_instance(const ZkwBackend *a, const ZkwBackend *b)
{
	/* a name of 1.5 meets only another of 1.5 (see waitgraph.h) */
	if (a->sysid != b->sysid || a->has_start != b->has_start)
		return false;
	return !a->has_start || a->start == b->start;
}

bool
zkw_same_backend(const ZkwBackend *a, const ZkwBackend *b)
{
	return a->pid == b->pid && zkw_same_instance(a, b);
}

#define RECORD_TAG "zklock-wait "

size_t
zkw_format_record(const ZkwRecord *r, char *out, size_t outsize)
{
	int			head;
	char		list[ZKW_MAX_BLOCKED * 12 + 48];
	size_t		list_len = 0;

	if (r->nblocked < 0 || r->nblocked > ZKW_MAX_BLOCKED)
		return 0;
	list_len += (size_t) snprintf(list + list_len, sizeof(list) - list_len,
								  " beat=%llu", (unsigned long long) r->beat);
	for (int i = 0; i < r->nblocked; i++)
		list_len += (size_t) snprintf(list + list_len, sizeof(list) - list_len,
									  "%s%d", i == 0 ? " blocked=" : ",",
									  r->blocked[i]);
	if ((r->mode == ZKR_MODE_SEMAPHORE) != (r->leases != NULL && r->leases_len > 0))
		return 0;
	if (r->leases != NULL)
		list_len += (size_t) snprintf(list + list_len, sizeof(list) - list_len,
									  " leases=%zu:", r->leases_len);
	if (r->has_start)
		head = snprintf(out, outsize,
						RECORD_TAG "sysid=%llu start=%llu pid=%d mode=%s node=%zu:",
						(unsigned long long) r->sysid,
						(unsigned long long) r->start, r->pid,
						zkr_mode_name(r->mode), r->node_len);
	else
		head = snprintf(out, outsize,
						RECORD_TAG "sysid=%llu pid=%d mode=%s node=%zu:",
						(unsigned long long) r->sysid, r->pid,
						zkr_mode_name(r->mode), r->node_len);
	if (head < 0 ||
		(size_t) head + r->node_len + list_len + r->leases_len + 10 +
		r->resource_len >= outsize)
		return 0;
	memcpy(out + head, r->node, r->node_len);
	head += r->node_len;
	memcpy(out + head, list, list_len);
	head += list_len;
	if (r->leases != NULL)
	{
		memcpy(out + head, r->leases, r->leases_len);
		head += r->leases_len;
	}
	memcpy(out + head, " resource=", 10);
	head += 10;
	memcpy(out + head, r->resource, r->resource_len);
	head += r->resource_len;
	out[head] = '\0';
	return head;
}

/*
 * Parse "<key>=<unsigned decimal>" (or the bare number if key is NULL) at
 * *p, moving past it.  A value past 2^64 - 1 is refused, never wrapped.
 */
static bool
parse_number(const char **p, const char *end, const char *key,
			 unsigned long long *value)
{
	const char *q = *p;
	unsigned long long v = 0;
	int			digits = 0;

	if (key != NULL)
	{
		size_t		klen = strlen(key);

		if ((size_t) (end - q) < klen + 1 || memcmp(q, key, klen) != 0 ||
			q[klen] != '=')
			return false;
		q += klen + 1;
	}
	while (q < end && *q >= '0' && *q <= '9')
	{
		if (v > (UINT64_MAX - (unsigned long long) (*q - '0')) / 10)
			return false;
		v = v * 10 + (unsigned long long) (*q - '0');
		q++;
		digits++;
	}
	if (digits == 0)
		return false;
	*value = v;
	*p = q;
	return true;
}

static bool
expect(const char **p, const char *end, const char *text)
{
	size_t		len = strlen(text);

	if ((size_t) (end - *p) < len || memcmp(*p, text, len) != 0)
		return false;
	*p += len;
	return true;
}

bool
zkw_parse_record(const char *data, size_t len, ZkwRecord *r)
{
	const char *p = data;
	const char *end = data + len;
	unsigned long long v;

	memset(r, 0, sizeof(ZkwRecord));
	if (!expect(&p, end, RECORD_TAG))
		return false;
	if (!parse_number(&p, end, "sysid", &v) || !expect(&p, end, " "))
		return false;
	r->sysid = v;
	/* (parse_number moves nothing unless the key is there) */
	if (parse_number(&p, end, "start", &v))
	{
		if (!expect(&p, end, " "))
			return false;
		r->has_start = true;
		r->start = v;
	}
	if (!parse_number(&p, end, "pid", &v) || v > 0x7FFFFFFF ||
		!expect(&p, end, " mode="))
		return false;
	r->pid = (int) v;
	if (expect(&p, end, "exclusive"))
		r->mode = ZKR_MODE_EXCLUSIVE;
	else if (expect(&p, end, "shared"))
		r->mode = ZKR_MODE_SHARED;
	else if (expect(&p, end, "semaphore"))
		r->mode = ZKR_MODE_SEMAPHORE;
	else
		return false;
	if (!expect(&p, end, " ") || !parse_number(&p, end, "node", &v) ||
		!expect(&p, end, ":") || v == 0 || v > (unsigned long long) (end - p))
		return false;
	r->node = p;
	r->node_len = (size_t) v;
	p += v;
	if (expect(&p, end, " beat="))
	{
		if (!parse_number(&p, end, NULL, &v))
			return false;
		r->has_beat = true;
		r->beat = v;
	}
	if (expect(&p, end, " blocked="))
	{
		do
		{
			if (r->nblocked == ZKW_MAX_BLOCKED ||
				!parse_number(&p, end, NULL, &v) || v == 0 || v > 0x7FFFFFFF)
				return false;
			r->blocked[r->nblocked++] = (int) v;
		} while (expect(&p, end, ","));
	}
	if (expect(&p, end, " leases="))
	{
		if (!parse_number(&p, end, NULL, &v) || !expect(&p, end, ":") ||
			v == 0 || v > (unsigned long long) (end - p))
			return false;
		r->leases = p;
		r->leases_len = (size_t) v;
		p += v;
	}
	if ((r->mode == ZKR_MODE_SEMAPHORE) != (r->leases != NULL))
		return false;
	if (!expect(&p, end, " resource="))
		return false;
	r->resource = p;
	r->resource_len = (size_t) (end - p);
	return true;
}

bool
zkw_parse_owner(const char *data, ZkwBackend *b)
{
	const char *p;
	const char *end;
	unsigned long long v;

	memset(b, 0, sizeof(ZkwBackend));
	if (data == NULL || strncmp(data, "zklock ", 7) != 0 ||
		(p = strstr(data, " sysid=")) == NULL)
		return false;
	end = p + strlen(p);
	p++;
	if (!parse_number(&p, end, "sysid", &v))
		return false;
	b->sysid = v;

	/*
	 * Every zklock has written "sysid=S pid=P" side by side, and now
	 * "sysid=S start=T pid=P": the start time is looked for there only.
	 */
	if (expect(&p, end, " start="))
	{
		if (!parse_number(&p, end, NULL, &v))
			return false;
		b->has_start = true;
		b->start = v;
	}
	if (!expect(&p, end, " ") || !parse_number(&p, end, "pid", &v) ||
		v == 0 || v > 0x7FFFFFFF)
		return false;
	b->pid = (int) v;
	return true;
}

int
zkw_find_cycle(int nv, const ZkwEdge *e, int ne,
			   int start, int *cycle)
{
	int		   *next_edge;
	int		   *stack;
	char	   *seen;
	int			depth = 0;
	int			len = 0;

	if (start < 0 || start >= nv)
		return 0;
	next_edge = malloc(sizeof(int) * nv);
	stack = malloc(sizeof(int) * nv);
	seen = calloc(nv, 1);
	if (next_edge == NULL || stack == NULL || seen == NULL)
		goto done;

	/* depth-first from start, looking for an edge back to start */
	stack[depth++] = start;
	seen[start] = 1;
	next_edge[start] = 0;
	while (depth > 0)
	{
		int			u = stack[depth - 1];
		int			i = next_edge[u];

		while (i < ne && e[i].from != u)
			i++;
		if (i == ne)
		{
			depth--;			/* every edge of u explored */
			continue;
		}
		next_edge[u] = i + 1;
		if (e[i].to == start)
		{
			/* the path start .. u is the stack itself */
			for (int k = 0; k < depth; k++)
				cycle[len++] = stack[k];
			break;
		}
		if (e[i].to < 0 || e[i].to >= nv || seen[e[i].to])
			continue;
		seen[e[i].to] = 1;
		next_edge[e[i].to] = 0;
		stack[depth++] = e[i].to;
	}

done:
	free(next_edge);
	free(stack);
	free(seen);
	return len;
}

/* Mark in seen[] every vertex reachable from start (backwards: reaching). */
static void
reach(int nv, const ZkwEdge *e, int ne, int start, bool backwards,
	  char *seen, int *stack)
{
	int			depth = 0;

	seen[start] = 1;
	stack[depth++] = start;
	while (depth > 0)
	{
		int			u = stack[--depth];

		for (int i = 0; i < ne; i++)
		{
			int			from = backwards ? e[i].to : e[i].from;
			int			to = backwards ? e[i].from : e[i].to;

			if (from != u || to < 0 || to >= nv || seen[to])
				continue;
			seen[to] = 1;
			stack[depth++] = to;
		}
	}
}

int
zkw_component(int nv, const ZkwEdge *e, int ne, int start, int *members)
{
	char	   *fwd = calloc(nv > 0 ? nv : 1, 1);
	char	   *bwd = calloc(nv > 0 ? nv : 1, 1);
	int		   *stack = malloc(sizeof(int) * (nv > 0 ? nv : 1));
	int			len = 0;

	if (start < 0 || start >= nv || fwd == NULL || bwd == NULL ||
		stack == NULL)
		goto done;
	reach(nv, e, ne, start, false, fwd, stack);
	reach(nv, e, ne, start, true, bwd, stack);
	members[len++] = start;
	for (int i = 0; i < nv; i++)
		if (i != start && fwd[i] && bwd[i])
			members[len++] = i;
done:
	free(fwd);
	free(bwd);
	free(stack);
	return len;
}

bool
zkw_certain(int nv, const ZkwEdge *e, int ne, const int *comp, int ncomp,
			const bool *any_of)
{
	char	   *in = calloc(nv > 0 ? nv : 1, 1);
	bool		certain = (in != NULL);

	for (int k = 0; k < ncomp && certain; k++)
		if (comp[k] >= 0 && comp[k] < nv)
			in[comp[k]] = 1;
	for (int i = 0; i < ne && certain; i++)
	{
		int			from = e[i].from;
		int			to = e[i].to;

		if (from < 0 || from >= nv || !in[from] || !any_of[from])
			continue;
		if (to < 0 || to >= nv || !in[to])
			certain = false;
	}
	free(in);
	return certain;
}

int
zkw_victim(const ZkwVertex *v, const int *cycle, int len)
{
	int			best = -1;

	for (int k = 0; k < len; k++)
	{
		const ZkwVertex *x = &v[cycle[k]];

		if (!x->has_record)
			continue;
		if (best < 0 || x->record_czxid > v[cycle[best]].record_czxid ||
			(x->record_czxid == v[cycle[best]].record_czxid &&
			 x->session > v[cycle[best]].session))
			best = k;
	}
	return best;
}
