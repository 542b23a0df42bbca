/*-------------------------------------------------------------------------
 *
 * version.c
 *	  zk_library(): which zklock library this backend runs, so that a DBA
 *	  can see an upgrade that is not complete yet (view zk_version): the
 *	  library's own version against the extension's in the database, and
 *	  whether the file on disk is still the one this process has mapped.
 *
 * A process keeps the library file it loaded mapped until it exits, even
 * after the file was replaced or deleted.  With zklock in
 * shared_preload_libraries the postmaster loaded it, and every backend it
 * starts inherits that mapping: only a restart of the server brings a new
 * zklock.so in.  Without preloading each backend loads the file at its
 * first zklock call: a new connection runs the new file.
 *
 * The file is recognised by what stat() says of it at load time (device,
 * inode, size, modification time), taken in the process that loaded it
 * (the postmaster when preloaded; its children inherit the figures).
 * Installing a new zklock.so (make install, dpkg) writes a new file, so
 * one of them changes.
 *
 * src/monitor/version.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "monitor/version.h"

#ifndef ZKLOCK_LIBRARY_VERSION
#error "ZKLOCK_LIBRARY_VERSION must be defined (the Makefile passes zklock.control's default_version)"
#endif

PG_FUNCTION_INFO_V1(zk_library);

static bool loaded_by_preload = false;
static char loaded_file[MAXPGPATH] = "";
static bool loaded_stat_ok = false;
static struct stat loaded_stat;

void
zkv_init(void)
{
	Dl_info		info;

	loaded_by_preload = process_shared_preload_libraries_in_progress;

	/* the path this library was loaded from, as dlopen was given it */
	if (dladdr((void *) zkv_init, &info) != 0 && info.dli_fname != NULL &&
		info.dli_fname[0] == '/')
		strlcpy(loaded_file, info.dli_fname, sizeof(loaded_file));
	else
		snprintf(loaded_file, sizeof(loaded_file), "%s/zklock%s",
				 pkglib_path, DLSUFFIX);
	loaded_stat_ok = (stat(loaded_file, &loaded_stat) == 0);
}

/* Is the file at the loaded path another one than the loaded library? */
static bool
file_replaced(void)
{
	struct stat now;

	if (!loaded_stat_ok)
		return false;			/* nothing to compare with */
	if (stat(loaded_file, &now) != 0)
		return true;			/* deleted (or unreadable) since */
	return now.st_dev != loaded_stat.st_dev ||
		now.st_ino != loaded_stat.st_ino ||
		now.st_size != loaded_stat.st_size ||
		now.st_mtime != loaded_stat.st_mtime;
}

/*
 * zk_library(): this backend's zklock library: its version (zklock.control's
 * default_version when it was built), whether shared_preload_libraries
 * loaded it, its file, and whether that file has been replaced since.
 */
Datum
zk_library(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[4];
	bool		nulls[4] = {0};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	values[0] = CStringGetTextDatum(ZKLOCK_LIBRARY_VERSION);
	values[1] = BoolGetDatum(loaded_by_preload);
	values[2] = CStringGetTextDatum(loaded_file);
	values[3] = BoolGetDatum(file_replaced());
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
