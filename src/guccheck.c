/*-------------------------------------------------------------------------
 *
 * guccheck.c
 *	  Refuses to run on a zklock setting that could not take its
 *	  configured value when the library was loaded into a backend.
 *
 * When zklock is not preloaded, a backend meets its zklock.* settings
 * before the library defines them: PostgreSQL keeps each as a
 * placeholder, and a placeholder keeps only the value of the strongest
 * source.  A connection's own options (libpq's options='-c ...' or
 * PGOPTIONS) outrank postgresql.conf, ALTER DATABASE and ALTER ROLE, so
 * they replace the configured value in the placeholder.  When the library
 * loads, PostgreSQL applies that value with the connecting role's rights:
 * for a superuser-only setting and a role that may not set it, it warns
 * and leaves the setting at its compiled-in default, a value nobody
 * configured.  zklock.root then names another tree than every other
 * backend's (two backends held "the same" exclusive lock under /prod and
 * /zklock), zklock.session_locks turns session locks back on for the
 * pooler's role the administrator turned them off for, zklock.hosts
 * points at 127.0.0.1:2181.  An invalid value (from a superuser too)
 * falls back the same way.
 *
 * PostgreSQL cannot give the configured value back: the placeholder no
 * longer holds it.  So zklock fails closed.  Before defining its settings
 * it notes, for each placeholder of its own, the source of its reset
 * value; after defining them, a setting whose reset value did not come
 * from that source was refused, and every call that would talk to
 * ZooKeeper fails (zkg_refuse_unconfigured, from the session layer's
 * connect) naming the setting and the remedy.  A value refused only for
 * the session (SET before the library loaded) leaves the reset value in
 * place, which was configured, so it is no reason to refuse.  Preloaded,
 * PostgreSQL itself refuses such a connection at its start.
 *
 * src/guccheck.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pg_compat.h"

#include "utils/guc.h"
#include "utils/memutils.h"

#include "guccheck.h"

#define ZKG_PREFIX "zklock."
#define ZKG_MAX 32				/* more than zklock has settings */

typedef struct ZkgNoted
{
	char	   *name;
	GucSource	reset_source;
} ZkgNoted;

static ZkgNoted noted[ZKG_MAX];
static int	n_noted = 0;

/* the first setting found refused (in TopMemoryContext), or NULL */
static char *refused = NULL;

void
zkg_note_placeholders(void)
{
	struct config_generic **vars;
	int			n;

	vars = zk_guc_variables(&n);
	for (int i = 0; i < n && n_noted < ZKG_MAX; i++)
	{
		struct config_generic *g = vars[i];

		if ((g->flags & GUC_CUSTOM_PLACEHOLDER) == 0 ||
			strncmp(g->name, ZKG_PREFIX, strlen(ZKG_PREFIX)) != 0)
			continue;
		noted[n_noted].name = MemoryContextStrdup(TopMemoryContext, g->name);
		noted[n_noted].reset_source = g->reset_source;
		n_noted++;
	}
}

void
zkg_check_applied(void)
{
	struct config_generic **vars;
	int			n;

	if (n_noted == 0)
		return;
	vars = zk_guc_variables(&n);
	for (int k = 0; k < n_noted && refused == NULL; k++)
	{
		for (int i = 0; i < n; i++)
		{
			struct config_generic *g = vars[i];

			/* a placeholder zklock does not define is not its setting */
			if ((g->flags & GUC_CUSTOM_PLACEHOLDER) != 0 ||
				strcmp(g->name, noted[k].name) != 0)
				continue;
			if (g->reset_source != noted[k].reset_source)
				refused = MemoryContextStrdup(TopMemoryContext, g->name);
			break;
		}
	}
}

void
zkg_refuse_unconfigured(void)
{
	if (refused == NULL)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("zklock cannot run: setting \"%s\" does not have its configured value in this session",
					refused),
			 errdetail("A value given for \"%s\" before zklock was loaded into this session could not be applied when it was loaded (a superuser-only setting passed in the connection's options by a role that may not set it, or an invalid value), so it fell back to a value nobody configured.",
					   refused),
			 errhint("Connect without zklock settings in the connection options or PGOPTIONS, or add zklock to shared_preload_libraries so that such a connection is refused at its start.")));
}
