/*-------------------------------------------------------------------------
 *
 * auth.c
 *	  The ZooKeeper credentials of zklock: read from the file named by
 *	  zklock.auth_file, never from a setting's value.
 *
 * Until a library is loaded in a backend, PostgreSQL keeps its settings as
 * placeholders whose raw value any role can read with SHOW.  Most backends
 * never load zklock, so a password kept in a setting would be readable by
 * everyone.  The setting therefore names a file, checked the way
 * PostgreSQL checks ssl_key_file: owned by the server's operating-system
 * user (or root), and not accessible by group or others (root may grant
 * its group read access).  The file holds one line, "digest:user:password".
 *
 * The secret is kept out of PostgreSQL's memory contexts (which are freed
 * but not wiped): it is read into a stack buffer, copied to malloc'd
 * memory that is wiped when it is released, and it appears in no message.
 * That copy lives only while a session is being opened: once libzookeeper
 * has its own (it must, to authenticate again after a reconnect), the
 * session layer keeps nothing but ZooKeeper's digest of the credentials
 * (zka_digest), which every node's ACL shows anyway.
 *
 * src/session/auth.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cryptohash.h"
#include "common/sha1.h"

#include "session/auth.h"

uint64		zka_generation = 0;

/* Longest file accepted; a digest identity is far shorter. */
#define AUTH_FILE_MAX 1024

static void
format_error(const char *path, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIG_FILE_ERROR),
			 errmsg("ZooKeeper credentials file \"%s\" is not valid", path),
			 errdetail_internal("%s", detail),
			 errhint("The file must hold one line of the form \"digest:user:password\".")));
}

/*
 * Is buf (len bytes, no NUL inside) one "digest:user:password" line?  The
 * user may not contain ':' (ZooKeeper's digest scheme splits there); the
 * password may.  Returns NULL if so, else what is wrong (never the text).
 */
static const char *
identity_problem(const char *buf, size_t len)
{
	const char *user;
	const char *colon;

	if (len == 0)
		return "The file is empty.";
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) buf[i];

		if (c == '\n')
			return "The file has more than one line.";
		if (c < 0x20 || c == 0x7F)
			return "The file contains control characters.";
	}
	if (len < 7 || strncmp(buf, "digest:", 7) != 0)
		return "The identity does not start with \"digest:\".";
	user = buf + 7;
	colon = memchr(user, ':', len - 7);
	if (colon == NULL || colon == user)
		return "The identity has no user name followed by \":\".";
	if (colon + 1 == buf + len)
		return "The password is empty.";
	return NULL;
}

char *
zka_read_identity(const char *path)
{
	char		buf[AUTH_FILE_MAX + 1];
	struct stat st;
	ssize_t		got;
	size_t		len = 0;
	int			fd;
	int			save_errno;
	const char *problem;
	char	   *identity;

	if (path == NULL || path[0] == '\0')
		return NULL;

	/* O_NONBLOCK: a FIFO must not hang the call (it is refused below) */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open ZooKeeper credentials file \"%s\": %m",
						path)));
	if (fstat(fd, &st) != 0)
	{
		save_errno = errno;
		close(fd);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat ZooKeeper credentials file \"%s\": %m",
						path)));
	}
	if (!S_ISREG(st.st_mode))
	{
		close(fd);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("ZooKeeper credentials file \"%s\" is not a regular file",
						path)));
	}
	if (st.st_uid != geteuid() && st.st_uid != 0)
	{
		close(fd);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("ZooKeeper credentials file \"%s\" must be owned by the database user or root",
						path)));
	}
	if ((st.st_uid == geteuid() && (st.st_mode & (S_IRWXG | S_IRWXO))) ||
		(st.st_uid == 0 && (st.st_mode & (S_IWGRP | S_IXGRP | S_IRWXO))))
	{
		close(fd);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("ZooKeeper credentials file \"%s\" has group or world access",
						path),
				 errdetail("File must have permissions u=rw (0600) or less if owned by the database user, or permissions u=rw,g=r (0640) or less if owned by root.")));
	}

	while (len < sizeof(buf) &&
		   (got = read(fd, buf + len, sizeof(buf) - len)) != 0)
	{
		if (got < 0)
		{
			if (errno == EINTR)
				continue;
			save_errno = errno;
			close(fd);
			explicit_bzero(buf, sizeof(buf));
			errno = save_errno;
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not read ZooKeeper credentials file \"%s\": %m",
							path)));
		}
		len += got;
	}
	close(fd);

	if (len > AUTH_FILE_MAX)
	{
		explicit_bzero(buf, sizeof(buf));
		format_error(path, "The file is longer than 1024 bytes.");
	}
	/* one trailing line end is allowed */
	if (len > 0 && buf[len - 1] == '\n')
		len--;
	if (len > 0 && buf[len - 1] == '\r')
		len--;
	if (memchr(buf, '\0', len) != NULL)
		problem = "The file contains a NUL byte.";
	else
		problem = identity_problem(buf, len);
	if (problem != NULL)
	{
		explicit_bzero(buf, sizeof(buf));
		format_error(path, problem);
	}

	identity = malloc(len + 1);
	if (identity != NULL)
	{
		memcpy(identity, buf, len);
		identity[len] = '\0';
	}
	explicit_bzero(buf, sizeof(buf));
	if (identity == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	return identity;
}

void
zka_free(char *identity)
{
	if (identity != NULL)
	{
		explicit_bzero(identity, strlen(identity));
		free(identity);
	}
}

void
zka_split(const char *identity, int *scheme_len, const char **credentials)
{
	const char *colon = strchr(identity, ':');

	/* zka_read_identity checked the form */
	Assert(colon != NULL);
	*scheme_len = colon - identity;
	*credentials = colon + 1;
}

/* SHA-1 of the credentials; false if it could not be computed. */
static bool
sha1_of_credentials(const char *identity, uint8 *digest)
{
	pg_cryptohash_ctx *ctx;
	const char *cred;
	int			scheme_len;
	bool		ok;

	StaticAssertStmt(ZKA_DIGEST_LEN == SHA1_DIGEST_LENGTH,
					 "ZKA_DIGEST_LEN is the length of a SHA-1 digest");
	zka_split(identity, &scheme_len, &cred);

	/*
	 * pg_cryptohash_free wipes the context, which holds the last block of
	 * the input, before it frees it.
	 */
	ctx = pg_cryptohash_create(PG_SHA1);
	if (ctx == NULL)
		return false;
	ok = (pg_cryptohash_init(ctx) == 0 &&
		  pg_cryptohash_update(ctx, (const uint8 *) cred, strlen(cred)) == 0 &&
		  pg_cryptohash_final(ctx, digest, ZKA_DIGEST_LEN) == 0);
	pg_cryptohash_free(ctx);
	return ok;
}

void
zka_digest(char *identity, uint8 *digest)
{
	bool		ok;

	/*
	 * With OpenSSL, creating the context registers it with the current
	 * resource owner, which can raise ERROR: the identity must not
	 * survive that unwiped.
	 */
	PG_TRY();
	{
		ok = sha1_of_credentials(identity, digest);
	}
	PG_CATCH();
	{
		zka_free(identity);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!ok)
	{
		zka_free(identity);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("Could not compute the digest of the ZooKeeper credentials.")));
	}
}
