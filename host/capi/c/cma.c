/*
 * softrnic's librdmacm.so.1: rdma-core 44's librdmacm ABI (rdma/rdma_cma.h
 * and rdma/rdma_verbs.h) over softrnic's connection manager (host/cm, via
 * srn.h) and softrnic's libibverbs.so.1. Event channels are pipes the NIC
 * writes a byte to per event; an id made without a channel is
 * synchronous, each call waiting for its event, as librdmacm's are.
 *
 * What softrnic's CM does not do fails as librdmacm fails it: multicast
 * on the udp port (EOPNOTSUPP: the xsk port takes it), IB port spaces
 * other than TCP and UDP (EPROTONOSUPPORT), ECE, and rsockets (ENOSYS:
 * softrnic has no rsocket layer).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "softrnic.h"

#define EXPORT __attribute__((visibility("default")))
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

struct srn_cm_channel {
	struct rdma_event_channel ch; /* ch.fd: the pipe's read end */
	int wfd;
	int h;
};

/* A multicast group an id joined: its GID (IPv4-mapped) and the
 * context its join was given, for the MULTICAST_JOIN event. */
struct srn_mc {
	int used;
	uint8_t gid[16];
	void *context;
};

#define SRN_MC_PER_ID 8

struct srn_cm_id {
	struct rdma_cm_id id;
	int h;
	int sync; /* made without a channel: each call waits for its event */
	struct rdma_cm_event *sync_event; /* the last event a synchronous call took, acked at the next */
	struct ibv_comp_channel *made_send_channel, *made_recv_channel;
	struct ibv_cq *made_send_cq, *made_recv_cq;
	struct ibv_qp_init_attr *ep_qp_attr; /* a passive endpoint's: each request's id gets such a QP */
	struct ibv_pd *ep_pd;
	uint32_t qkey;		 /* a UD QP's */
	struct ibv_ah *ud_ah;	 /* a UD connection's address handle (in its ESTABLISHED event) */
	struct ibv_sa_path_rec path;
	uint8_t tos; /* RDMA_OPTION_ID_TOS */
	struct srn_mc mc[SRN_MC_PER_ID]; /* the groups it joined (rdma_join_multicast) */
};

struct srn_event {
	struct rdma_cm_event ev;
	uint8_t private_data[SRN_CM_PRIVATE];
};

static struct srn_cm_id *cid(struct rdma_cm_id *id) { return container_of(id, struct srn_cm_id, id); }

static int fail(int err)
{
	errno = err;
	return -1;
}

/* --- devices: one context per softrnic device, open for the process ---- */

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_context *contexts[SRN_MAX_DEVICES];
static struct ibv_pd *pds[SRN_MAX_DEVICES];
static int ncontexts;

static struct ibv_context *context_for(const char *netdev)
{
	char name[IBV_SYSFS_NAME_MAX];
	snprintf(name, sizeof(name), "softrnic_%.50s", netdev);
	pthread_mutex_lock(&ctx_mu);
	for (int i = 0; i < ncontexts; i++) {
		if (strcmp(contexts[i]->device->name, name) == 0) {
			pthread_mutex_unlock(&ctx_mu);
			return contexts[i];
		}
	}
	struct ibv_context *ctx = NULL;
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n && !ctx; i++)
		if (strcmp(list[i]->name, name) == 0)
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (ctx && ncontexts < SRN_MAX_DEVICES) {
		pds[ncontexts] = ibv_alloc_pd(ctx);
		contexts[ncontexts++] = ctx;
	}
	pthread_mutex_unlock(&ctx_mu);
	return ctx;
}

static struct ibv_pd *default_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd = NULL;
	pthread_mutex_lock(&ctx_mu);
	for (int i = 0; i < ncontexts; i++)
		if (contexts[i] == ctx)
			pd = pds[i];
	pthread_mutex_unlock(&ctx_mu);
	return pd;
}

EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n; i++) {
		const char *nd = list[i]->name + strlen("softrnic_");
		context_for(nd);
	}
	ibv_free_device_list(list);
	pthread_mutex_lock(&ctx_mu);
	struct ibv_context **out = calloc(ncontexts + 1, sizeof(*out));
	int k = 0;
	for (int i = 0; out && i < ncontexts; i++)
		out[k++] = contexts[i];
	pthread_mutex_unlock(&ctx_mu);
	if (num_devices)
		*num_devices = k;
	if (!out)
		errno = ENOMEM;
	return out;
}

EXPORT void rdma_free_devices(struct ibv_context **list) { free(list); }

/* --- event channels ---------------------------------------------------- */

EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct srn_cm_channel *c = calloc(1, sizeof(*c));
	int fds[2];
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	if (pipe2(fds, O_CLOEXEC) != 0) {
		free(c);
		return NULL;
	}
	fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK); /* the NIC never blocks on it */
	int h = srn_cm_channel(fds[1]);
	if (h < 0) {
		close(fds[0]);
		close(fds[1]);
		free(c);
		errno = -h;
		return NULL;
	}
	c->h = h;
	c->ch.fd = fds[0];
	c->wfd = fds[1];
	return &c->ch;
}

/* close_channel closes a channel the library made for a synchronous id
 * (rdma_create_id without a channel): only that id's calls read it, in
 * the caller's thread, so it goes whole. */
static void close_channel(struct rdma_event_channel *channel)
{
	struct srn_cm_channel *c = container_of(channel, struct srn_cm_channel, ch);
	srn_cm_close_channel(c->h);
	close(c->ch.fd);
	close(c->wfd);
	free(c);
}

EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct srn_cm_channel *c = container_of(channel, struct srn_cm_channel, ch);
	srn_cm_close_channel(c->h);
	/* The NIC writes to it no more, but both ends of the pipe and the
	 * channel stay: another thread of the program may still read it
	 * (rping's cm_thread, which main's teardown races). One blocked in
	 * rdma_get_cm_event stays blocked, as it does on rdma_cm's own fd,
	 * and so does one that comes to read after the destruction, instead
	 * of failing with EBADF (and reading freed memory). The cost is two
	 * descriptors and a few bytes per channel a program destroys. */
}

static void set_sockaddr(struct sockaddr_storage *ss, const uint8_t *a16, uint16_t port)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	memset(ss, 0, sizeof(*ss));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	memcpy(&sin->sin_addr, a16 + 12, 4);
}

static void set_route(struct srn_cm_id *c, const struct srn_cm_event *e)
{
	struct rdma_cm_id *id = &c->id;
	set_sockaddr(&id->route.addr.src_storage, e->src, e->src_port);
	set_sockaddr(&id->route.addr.dst_storage, e->dst, e->dst_port);
	memcpy(id->route.addr.addr.ibaddr.sgid.raw, e->src, 16);
	memcpy(id->route.addr.addr.ibaddr.dgid.raw, e->dst, 16);
	id->route.addr.addr.ibaddr.pkey = htons(0xffff);
	memset(&c->path, 0, sizeof(c->path));
	memcpy(c->path.sgid.raw, e->src, 16);
	memcpy(c->path.dgid.raw, e->dst, 16);
	c->path.pkey = htons(0xffff);
	c->path.hop_limit = 64;
	c->path.reversible = 1;
	c->path.numb_path = 1;
	if (id->verbs) {
		struct ibv_port_attr pa;
		if (ibv_query_port(id->verbs, 1, &pa) == 0)
			c->path.mtu = pa.active_mtu;
	}
	id->route.path_rec = &c->path;
	id->route.num_paths = 1;
}

static struct srn_cm_id *new_id(struct rdma_event_channel *channel, void *context, enum rdma_port_space ps,
				enum ibv_qp_type qpt, int h);

static void fill_conn_param(struct rdma_conn_param *p, const struct srn_event *se, const struct srn_cm_event *e)
{
	p->private_data = e->private_len ? se->private_data : NULL;
	p->private_data_len = e->private_len > 255 ? 255 : e->private_len;
	p->responder_resources = e->responder_resources;
	p->initiator_depth = e->initiator_depth;
	p->retry_count = e->retry_count;
	p->rnr_retry_count = e->rnr_retry_count;
	p->srq = e->srq;
	p->qp_num = e->qp_num;
}

/* find_mc finds the group of GID gid the id joined, or NULL. */
static struct srn_mc *find_mc(struct srn_cm_id *n, const uint8_t *gid)
{
	for (int i = 0; i < SRN_MC_PER_ID; i++)
		if (n->mc[i].used && memcmp(n->mc[i].gid, gid, 16) == 0)
			return &n->mc[i];
	return NULL;
}

/* join_event completes a MULTICAST_JOIN: the group's address vector and
 * QPN and Q_Key in param.ud, the join's context as its private data (as
 * librdmacm gives it), and the id's QP attached to the group, as
 * librdmacm attaches it; a QP that cannot be turns the event into a
 * MULTICAST_ERROR. */
static void join_event(struct srn_cm_id *n, struct rdma_cm_event *ev, const struct srn_cm_event *e)
{
	struct srn_mc *m = find_mc(n, e->dst);
	struct ibv_ah_attr *ah = &ev->param.ud.ah_attr;
	ah->is_global = 1;
	ah->port_num = 1;
	ah->grh.hop_limit = 64;
	ah->grh.sgid_index = 1;
	memcpy(ah->grh.dgid.raw, e->dst, 16);
	ev->param.ud.qp_num = e->ud_qp_num;
	ev->param.ud.qkey = e->ud_qkey;
	ev->param.ud.private_data = m ? m->context : NULL;
	if (!m) { /* left before its event came */
		ev->event = RDMA_CM_EVENT_MULTICAST_ERROR;
		ev->status = -EADDRNOTAVAIL;
		return;
	}
	if (n->id.qp) {
		int rc = ibv_attach_mcast(n->id.qp, &ah->grh.dgid, 0);
		if (rc) {
			ev->event = RDMA_CM_EVENT_MULTICAST_ERROR;
			ev->status = -rc;
		}
	}
}

