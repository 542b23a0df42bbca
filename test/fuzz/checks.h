/*-------------------------------------------------------------------------
 *
 * checks.h
 *	  Property checks of the pure recipe code (src/recipe/recipe.c) on arbitrary
 *	  input bytes.  Shared by the libFuzzer targets (fuzz_*.c, built with
 *	  clang by "make fuzz") and by the corpus replay program (replay.c,
 *	  built with gcc by test/unit/Makefile and run by "make test").
 *
 * Every check takes one input (any bytes, any length) and returns NULL if
 * every property holds, or a static message naming the first one that
 * does not.  Nothing here calls PostgreSQL or ZooKeeper.
 *
 * test/fuzz/checks.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_FUZZ_CHECKS_H
#define ZKLOCK_FUZZ_CHECKS_H

#include <stddef.h>
#include <stdint.h>

/*
 * zkr_encode_resource on the input taken as a resource name:
 *  - the result is OK or the documented error for the input (EMPTY,
 *    TOO_LONG, EMPTY_LEVEL), as an independent model computes it;
 *  - on OK the output has only [A-Za-z0-9._%/-], no empty, "." or ".."
 *    level, no leading '/', equals the model's encoding, percent-decodes
 *    back to the input, and so can never leave the root;
 *  - with an output buffer of exactly the needed size the result is the
 *    same; with any smaller buffer (allocated to its exact size, so that
 *    AddressSanitizer or valgrind see a write past it) the result is
 *    NO_ROOM or the input's own error, and nothing is written past it.
 */
extern const char *zkf_check_encode(const uint8_t *data, size_t size);

/*
 * zkr_parse_child, zkr_seq_cmp, zkr_contender_cmp, zkr_collect,
 * zkr_protocol_prefix / zkr_has_prefix and zkr_decide on a child list
 * built from the input (format in checks.c):
 *  - every name is recognised exactly as the SPEC's regular expression
 *    (and the 32-bit range of ZooKeeper's counter) says, with the right
 *    mode, sequence and prefix length;
 *  - the comparison is reflexive and antisymmetric;
 *  - zkr_collect returns exactly the contenders, each once; when their
 *    sequence numbers lie within half the 32-bit circle (as those of one
 *    lock parent do) the order is the RFC 1982 order, ties by name;
 *  - a node name zklock builds itself parses back to its mode and
 *    sequence and carries its prefix;
 *  - zkr_decide finds self iff it is a contender; the predecessor is -1
 *    exactly when held, otherwise it is before self, not one of our own
 *    nodes, conflicts with the mode (any mode for exclusive, exclusive for
 *    shared) and is the greatest such index; blockers counts them; shared
 *    never blocks where exclusive would not.
 */
extern const char *zkf_check_queue(const uint8_t *data, size_t size);

/* Largest input the checks look at; the rest is ignored. */
#define ZKF_MAX_INPUT 65536

#endif							/* ZKLOCK_FUZZ_CHECKS_H */
