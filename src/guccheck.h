/*-------------------------------------------------------------------------
 *
 * guccheck.h
 *	  Refusing to run on a zklock setting that could not take its
 *	  configured value when the library was loaded (see guccheck.c).
 *
 * src/guccheck.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_GUCCHECK_H
#define ZKLOCK_GUCCHECK_H

/* In _PG_init, before zklock defines any setting. */
extern void zkg_note_placeholders(void);

/* In _PG_init, after every setting is defined. */
extern void zkg_check_applied(void);

/* ERROR (55000) naming the setting if one fell back; else nothing. */
extern void zkg_refuse_unconfigured(void);

#endif							/* ZKLOCK_GUCCHECK_H */