/* take_event turns the Go side's next event into an rdma_cm_event: a
 * CONNECT_REQUEST gets its new id here, an ADDR_RESOLVED its device. */
static int take_event(struct srn_cm_channel *c, struct rdma_cm_event **event)
{
	struct srn_cm_event e;
	int rc = srn_cm_get_event(c->h, &e);
	if (rc < 0)
		return rc;
	struct srn_event *se = calloc(1, sizeof(*se));
	if (!se)
		return -ENOMEM;
	memcpy(se->private_data, e.private_data, e.private_len);
	struct rdma_cm_event *ev = &se->ev;
	ev->event = e.event;
	ev->status = e.status;
	if (e.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		struct srn_cm_id *l = (struct srn_cm_id *)(uintptr_t)e.listen_cookie;
		struct srn_cm_id *n = new_id(l->id.channel, l->id.context, l->id.ps, l->id.qp_type, e.id);
		if (!n) {
			srn_cm_destroy_id(e.id);
			free(se);
			return -ENOMEM;
		}
		srn_cm_migrate(e.id, c->h, (uint64_t)(uintptr_t)n);
		n->id.verbs = context_for(e.netdev);
		n->id.pd = default_pd(n->id.verbs);
		n->id.port_num = 1;
		set_route(n, &e);
		ev->id = &n->id;
		ev->listen_id = &l->id;
	} else {
		struct srn_cm_id *n = (struct srn_cm_id *)(uintptr_t)e.cookie;
		ev->id = &n->id;
		if (e.event == RDMA_CM_EVENT_ADDR_RESOLVED) {
			if (!n->id.verbs)
				n->id.verbs = context_for(e.netdev);
			n->id.port_num = 1;
			set_route(n, &e);
		}
		if (e.event == RDMA_CM_EVENT_ROUTE_RESOLVED || e.event == RDMA_CM_EVENT_ESTABLISHED)
			set_route(n, &e);
	}
	if (e.event == RDMA_CM_EVENT_MULTICAST_JOIN) {
		join_event(cid(ev->id), ev, &e);
	} else if (ev->id->ps == RDMA_PS_UDP) {
		ev->param.ud.private_data = e.private_len ? se->private_data : NULL;
		ev->param.ud.private_data_len = e.private_len > 255 ? 255 : e.private_len;
		if (e.event == RDMA_CM_EVENT_ESTABLISHED) {
			struct ibv_ah_attr *ah = &ev->param.ud.ah_attr;
			ah->is_global = 1;
			ah->port_num = 1;
			ah->grh.hop_limit = 64;
			ah->grh.sgid_index = 1;
			memcpy(ah->grh.dgid.raw, e.dst, 16);
			ev->param.ud.qp_num = e.ud_qp_num;
			ev->param.ud.qkey = e.ud_qkey;
		}
	} else {
		fill_conn_param(&ev->param.conn, se, &e);
	}
	*event = ev;
	return 0;
}

EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct srn_cm_channel *c = container_of(channel, struct srn_cm_channel, ch);
	if (!event)
		return fail(EINVAL);
	for (;;) {
		char b;
		ssize_t n = read(c->ch.fd, &b, 1);
		if (n == 1)
			break;
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0)
			errno = EIO;
		return -1; /* EAGAIN on a non-blocking channel */
	}
	int rc = take_event(c, event);
	if (rc < 0)
		return fail(-rc);
	return 0;
}

EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return fail(EINVAL);
	free(container_of(event, struct srn_event, ev));
	return 0;
}

EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const str[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED",	  "RDMA_CM_EVENT_ADDR_ERROR",	    "RDMA_CM_EVENT_ROUTE_RESOLVED",
		"RDMA_CM_EVENT_ROUTE_ERROR",	  "RDMA_CM_EVENT_CONNECT_REQUEST",   "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR",	  "RDMA_CM_EVENT_UNREACHABLE",	    "RDMA_CM_EVENT_REJECTED",
		"RDMA_CM_EVENT_ESTABLISHED",	  "RDMA_CM_EVENT_DISCONNECTED",	    "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN",	  "RDMA_CM_EVENT_MULTICAST_ERROR",   "RDMA_CM_EVENT_ADDR_CHANGE",
		"RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	if ((unsigned)event >= sizeof(str) / sizeof(str[0]))
		return "UNKNOWN EVENT";
	return str[event];
}

