/*
 * softrnic's stand-in for libefa.so.1, the EFA provider's direct-verbs
 * (efadv_*) library.
 *
 * softrnic devices are not EFA devices, so every call here fails with
 * EOPNOTSUPP: pointer-returning calls return NULL with errno set, and the
 * query calls (documented to return 0 or an errno value) return EOPNOTSUPP.
 * No argument is ever dereferenced, so NULL arguments are harmless.  The
 * library exists only so that binaries linked against libefa.so.1 (Debian's
 * perftest, for instance) load and run on softrnic's libibverbs.  Unlike the
 * real one it needs nothing from libibverbs (in particular none of its
 * IBVERBS_PRIVATE_* symbols) and is not linked against it; it uses the
 * installed <infiniband/efadv.h> only for the prototypes.
 *
 * Every function symbol of rdma-core 44's libefa.so.1 is exported, with the
 * same symbol version (see efa.map, which also gives the version nodes'
 * inheritance chain).
 *
 * Build:
 *   gcc -O2 -fPIC -shared -Wall -Werror -Wl,--version-script=host/capi/c/efa.map -Wl,-soname,libefa.so.1 -o lib/libefa.so.1 host/capi/c/efa.c
 */

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/efadv.h>

/* Sets errno and yields NULL, for the calls that return a pointer. */
static void *unsupported_ptr(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/* Sets errno too (harmless, and helps callers that look at it) and yields
 * EOPNOTSUPP, for the calls documented to return 0 or an errno value. */
static int unsupported(void)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

/* EFA_1.0 */

struct ibv_qp *efadv_create_driver_qp(struct ibv_pd *pd,
				      struct ibv_qp_init_attr *attr,
				      uint32_t driver_qp_type)
{
	return unsupported_ptr();
}

/* EFA_1.1 */

struct ibv_qp *efadv_create_qp_ex(struct ibv_context *context,
				  struct ibv_qp_init_attr_ex *attr_ex,
				  struct efadv_qp_init_attr *efa_attr,
				  uint32_t inlen)
{
	return unsupported_ptr();
}

int efadv_query_ah(struct ibv_ah *ah, struct efadv_ah_attr *attr,
		   uint32_t inlen)
{
	return unsupported();
}

int efadv_query_device(struct ibv_context *context,
		       struct efadv_device_attr *attr, uint32_t inlen)
{
	return unsupported();
}

/* EFA_1.2 */

/* The real one converts a CQ created by the EFA provider; softrnic CQs are
 * not such CQs, so there is nothing to convert to. */
struct efadv_cq *efadv_cq_from_ibv_cq_ex(struct ibv_cq_ex *cq)
{
	return unsupported_ptr();
}

struct ibv_cq_ex *efadv_create_cq(struct ibv_context *context,
				  struct ibv_cq_init_attr_ex *attr_ex,
				  struct efadv_cq_init_attr *efa_attr,
				  uint32_t inlen)
{
	return unsupported_ptr();
}
