/*-------------------------------------------------------------------------
 *
 * auth.h
 *	  The ZooKeeper credentials of zklock, read from zklock.auth_file.
 *
 * src/session/auth.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_AUTH_H
#define ZKLOCK_AUTH_H

/*
 * Read the credentials file at path and return its identity as a malloc'd
 * "digest:user:password" string (to be released with zka_free), or NULL
 * if path is empty (no authentication).  Raises ERROR, without ever
 * quoting the file's contents, if the file cannot be read, is readable by
 * group or others, or is not one line of that form.
 */
extern char *zka_read_identity(const char *path);

/* Wipe and free an identity returned by zka_read_identity. */
extern void zka_free(char *identity);

/*
 * Split an identity into its scheme ("digest") and credentials
 * ("user:password"); both point into identity.  scheme_len is the number
 * of bytes of the scheme.
 */
extern void zka_split(const char *identity, int *scheme_len,
					  const char **credentials);

/*
 * ZooKeeper's digest of an identity's credentials: SHA-1 of
 * "user:password", the value that the digest scheme puts in every ACL and
 * that getACL shows to any client with READ on a node.  The session layer
 * keeps it, not the identity, to notice that the file changed.
 */
#define ZKA_DIGEST_LEN 20

/*
 * Store the digest of identity's credentials in digest.  If it cannot be
 * computed, releases identity (zka_free) and raises ERROR.
 */
extern void zka_digest(char *identity, uint8 *digest);

/*
 * Bumped by the assign hook of zklock.auth_file, which runs whenever the
 * setting is (re)applied, in particular at every configuration reload: the
 * session layer reads the file again when it changed.
 */
extern uint64 zka_generation;

#endif							/* ZKLOCK_AUTH_H */