/* --- ids ------------------------------------------------------------------ */

static struct srn_cm_id *new_id(struct rdma_event_channel *channel, void *context, enum rdma_port_space ps,
				enum ibv_qp_type qpt, int h)
{
	struct srn_cm_id *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->id.channel = channel;
	c->id.context = context;
	c->id.ps = ps;
	c->id.qp_type = qpt;
	c->h = h;
	c->qkey = RDMA_UDP_QKEY;
	return c;
}

static int create_id(struct rdma_event_channel *channel, struct rdma_cm_id **out, void *context,
		     enum rdma_port_space ps, enum ibv_qp_type qpt)
{
	int sync = 0;
	if (!out)
		return fail(EINVAL);
	if (!channel) {
		channel = rdma_create_event_channel();
		if (!channel)
			return -1;
		sync = 1;
	}
	struct srn_cm_id *c = new_id(channel, context, ps, qpt, -1);
	if (!c) {
		if (sync)
			close_channel(channel);
		return fail(ENOMEM);
	}
	c->sync = sync;
	int h = srn_cm_create_id(container_of(channel, struct srn_cm_channel, ch)->h, ps, (uint64_t)(uintptr_t)c);
	if (h < 0) {
		if (sync)
			close_channel(channel);
		free(c);
		return fail(-h);
	}
	c->h = h;
	*out = &c->id;
	return 0;
}

EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
			  enum rdma_port_space ps)
{
	enum ibv_qp_type qpt = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
	return create_id(channel, id, context, ps, qpt);
}

static void drop_sync_event(struct srn_cm_id *c)
{
	if (c->sync_event) {
		rdma_ack_cm_event(c->sync_event);
		c->sync_event = NULL;
	}
}

EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	if (!id)
		return fail(EINVAL);
	struct srn_cm_id *c = cid(id);
	drop_sync_event(c);
	srn_cm_destroy_id(c->h);
	if (c->ud_ah)
		ibv_destroy_ah(c->ud_ah);
	if (c->sync)
		close_channel(id->channel);
	free(c->ep_qp_attr);
	free(c);
	return 0;
}

/* wait_event: a synchronous id's call waits for its event; a failure
 * event is the call's error (errno), as librdmacm reports it. */
static int wait_event(struct srn_cm_id *c, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	drop_sync_event(c);
	if (rdma_get_cm_event(c->id.channel, &ev))
		return -1;
	if (ev->event != want) {
		int st = ev->status;
		enum rdma_cm_event_type got = ev->event;
		c->sync_event = ev; /* the program may look at it (id->event) */
		c->id.event = ev;
		switch (got) {
		case RDMA_CM_EVENT_REJECTED:
			return fail(ECONNREFUSED);
		case RDMA_CM_EVENT_UNREACHABLE:
			return fail(ETIMEDOUT);
		case RDMA_CM_EVENT_ADDR_ERROR:
		case RDMA_CM_EVENT_ROUTE_ERROR:
		case RDMA_CM_EVENT_CONNECT_ERROR:
			return fail(st < 0 ? -st : EHOSTUNREACH);
		default:
			return fail(EINVAL);
		}
	}
	c->sync_event = ev;
	c->id.event = ev;
	return 0;
}

static int addr16(const struct sockaddr *sa, uint8_t out[16], uint16_t *port)
{
	memset(out, 0, 16);
	*port = 0;
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &sin->sin_addr, 4);
		*port = ntohs(sin->sin_port);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		memcpy(out, &s6->sin6_addr, 16);
		*port = ntohs(s6->sin6_port);
		return 0;
	}
	if (sa->sa_family == AF_UNSPEC)
		return 0;
	return -1;
}

EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct srn_cm_id *c = cid(id);
	uint8_t a[16];
	uint16_t port;
	char netdev[SRN_NAME_LEN];
	if (!addr || addr16(addr, a, &port))
		return fail(EAFNOSUPPORT);
	int rc = srn_cm_bind(c->h, a, port, netdev);
	if (rc < 0)
		return fail(-rc);
	memcpy(&id->route.addr.src_storage, addr,
	       addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
	if (netdev[0]) {
		id->verbs = context_for(netdev);
		id->pd = default_pd(id->verbs);
		id->port_num = 1;
		memcpy(id->route.addr.addr.ibaddr.sgid.raw, a, 16);
	}
	return 0;
}

EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
			     int timeout_ms)
{
	struct srn_cm_id *c = cid(id);
	uint8_t s[16], d[16];
	uint16_t sport, dport;
	if (!dst_addr || addr16(dst_addr, d, &dport) || addr16(src_addr, s, &sport))
		return fail(EAFNOSUPPORT);
	if (src_addr && !id->verbs) {
		uint8_t zero[16] = {0};
		if (memcmp(s, zero, 16) != 0 || sport) {
			if (rdma_bind_addr(id, src_addr))
				return -1;
		}
	}
	int rc = srn_cm_resolve_addr(c->h, s, d, dport, timeout_ms);
	if (rc < 0)
		return fail(-rc);
	memcpy(&id->route.addr.dst_storage, dst_addr,
	       dst_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
	if (c->sync)
		return wait_event(c, RDMA_CM_EVENT_ADDR_RESOLVED);
	return 0;
}

EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct srn_cm_id *c = cid(id);
	(void)timeout_ms;
	int rc = srn_cm_resolve_route(c->h);
	if (rc < 0)
		return fail(-rc);
	if (c->sync)
		return wait_event(c, RDMA_CM_EVENT_ROUTE_RESOLVED);
	return 0;
}

EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct srn_cm_id *c = cid(id);
	(void)backlog;
	int rc = srn_cm_listen(c->h);
	return rc < 0 ? fail(-rc) : 0;
}

EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct srn_cm_id *l = cid(listen);
	struct rdma_cm_event *ev;
	if (!l->sync)
		return fail(EINVAL); /* librdmacm: only on a synchronous listener */
	for (;;) {
		drop_sync_event(l);
		if (rdma_get_cm_event(listen->channel, &ev))
			return -1;
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
		rdma_ack_cm_event(ev);
	}
	struct srn_cm_id *n = cid(ev->id);
	/* The new id is synchronous too: a channel of its own. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch) {
		rdma_ack_cm_event(ev);
		return -1;
	}
	n->id.channel = ch;
	n->sync = 1;
	srn_cm_migrate(n->h, container_of(ch, struct srn_cm_channel, ch)->h, (uint64_t)(uintptr_t)n);
	n->sync_event = ev;
	n->id.event = ev;
	if (l->ep_qp_attr) { /* a passive endpoint's requests get their QP (rdma_create_ep) */
		struct ibv_qp_init_attr a = *l->ep_qp_attr;
		if (l->ep_pd)
			n->id.pd = l->ep_pd;
		if (rdma_create_qp(&n->id, l->ep_pd, &a)) {
			int e = errno;
			rdma_reject(&n->id, NULL, 0);
			rdma_destroy_id(&n->id);
			return fail(e);
		}
	}
	*id = &n->id;
	return 0;
}

static void to_param(struct srn_cm_id *c, struct rdma_conn_param *cp, struct srn_cm_param *p)
{
	memset(p, 0, sizeof(*p));
	p->qp = c->id.qp ? srn_qp_of(c->id.qp)->h : -1;
	p->qp_num = c->id.qp ? c->id.qp->qp_num : (cp ? cp->qp_num : 0);
	p->qkey = c->qkey;
	p->tos = c->tos;
	if (cp) {
		p->responder_resources = cp->responder_resources;
		p->initiator_depth = cp->initiator_depth;
		p->retry_count = cp->retry_count;
		p->rnr_retry_count = cp->rnr_retry_count;
		p->private_len = cp->private_data ? cp->private_data_len : 0;
		p->private_data = cp->private_data;
	} else {
		p->responder_resources = p->initiator_depth = 1;
		p->retry_count = 7;
		p->rnr_retry_count = 7;
	}
}

EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct srn_cm_id *c = cid(id);
	struct srn_cm_param p;
	to_param(c, conn_param, &p);
	int rc = srn_cm_connect(c->h, &p);
	if (rc < 0)
		return fail(-rc);
	if (c->sync)
		return wait_event(c, RDMA_CM_EVENT_ESTABLISHED);
	return 0;
}

EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct srn_cm_id *c = cid(id);
	struct srn_cm_param p;
	to_param(c, conn_param, &p);
	int rc = srn_cm_accept(c->h, &p);
	if (rc < 0)
		return fail(-rc);
	if (c->sync && id->ps != RDMA_PS_UDP)
		return wait_event(c, RDMA_CM_EVENT_ESTABLISHED);
	return 0;
}

EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	int rc = srn_cm_reject(cid(id)->h, private_data, private_data ? private_data_len : 0);
	return rc < 0 ? fail(-rc) : 0;
}

EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	struct srn_cm_id *c = cid(id);
	int rc = srn_cm_disconnect(c->h);
	if (rc < 0)
		return fail(-rc);
	if (c->sync)
		return wait_event(c, RDMA_CM_EVENT_DISCONNECTED);
	return 0;
}

/* The CM takes the id's QP through RTR and RTS as it connects: a QP the
 * program made itself (conn_param's qp_num) too. */
EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	(void)id;
	return 0;
}

EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)id;
	(void)event;
	return 0;
}

EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *attr, int *mask)
{
	if (!id || !attr || !mask)
		return fail(EINVAL);
	/* The attributes of a QP's INIT: the connection itself sets RTR and RTS. */
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = IBV_QPS_INIT;
	attr->port_num = 1;
	attr->pkey_index = 0;
	if (id->qp_type == IBV_QPT_UD) {
		attr->qkey = RDMA_UDP_QKEY;
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
	} else {
		attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	}
	return 0;
}

EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct srn_cm_id *c = cid(id);
	struct rdma_event_channel *old = id->channel;
	int was_sync = c->sync;
	if (!channel) {
		channel = rdma_create_event_channel();
		if (!channel)
			return -1;
		c->sync = 1;
	} else {
		c->sync = 0;
	}
	int rc = srn_cm_migrate(c->h, container_of(channel, struct srn_cm_channel, ch)->h, (uint64_t)(uintptr_t)c);
	if (rc < 0)
		return fail(-rc);
	id->channel = channel;
	if (was_sync) {
		drop_sync_event(c);
		close_channel(old);
	}
	return 0;
}

EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	if (!id || !optval)
		return fail(EINVAL);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS: /* the connection's traffic class, both ways */
			if (optlen < sizeof(uint8_t))
				return fail(EINVAL);
			cid(id)->tos = *(uint8_t *)optval;
			return 0;
		case RDMA_OPTION_ID_REUSEADDR:	 /* a port's listener goes with its id */
		case RDMA_OPTION_ID_AFONLY:	 /* IPv4 only */
		case RDMA_OPTION_ID_ACK_TIMEOUT: /* the CM states its own */
			return 0;
		}
	}
	if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH)
		return 0;
	return fail(ENOSYS);
}

EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return ((struct sockaddr_in *)&id->route.addr.src_storage)->sin_port;
}

EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return ((struct sockaddr_in *)&id->route.addr.dst_storage)->sin_port;
}

/* --- QPs and SRQs on ids --------------------------------------------------- */

static int init_qp(struct rdma_cm_id *id, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	int mask;
	rdma_init_qp_attr(id, &a, &mask);
	if (ibv_modify_qp(qp, &a, mask))
		return -1;
	if (qp->qp_type != IBV_QPT_UD)
		return 0;
	/* A UD QP is ready at once (librdmacm's ucma_init_ud_qp). */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -1;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

/* make_cqs makes the CQs the program did not name, each on a completion
 * channel of its own, as librdmacm does (rdma_get_send_comp and
 * rdma_get_recv_comp sleep on them). */
static int make_cqs(struct srn_cm_id *c, struct ibv_qp_init_attr_ex *attr)
{
	struct rdma_cm_id *id = &c->id;
	if (!attr->send_cq) {
		c->made_send_channel = ibv_create_comp_channel(id->verbs);
		if (!c->made_send_channel)
			return -1;
		c->made_send_cq = ibv_create_cq(id->verbs, attr->cap.max_send_wr ? attr->cap.max_send_wr : 1, id,
						c->made_send_channel, 0);
		if (!c->made_send_cq)
			return -1;
		attr->send_cq = c->made_send_cq;
		id->send_cq_channel = c->made_send_channel;
	}
	if (!attr->recv_cq) {
		c->made_recv_channel = ibv_create_comp_channel(id->verbs);
		if (!c->made_recv_channel)
			return -1;
		c->made_recv_cq = ibv_create_cq(id->verbs, attr->cap.max_recv_wr ? attr->cap.max_recv_wr : 1, id,
						c->made_recv_channel, 0);
		if (!c->made_recv_cq)
			return -1;
		attr->recv_cq = c->made_recv_cq;
		id->recv_cq_channel = c->made_recv_channel;
	}
	return 0;
}

static void drop_cqs(struct srn_cm_id *c)
{
	if (c->made_send_cq)
		ibv_destroy_cq(c->made_send_cq);
	if (c->made_recv_cq)
		ibv_destroy_cq(c->made_recv_cq);
	if (c->made_send_channel)
		ibv_destroy_comp_channel(c->made_send_channel);
	if (c->made_recv_channel)
		ibv_destroy_comp_channel(c->made_recv_channel);
	c->made_send_cq = c->made_recv_cq = NULL;
	c->made_send_channel = c->made_recv_channel = NULL;
	c->id.send_cq = c->id.recv_cq = NULL;
	c->id.send_cq_channel = c->id.recv_cq_channel = NULL;
}

EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct srn_cm_id *c = cid(id);
	if (!id->verbs || !attr)
		return fail(EINVAL);
	if (id->qp)
		return fail(EINVAL);
	struct ibv_qp_init_attr_ex a = *attr;
	if (!(a.comp_mask & IBV_QP_INIT_ATTR_PD) || !a.pd) {
		a.pd = id->pd ? id->pd : default_pd(id->verbs);
		a.comp_mask |= IBV_QP_INIT_ATTR_PD;
	}
	if (a.pd->context != id->verbs)
		return fail(EINVAL);
	if (!a.srq)
		a.srq = id->srq;
	if (make_cqs(c, &a)) {
		int e = errno;
		drop_cqs(c);
		return fail(e);
	}
	struct ibv_qp *qp = ibv_create_qp_ex(id->verbs, &a);
	if (!qp) {
		int e = errno;
		drop_cqs(c);
		return fail(e);
	}
	if (init_qp(id, qp)) {
		int e = errno;
		ibv_destroy_qp(qp);
		drop_cqs(c);
		return fail(e ? e : EINVAL);
	}
	id->qp = qp;
	id->pd = a.pd;
	id->send_cq = a.send_cq;
	id->recv_cq = a.recv_cq;
	attr->cap = a.cap;
	attr->send_cq = a.send_cq;
	attr->recv_cq = a.recv_cq;
	attr->pd = a.pd;
	return 0;
}

EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex a;
	if (!qp_init_attr)
		return fail(EINVAL);
	memset(&a, 0, sizeof(a));
	memcpy(&a, qp_init_attr, sizeof(*qp_init_attr));
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	if (rdma_create_qp_ex(id, &a))
		return -1;
	qp_init_attr->cap = a.cap;
	qp_init_attr->send_cq = a.send_cq;
	qp_init_attr->recv_cq = a.recv_cq;
	return 0;
}

EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	drop_cqs(cid(id));
}

EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	if (!id->verbs || !attr)
		return fail(EINVAL);
	struct ibv_srq_init_attr_ex a = *attr;
	if (!(a.comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a.pd) {
		a.pd = id->pd ? id->pd : default_pd(id->verbs);
		a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	struct ibv_srq *srq = ibv_create_srq_ex(id->verbs, &a);
	if (!srq)
		return -1;
	id->srq = srq;
	id->pd = a.pd;
	attr->attr = a.attr;
	return 0;
}

EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex a;
	if (!attr)
		return fail(EINVAL);
	memset(&a, 0, sizeof(a));
	a.srq_context = attr->srq_context;
	a.attr = attr->attr;
	a.comp_mask = IBV_SRQ_INIT_ATTR_PD;
	a.pd = pd;
	if (rdma_create_srq_ex(id, &a))
		return -1;
	attr->attr = a.attr;
	return 0;
}

EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (id->srq)
		ibv_destroy_srq(id->srq);
	id->srq = NULL;
}

/* --- rdma_getaddrinfo and endpoints ------------------------------------ */

EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
			    struct rdma_addrinfo **res)
{
	struct addrinfo h, *ai;
	if (!res || (!node && !service))
		return fail(EINVAL);
	memset(&h, 0, sizeof(h));
	h.ai_family = AF_UNSPEC; /* an IPv4 address first, where a name has both */
	h.ai_socktype = SOCK_STREAM;
	int passive = hints && (hints->ai_flags & RAI_PASSIVE);
	if (passive)
		h.ai_flags |= AI_PASSIVE;
	if (hints && (hints->ai_flags & RAI_NUMERICHOST))
		h.ai_flags |= AI_NUMERICHOST;
	if (hints && hints->ai_family && hints->ai_family != AF_INET && hints->ai_family != AF_INET6 &&
	    hints->ai_family != AF_UNSPEC)
		return fail(EAFNOSUPPORT);
	if (hints && (hints->ai_family == AF_INET || hints->ai_family == AF_INET6))
		h.ai_family = hints->ai_family;
	struct addrinfo *all;
	int rc = getaddrinfo(node, service, &h, &all);
	if (rc) {
		errno = rc == EAI_SYSTEM ? errno : ENOENT;
		return rc;
	}
	ai = all;
	for (struct addrinfo *p = all; p; p = p->ai_next)
		if (p->ai_family == AF_INET) {
			ai = p;
			break;
		}
	struct rdma_addrinfo *r = calloc(1, sizeof(*r));
	if (!r) {
		freeaddrinfo(all);
		return fail(ENOMEM);
	}
	r->ai_flags = hints ? hints->ai_flags : 0;
	r->ai_family = ai->ai_family;
	r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
	r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space
			   : (r->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP);
	struct sockaddr *sa = malloc(ai->ai_addrlen);
	if (!sa) {
		free(r);
		freeaddrinfo(all);
		return fail(ENOMEM);
	}
	memcpy(sa, ai->ai_addr, ai->ai_addrlen);
	if (passive) {
		r->ai_src_addr = sa;
		r->ai_src_len = ai->ai_addrlen;
	} else {
		r->ai_dst_addr = sa;
		r->ai_dst_len = ai->ai_addrlen;
		if (hints && hints->ai_src_addr && hints->ai_src_len) {
			r->ai_src_addr = malloc(hints->ai_src_len);
			if (r->ai_src_addr) {
				memcpy(r->ai_src_addr, hints->ai_src_addr, hints->ai_src_len);
				r->ai_src_len = hints->ai_src_len;
			}
		}
	}
	freeaddrinfo(all);
	*res = r;
	return 0;
}

EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}

EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
			  struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *n;
	if (!id || !res)
		return fail(EINVAL);
	if (create_id(NULL, &n, NULL, res->ai_port_space, res->ai_qp_type))
		return -1;
	if (res->ai_flags & RAI_PASSIVE) {
		if (rdma_bind_addr(n, res->ai_src_addr))
			goto err;
	} else {
		if (rdma_resolve_addr(n, res->ai_src_addr, res->ai_dst_addr, 2000))
			goto err;
		if (rdma_resolve_route(n, 2000))
			goto err;
	}
	if (pd)
		n->pd = pd;
	if (qp_init_attr) {
		qp_init_attr->qp_type = res->ai_qp_type;
		if (res->ai_flags & RAI_PASSIVE) { /* for each request's id (rdma_get_request) */
			struct srn_cm_id *c = cid(n);
			c->ep_qp_attr = malloc(sizeof(*qp_init_attr));
			if (!c->ep_qp_attr) {
				errno = ENOMEM;
				goto err;
			}
			*c->ep_qp_attr = *qp_init_attr;
			c->ep_pd = pd;
		} else if (rdma_create_qp(n, pd, qp_init_attr)) {
			goto err;
		}
	}
	*id = n;
	return 0;
err:;
	int e = errno;
	rdma_destroy_ep(n);
	return fail(e);
}

EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

/* --- multicast ------------------------------------------------------------- */

/* mc_gid gives an IPv4 multicast address's GID (IPv4-mapped), or fails. */
static int mc_gid(const struct sockaddr *addr, uint8_t gid[16])
{
	if (!addr)
		return EINVAL;
	if (addr->sa_family != AF_INET)
		return EAFNOSUPPORT; /* softrnic takes IPv4 multicast groups only */
	uint32_t a = ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr);
	if (!IN_MULTICAST(a))
		return EINVAL;
	memset(gid, 0, 16);
	gid[10] = gid[11] = 0xff;
	memcpy(gid + 12, &((const struct sockaddr_in *)addr)->sin_addr, 4);
	return 0;
}

/* rdma_join_multicast joins an IPv4 group on the id's device (bound, or
 * its address resolved): RDMA_CM_EVENT_MULTICAST_JOIN follows, with the
 * group's address vector, QPN and Q_Key, and the id's QP (a UD QP of the
 * UDP port space) attached to it; softrnic's xsk port takes multicast,
 * its udp port does not (the event is then MULTICAST_ERROR,
 * EOPNOTSUPP). */
EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	if (!id)
		return fail(EINVAL);
	struct srn_cm_id *n = cid(id);
	uint8_t gid[16];
	int rc = mc_gid(addr, gid);
	if (rc)
		return fail(rc);
	if (find_mc(n, gid))
		return fail(EADDRINUSE);
	struct srn_mc *m = NULL;
	for (int i = 0; i < SRN_MC_PER_ID && !m; i++)
		if (!n->mc[i].used)
			m = &n->mc[i];
	if (!m)
		return fail(ENOMEM);
	m->used = 1;
	memcpy(m->gid, gid, 16);
	m->context = context;
	rc = srn_cm_join(n->h, gid);
	if (rc < 0) {
		m->used = 0;
		return fail(-rc);
	}
	if (n->sync)
		return wait_event(n, RDMA_CM_EVENT_MULTICAST_JOIN);
	return 0;
}

EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	if (!attr || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS))
		return fail(EINVAL);
	if ((attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) && attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER)
		return fail(EOPNOTSUPP); /* send-only members: not in softrnic */
	return rdma_join_multicast(id, attr->addr, context);
}

/* rdma_leave_multicast leaves a group the id joined: its QP takes the
 * group's datagrams no more. */
EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (!id)
		return fail(EINVAL);
	struct srn_cm_id *n = cid(id);
	uint8_t gid[16];
	int rc = mc_gid(addr, gid);
	if (rc)
		return fail(rc);
	struct srn_mc *m = find_mc(n, gid);
	if (!m)
		return fail(EADDRNOTAVAIL);
	m->used = 0;
	if (id->qp)
		ibv_detach_mcast(id->qp, (const union ibv_gid *)gid, 0);
	return 0;
}

/* --- what softrnic's CM does not do ---------------------------------------- */

EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id;
	(void)ece;
	return fail(EOPNOTSUPP);
}

EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id;
	(void)ece;
	return fail(EOPNOTSUPP);
}

EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return rdma_reject(id, private_data, private_data_len);
}
