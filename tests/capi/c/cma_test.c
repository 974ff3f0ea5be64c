/*
 * cma_test: librdmacm conformance checks for softrnic's C library
 * (lib/librdmacm.so.1 over lib/libibverbs.so.1), written as an ordinary
 * librdmacm program: it is built against the system's <rdma/rdma_cma.h>
 * and <rdma/rdma_verbs.h>, linked with -lrdmacm -libverbs, and runs on
 * softrnic through LD_LIBRARY_PATH.
 *
 *	gcc -std=gnu11 -O1 -g -Wall -Wextra -Werror -o cma_test cma_test.c -lrdmacm -libverbs
 *
 * Modes (two processes: two hosts, or two network namespaces):
 *
 *	cma_test server
 *	cma_test client HOST
 *
 * The parts run in a fixed order on both sides, each connecting part on
 * a port of its own; there is no other channel between the two. The
 * client retries a connect that a server not listening yet rejects (a
 * few times, with a short sleep: bounded).
 *
 *	getaddrinfo   rdma_getaddrinfo (RAI_PASSIVE; a numeric host), rdma_freeaddrinfo
 *	rc            port 18700: an RC connection on an event channel (ADDR_RESOLVED,
 *	              ROUTE_RESOLVED, CONNECT_REQUEST, ESTABLISHED, private data both
 *	              ways), a SEND each way, RDMA WRITE and READ with the R_Keys and
 *	              addresses from the private data, DISCONNECTED on both sides
 *	reject        port 18700: the server rejects a second connection, with private data
 *	no_listener   port 18709 (client): REJECTED or UNREACHABLE, never a hang
 *	migrate       rdma_migrate_id: the id's next event on the other channel
 *	set_option    RDMA_OPTION_ID_TOS; an unknown option fails with errno
 *	event_str     rdma_event_str
 *	ep            port 18701: synchronous endpoints as rdma_server and rdma_client
 *	              use them (rdma_create_ep, rdma_get_request, rdma_accept,
 *	              rdma_connect, the <rdma/rdma_verbs.h> helpers)
 *	ud            port 18702: a UD QP's service through the CM (SIDR, as udaddy)
 *	              and a datagram to the QP number, Q_Key and address it gives
 *
 * Each check prints "ok NAME" or "FAIL NAME: DETAIL"; the last line is
 * "N passed, M failed", and the exit status is 0 only when nothing
 * failed. Every wait is bounded: a poll with a timeout before each
 * rdma_get_cm_event, a deadline on each completion, and a watchdog
 * around each synchronous call.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PORT_RC 18700
#define PORT_EP 18701
#define PORT_UD 18702
#define PORT_NONE 18709 /* no one listens there */

#define EVENT_MS 10000	  /* one CM event */
#define CONNECT_MS 30000  /* a connect's outcome: the CM sends its REQ again each second, 16 times */
#define REQUEST_MS 60000  /* the server's wait for the client's next request */
#define IDLE_MS 50	  /* a poll that should find nothing */
#define WC_MS 10000	  /* one completion */
#define RETRIES 50	  /* connects a server not listening yet rejects */
#define RETRY_SLEEP_MS 200

/* IB's reasons, in a REJECTED event's status. */
#define REJ_INVALID_SERVICE_ID 8 /* no listener */
#define REJ_CONSUMER_DEFINED 28	 /* rdma_reject */

#include "report.h"

static void sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* pattern_byte is byte i of the sequence seed, which both sides can
 * recompute; pattern fills n bytes with it. */
static uint8_t pattern_byte(size_t i, unsigned seed) { return (uint8_t)(seed * 29u + i * 13u + (i >> 8) * 7u + 1u); }

static void pattern(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pattern_byte(i, seed);
}

/* check_pattern checks the n bytes at p byte for byte against pattern seed. */
static int check_pattern(const char *name, const uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pattern_byte(i, seed))
			return check(name, 0, "byte %zu of %zu is 0x%02x, want 0x%02x", i, n, p[i], pattern_byte(i, seed));
	return check(name, 1, "%s", "");
}

/* --- the watchdog: a synchronous call that does not return ------------ */

static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static long long wd_deadline; /* 0: disarmed */
static int wd_ms;
static char wd_name[64];

static void *watchdog(void *arg)
{
	(void)arg;
	for (;;) {
		sleep_ms(100);
		pthread_mutex_lock(&wd_mu);
		if (wd_deadline && now_ms() > wd_deadline) {
			printf("FAIL %s: still blocked after %d ms (giving up)\n", wd_name, wd_ms);
			printf("%d passed, %d failed\n", n_pass, n_fail + 1);
			fflush(stdout);
			_exit(1);
		}
		pthread_mutex_unlock(&wd_mu);
	}
	return NULL;
}

static void arm(const char *name, int ms)
{
	pthread_mutex_lock(&wd_mu);
	snprintf(wd_name, sizeof(wd_name), "%s", name);
	wd_ms = ms;
	wd_deadline = now_ms() + ms;
	pthread_mutex_unlock(&wd_mu);
}

static void disarm(void)
{
	pthread_mutex_lock(&wd_mu);
	wd_deadline = 0;
	pthread_mutex_unlock(&wd_mu);
}

/* --- CM events ------------------------------------------------------------ */

static int n_events, n_acks, n_ack_fails;

static void ack(struct rdma_cm_event *ev)
{
	if (rdma_ack_cm_event(ev) == 0)
		n_acks++;
	else
		n_ack_fails++;
}

/* A CONNECT_REQUEST that came while its channel's owner waited for
 * another event (the client's next connect can overtake the server's
 * DISCONNECTED): kept for the wait that wants it. */
#define NSTASH 4
static struct {
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
} stash[NSTASH];

static int stash_put(struct rdma_event_channel *ch, struct rdma_cm_event *ev)
{
	for (int i = 0; i < NSTASH; i++) {
		if (!stash[i].ev) {
			stash[i].ch = ch;
			stash[i].ev = ev;
			return 1;
		}
	}
	return 0;
}

static struct rdma_cm_event *stash_take(struct rdma_event_channel *ch)
{
	for (int i = 0; i < NSTASH; i++) {
		if (stash[i].ev && stash[i].ch == ch) {
			struct rdma_cm_event *ev = stash[i].ev;
			stash[i].ev = NULL;
			return ev;
		}
	}
	return NULL;
}

/* poll_idle polls the channel's fd for IDLE_MS: 0 if nothing is pending. */
static int poll_idle(struct rdma_event_channel *ch)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	int r;
	do
		r = poll(&p, 1, IDLE_MS);
	while (r < 0 && errno == EINTR);
	return r;
}

/* get_event polls the channel's fd (at most ms), then takes its event. */
static struct rdma_cm_event *get_event(struct rdma_event_channel *ch, int ms, const char *name)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	int r;
	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	if (r == 0) {
		check(name, 0, "no CM event within %d ms", ms);
		timed_out();
		return NULL;
	}
	if (r < 0 || !(p.revents & POLLIN)) {
		check(name, 0, "poll on the channel's fd: %d, revents 0x%x (%s)", r, p.revents, strerror(errno));
		return NULL;
	}
	struct rdma_cm_event *ev = NULL;
	if (rdma_get_cm_event(ch, &ev) != 0 || !ev) {
		check(name, 0, "rdma_get_cm_event: %s", strerror(errno));
		return NULL;
	}
	n_events++;
	printf("# %s: %s, status %d\n", name, rdma_event_str(ev->event), ev->status);
	return ev;
}

/* expect waits for an event of type want (for id, if not NULL); anything
 * else fails the check name, but a CONNECT_REQUEST is kept for later. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, struct rdma_cm_id *id,
				    int ms, const char *name)
{
	struct rdma_cm_event *ev = NULL;
	if (want == RDMA_CM_EVENT_CONNECT_REQUEST)
		ev = stash_take(ch);
	while (!ev) {
		ev = get_event(ch, ms, name);
		if (!ev)
			return NULL;
		if (ev->event != want && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && stash_put(ch, ev))
			ev = NULL;
	}
	if (ev->event != want) {
		check(name, 0, "event %s (status %d), want %s", rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		ack(ev);
		return NULL;
	}
	if (id && ev->id != id) {
		check(name, 0, "%s for id %p, want id %p", rdma_event_str(want), (void *)ev->id, (void *)id);
		ack(ev);
		return NULL;
	}
	return ev;
}

/* --- verbs helpers ----------------------------------------------------- */

static int device_noted;

/* note_device prints the device's line (the Go test reads the port from
 * its fw_ver) once. */
static void note_device(struct ibv_context *ctx)
{
	struct ibv_device_attr da;
	if (device_noted || !ctx)
		return;
	if (ibv_query_device(ctx, &da) == 0) {
		printf("# device %s fw_ver %s\n", ibv_get_device_name(ctx->device), da.fw_ver);
		device_noted = 1;
	}
}

static int softrnic_device(struct rdma_cm_id *id)
{
	return id && id->verbs && strncmp(ibv_get_device_name(id->verbs->device), "softrnic_", 9) == 0;
}

static const char *verbs_name(struct rdma_cm_id *id)
{
	return id && id->verbs ? ibv_get_device_name(id->verbs->device) : "(no verbs)";
}

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (!qp || ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) != 0)
		return -1;
	return a.qp_state;
}


/* expect_wc waits for a successful completion of wr_id with opcode (and,
 * for a receive, byte_len len); it fails the check name otherwise, and
 * passes it only if report is set. */
static int expect_wc(struct ibv_cq *cq, struct ibv_wc *wc, int ms, const char *name, enum ibv_wc_opcode opcode,
		     uint64_t wr_id, int64_t len, int report)
{
	memset(wc, 0, sizeof(*wc));
	if (!wait_wc(cq, wc, ms, name))
		return 0;
	if (wc->status != IBV_WC_SUCCESS)
		return check(name, 0, "status %d (%s); wr_id %llu, opcode %d", wc->status, ibv_wc_status_str(wc->status),
			     (unsigned long long)wc->wr_id, wc->opcode);
	if (wc->wr_id != wr_id)
		return check(name, 0, "wr_id %llu, want %llu", (unsigned long long)wc->wr_id, (unsigned long long)wr_id);
	if (wc->opcode != opcode)
		return check(name, 0, "opcode %d, want %d", wc->opcode, opcode);
	if (len >= 0 && wc->byte_len != (uint32_t)len)
		return check(name, 0, "byte_len %u, want %lld", wc->byte_len, (long long)len);
	return report ? check(name, 1, "%s", "") : 1;
}

static int post_recv(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sg = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sg, .num_sge = 1}, *bad = NULL;
	return ibv_post_recv(qp, &wr, &bad);
}

static int post_send(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, void *addr, uint32_t len, uint32_t lkey,
		     uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sg = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sg, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED},
			   *bad = NULL;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

/* --- addresses and private data ---------------------------------------- */

static struct sockaddr_in peer_addr; /* the client: the server's; the server: the client's (from its request) */

static struct sockaddr *at_port(struct sockaddr_in *out, const struct sockaddr_in *a, int port)
{
	*out = *a;
	out->sin_port = htons((uint16_t)port);
	return (struct sockaddr *)out;
}

static struct sockaddr *any_port(struct sockaddr_in *out, int port)
{
	memset(out, 0, sizeof(*out));
	out->sin_family = AF_INET;
	out->sin_addr.s_addr = htonl(INADDR_ANY);
	out->sin_port = htons((uint16_t)port);
	return (struct sockaddr *)out;
}

/* What a connect, an accept or a reject carries: 40 bytes. */
struct pdata {
	char tag[24];
	uint64_t addr; /* big-endian: the buffer the peer may WRITE and READ */
	uint32_t rkey; /* big-endian */
	uint32_t qpn;  /* big-endian: a UD QP's number */
};
_Static_assert(sizeof(struct pdata) == 40, "40 bytes of private data");

static struct pdata make_pdata(const char *tag, struct ibv_mr *mr, uint32_t qpn)
{
	struct pdata p;
	memset(&p, 0, sizeof(p));
	snprintf(p.tag, sizeof(p.tag), "%s", tag);
	if (mr) {
		p.addr = htobe64((uint64_t)(uintptr_t)mr->addr);
		p.rkey = htobe32(mr->rkey);
	}
	p.qpn = htobe32(qpn);
	return p;
}

/* got_pdata checks that private data begins with a pdata tagged tag, and
 * copies it to out. */
static int got_pdata(const char *name, const void *data, unsigned len, const char *tag, struct pdata *out)
{
	struct pdata want = make_pdata(tag, NULL, 0);
	if (!data || len < sizeof(struct pdata))
		return check(name, 0, "private data %p of %u bytes, want at least %zu", data, len, sizeof(struct pdata));
	memcpy(out, data, sizeof(*out));
	if (memcmp(out->tag, want.tag, sizeof(want.tag)) != 0)
		return check(name, 0, "private data begins \"%.24s\", want \"%s\"", out->tag, tag);
	return 1;
}

/* --- the RC connection's buffer ------------------------------------------ */

#define MSG_LEN 64
#define DONE_LEN 16
#define AREA 4096
#define OFF_RECV0 0	     /* the first receive */
#define OFF_RECV1 256	     /* the second */
#define OFF_SEND AREA	     /* what this side SENDs */
#define OFF_WRITE (2 * AREA) /* client: what it WRITEs; server: where the WRITE lands */
#define OFF_EXPO (3 * AREA)  /* what the peer READs */
#define OFF_READ (4 * AREA)  /* where this side's READ lands */
#define BUF_LEN (5 * AREA)

/* Seeds of the patterns. */
enum {
	SEED_WRITE = 1,	  /* the client's WRITE */
	SEED_S_EXPO = 2,  /* the server's area the client READs */
	SEED_C_EXPO = 3,  /* the client's area the server READs */
	SEED_C_SEND = 4,  /* the client's SEND */
	SEED_S_SEND = 5,  /* the server's SEND */
	SEED_C_DONE = 6,  /* the client: written and read */
	SEED_S_DONE = 7,  /* the server: read */
	SEED_EP_C = 9,	  /* the endpoints' SENDs */
	SEED_EP_S = 10,
	SEED_UD = 11,	  /* the datagram */
};

enum { WR_RECV0 = 1, WR_RECV1, WR_SEND, WR_WRITE, WR_READ, WR_DONE };

static uint8_t *alloc_buf(size_t n)
{
	uint8_t *b = aligned_alloc(4096, n);
	if (!b)
		fatal("alloc", "out of memory");
	memset(b, 0, n);
	return b;
}

static struct ibv_qp_init_attr rc_attr(struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.cap.max_send_wr = 16;
	a.cap.max_recv_wr = 16;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	return a;
}

/* --- getaddrinfo ------------------------------------------------------- */

static void part_getaddrinfo(int server, const char *host)
{
	struct rdma_addrinfo hints, *res = NULL;
	char port[16];
	snprintf(port, sizeof(port), "%d", PORT_RC);
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	if (server) {
		hints.ai_flags = RAI_PASSIVE;
		int rc = rdma_getaddrinfo(NULL, port, &hints, &res);
		const struct sockaddr_in *sin = res ? (const struct sockaddr_in *)res->ai_src_addr : NULL;
		check("rdma_getaddrinfo", rc == 0 && res && sin && sin->sin_family == AF_INET && res->ai_family == AF_INET &&
						  res->ai_src_len == sizeof(struct sockaddr_in) &&
						  sin->sin_addr.s_addr == htonl(INADDR_ANY) && ntohs(sin->sin_port) == PORT_RC &&
						  (res->ai_flags & RAI_PASSIVE) && res->ai_port_space == RDMA_PS_TCP &&
						  res->ai_qp_type == IBV_QPT_RC,
		      "RAI_PASSIVE, port %s: rc %d (errno %s), src %s:%d family %d len %u, flags 0x%x ps 0x%x qp_type %d",
		      port, rc, strerror(errno), sin ? inet_ntoa(sin->sin_addr) : "-", sin ? ntohs(sin->sin_port) : -1,
		      res ? res->ai_family : -1, res ? (unsigned)res->ai_src_len : 0, res ? res->ai_flags : 0,
		      res ? res->ai_port_space : 0, res ? res->ai_qp_type : -1);
	} else {
		struct in_addr want;
		hints.ai_flags = RAI_NUMERICHOST;
		int rc = rdma_getaddrinfo(host, port, &hints, &res);
		const struct sockaddr_in *sin = res ? (const struct sockaddr_in *)res->ai_dst_addr : NULL;
		int ok = rc == 0 && res && sin && sin->sin_family == AF_INET && res->ai_family == AF_INET &&
			 res->ai_dst_len == sizeof(struct sockaddr_in) && inet_pton(AF_INET, host, &want) == 1 &&
			 sin->sin_addr.s_addr == want.s_addr && ntohs(sin->sin_port) == PORT_RC &&
			 res->ai_port_space == RDMA_PS_TCP && res->ai_qp_type == IBV_QPT_RC;
		check("rdma_getaddrinfo", ok, "%s port %s: rc %d (errno %s), dst %s:%d family %d len %u, ps 0x%x qp_type %d",
		      host, port, rc, strerror(errno), sin ? inet_ntoa(sin->sin_addr) : "-", sin ? ntohs(sin->sin_port) : -1,
		      res ? res->ai_family : -1, res ? (unsigned)res->ai_dst_len : 0, res ? res->ai_port_space : 0,
		      res ? res->ai_qp_type : -1);
		if (!ok) {
			if (res)
				rdma_freeaddrinfo(res);
			fatal("rdma_getaddrinfo", "no address for the server");
		}
		memcpy(&peer_addr, sin, sizeof(peer_addr));
	}
	if (res)
		rdma_freeaddrinfo(res);
	check("rdma_freeaddrinfo", 1, "%s", "");
}

/* --- rc: the server ------------------------------------------------------- */

static struct {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen, *id;
	struct ibv_pd *pd;	    /* the server's own */
	struct ibv_cq *scq, *rcq; /* the server's own */
	struct ibv_mr *mr;
	uint8_t *buf;
	uint64_t peer_addr;
	uint32_t peer_rkey;
} R;

static void rc_server_data(void)
{
	struct ibv_wc wc;
	struct ibv_qp *qp = R.id->qp;
	/* The client's SEND. */
	if (expect_wc(R.rcq, &wc, WC_MS, "rc_send_c2s", IBV_WC_RECV, WR_RECV0, MSG_LEN, 0))
		check_pattern("rc_send_c2s", R.buf + OFF_RECV0, MSG_LEN, SEED_C_SEND);
	check("rc_post_recv", post_recv(qp, WR_RECV1, R.buf + OFF_RECV1, 256, R.mr->lkey) == 0, "ibv_post_recv failed");
	/* One back. */
	pattern(R.buf + OFF_SEND, MSG_LEN, SEED_S_SEND);
	int rc = post_send(qp, WR_SEND, IBV_WR_SEND, R.buf + OFF_SEND, MSG_LEN, R.mr->lkey, 0, 0);
	if (check("rc_send_s2c_post", rc == 0, "ibv_post_send: %d (%s)", rc, strerror(rc)))
		expect_wc(R.scq, &wc, WC_MS, "rc_send_s2c_completion", IBV_WC_SEND, WR_SEND, -1, 1);
	/* The client WRITEs and READs, then says so. */
	if (expect_wc(R.rcq, &wc, WC_MS, "rc_client_done", IBV_WC_RECV, WR_RECV1, DONE_LEN, 0) &&
	    check_pattern("rc_client_done", R.buf + OFF_RECV1, DONE_LEN, SEED_C_DONE))
		check_pattern("rc_write_data", R.buf + OFF_WRITE, AREA, SEED_WRITE);
	/* This side READs the client's area, with the address and R_Key of its private data. */
	rc = post_send(qp, WR_READ, IBV_WR_RDMA_READ, R.buf + OFF_READ, AREA, R.mr->lkey, R.peer_addr + OFF_EXPO,
		       R.peer_rkey);
	if (check("rc_read_by_server_post", rc == 0, "ibv_post_send: %d (%s)", rc, strerror(rc)) &&
	    expect_wc(R.scq, &wc, WC_MS, "rc_read_by_server", IBV_WC_RDMA_READ, WR_READ, -1, 0))
		check_pattern("rc_read_by_server", R.buf + OFF_READ, AREA, SEED_C_EXPO);
	pattern(R.buf + OFF_SEND, DONE_LEN, SEED_S_DONE);
	rc = post_send(qp, WR_DONE, IBV_WR_SEND, R.buf + OFF_SEND, DONE_LEN, R.mr->lkey, 0, 0);
	if (check("rc_server_done_post", rc == 0, "ibv_post_send: %d (%s)", rc, strerror(rc)))
		expect_wc(R.scq, &wc, WC_MS, "rc_server_done", IBV_WC_SEND, WR_DONE, -1, 1);
}

static void part_rc_server(void)
{
	struct sockaddr_in sa;
	struct rdma_cm_event *ev;
	int got;

	R.ch = rdma_create_event_channel();
	if (!check("rdma_create_event_channel", R.ch && R.ch->fd >= 0, "%s", strerror(errno)))
		fatal("rc", "no event channel");
	got = poll_idle(R.ch);
	check("channel_poll_idle", got == 0, "poll before anything is pending returned %d", got);
	int rc = rdma_create_id(R.ch, &R.listen, NULL, RDMA_PS_TCP);
	if (!check("rdma_create_id", rc == 0 && R.listen && R.listen->channel == R.ch && R.listen->ps == RDMA_PS_TCP,
		   "rc %d: %s", rc, strerror(errno)))
		fatal("rc", "no id");
	rc = rdma_bind_addr(R.listen, any_port(&sa, PORT_RC));
	check("rdma_bind_addr", rc == 0 && ntohs(rdma_get_src_port(R.listen)) == PORT_RC, "0.0.0.0:%d: rc %d (%s), port %d",
	      PORT_RC, rc, strerror(errno), ntohs(rdma_get_src_port(R.listen)));
	rc = rdma_listen(R.listen, 8);
	if (!check("rdma_listen", rc == 0, "rc %d: %s", rc, strerror(errno)))
		fatal("rc", "not listening");

	/* The client's request: a new id on the listener's channel. */
	ev = expect(R.ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, REQUEST_MS, "connect_request");
	if (!ev)
		fatal("rc", "no connection request");
	R.id = ev->id;
	struct pdata cp;
	check("connect_request_listen_id", ev->listen_id == R.listen && R.id && R.id != R.listen,
	      "listen_id %p (want %p), id %p", (void *)ev->listen_id, (void *)R.listen, (void *)R.id);
	note_device(R.id->verbs);
	check("connect_request_verbs", softrnic_device(R.id) && R.id->channel == R.ch, "the new id's verbs: %s, channel %p",
	      verbs_name(R.id), (void *)R.id->channel);
	if (got_pdata("connect_request_private_data", ev->param.conn.private_data, ev->param.conn.private_data_len,
		      "hello from client", &cp)) {
		R.peer_addr = be64toh(cp.addr);
		R.peer_rkey = be32toh(cp.rkey);
		check("connect_request_private_data", R.peer_addr && R.peer_rkey, "no address or R_Key in it");
	}
	printf("# connect_request: private_data_len %u\n", ev->param.conn.private_data_len);
	check("connect_request_param", ev->param.conn.responder_resources == 1 && ev->param.conn.initiator_depth == 1,
	      "responder_resources %u initiator_depth %u, want 1 and 1", ev->param.conn.responder_resources,
	      ev->param.conn.initiator_depth);
	const struct sockaddr_in *pa = (const struct sockaddr_in *)rdma_get_peer_addr(R.id);
	if (check("connect_request_addrs", pa->sin_family == AF_INET && pa->sin_addr.s_addr != htonl(INADDR_ANY) &&
						   ntohs(rdma_get_src_port(R.id)) == PORT_RC,
		  "peer %s (family %d), local port %d", inet_ntoa(pa->sin_addr), pa->sin_family,
		  ntohs(rdma_get_src_port(R.id))))
		memcpy(&peer_addr, pa, sizeof(peer_addr));
	printf("# request from %s\n", inet_ntoa(peer_addr.sin_addr));
	ack(ev);

	/* Its QP: with this program's own PD and CQs. */
	R.pd = ibv_alloc_pd(R.id->verbs);
	R.scq = ibv_create_cq(R.id->verbs, 16, NULL, NULL, 0);
	R.rcq = ibv_create_cq(R.id->verbs, 16, NULL, NULL, 0);
	if (!R.pd || !R.scq || !R.rcq)
		fatal("rc_own_pd_cq", "ibv_alloc_pd or ibv_create_cq failed");
	struct ibv_qp_init_attr qa = rc_attr(R.scq, R.rcq);
	rc = rdma_create_qp(R.id, R.pd, &qa);
	if (!check("rdma_create_qp_own_pd", rc == 0 && R.id->qp && R.id->qp->pd == R.pd && R.id->pd == R.pd &&
						    R.id->send_cq == R.scq && R.id->recv_cq == R.rcq,
		   "rc %d (%s), qp %p, pd %p (want %p), cqs %p %p", rc, strerror(errno), (void *)R.id->qp,
		   R.id->qp ? (void *)R.id->qp->pd : NULL, (void *)R.pd, (void *)R.id->send_cq, (void *)R.id->recv_cq))
		fatal("rc", "no QP");
	check("rc_qp_init", qp_state(R.id->qp) == IBV_QPS_INIT, "state %d after rdma_create_qp, want INIT",
	      qp_state(R.id->qp));
	R.buf = alloc_buf(BUF_LEN);
	pattern(R.buf + OFF_EXPO, AREA, SEED_S_EXPO);
	R.mr = ibv_reg_mr(R.pd, R.buf, BUF_LEN,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!R.mr)
		fatal("rc_reg_mr", strerror(errno));
	check("rc_post_recv_before_accept", post_recv(R.id->qp, WR_RECV0, R.buf + OFF_RECV0, 256, R.mr->lkey) == 0,
	      "ibv_post_recv failed");

	struct pdata sp = make_pdata("hello from server", R.mr, 0);
	struct rdma_conn_param param;
	memset(&param, 0, sizeof(param));
	param.private_data = &sp;
	param.private_data_len = sizeof(sp);
	param.responder_resources = 1;
	param.initiator_depth = 1;
	param.rnr_retry_count = 7;
	rc = rdma_accept(R.id, &param);
	if (!check("rdma_accept", rc == 0, "rc %d: %s", rc, strerror(errno)))
		fatal("rc", "not accepted");
	ev = expect(R.ch, RDMA_CM_EVENT_ESTABLISHED, R.id, CONNECT_MS, "established");
	if (!ev)
		fatal("rc", "not established");
	check("established", 1, "%s", "");
	ack(ev);
	check("rc_qp_rts", qp_state(R.id->qp) == IBV_QPS_RTS, "state %d, want RTS", qp_state(R.id->qp));

	rc_server_data();

	/* The client disconnects. */
	ev = expect(R.ch, RDMA_CM_EVENT_DISCONNECTED, R.id, EVENT_MS, "disconnected");
	if (ev) {
		check("disconnected", 1, "%s", "");
		ack(ev);
	}
	rdma_destroy_qp(R.id);
	check("rdma_destroy_qp", R.id->qp == NULL, "id->qp %p after rdma_destroy_qp", (void *)R.id->qp);
	check("rc_own_pd_cq_destroy",
	      ibv_dereg_mr(R.mr) == 0 && ibv_destroy_cq(R.scq) == 0 && ibv_destroy_cq(R.rcq) == 0 && ibv_dealloc_pd(R.pd) == 0,
	      "ibv_dereg_mr, ibv_destroy_cq or ibv_dealloc_pd failed: %s", strerror(errno));
	rc = rdma_destroy_id(R.id);
	check("rdma_destroy_id", rc == 0, "rc %d: %s", rc, strerror(errno));
	R.id = NULL;
	free(R.buf);
}

static void part_reject_server(void)
{
	struct rdma_cm_event *ev = expect(R.ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, REQUEST_MS, "reject_request");
	if (ev) {
		struct rdma_cm_id *id = ev->id;
		struct pdata cp;
		check("reject_request", ev->listen_id == R.listen && id && id != R.listen, "listen_id %p (want %p), id %p",
		      (void *)ev->listen_id, (void *)R.listen, (void *)id);
		if (got_pdata("reject_request_private_data", ev->param.conn.private_data, ev->param.conn.private_data_len,
			      "second client", &cp))
			check("reject_request_private_data", 1, "%s", "");
		ack(ev);
		struct pdata rp = make_pdata("rejected by server", NULL, 0);
		int rc = rdma_reject(id, &rp, sizeof(rp));
		check("rdma_reject", rc == 0, "rc %d: %s", rc, strerror(errno));
		rc = rdma_destroy_id(id);
		check("rdma_destroy_id_rejected", rc == 0, "rc %d: %s", rc, strerror(errno));
	}
	int rc = rdma_destroy_id(R.listen);
	check("rdma_destroy_id_listener", rc == 0, "rc %d: %s", rc, strerror(errno));
	rdma_destroy_event_channel(R.ch);
	check("rdma_destroy_event_channel", 1, "%s", "");
}

/* --- rc: the client ---------------------------------------------------- */

/* active_id makes an id on ch and resolves its address and route to
 * dst; with what, its checks are named what_*. */
static struct rdma_cm_id *active_id(struct rdma_event_channel *ch, enum rdma_port_space ps, struct sockaddr *dst_addr,
				    const char *what)
{
	char name[64];
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *ev;
	snprintf(name, sizeof(name), "%s_create_id", what);
	int rc = rdma_create_id(ch, &id, NULL, ps);
	if (!check(name, rc == 0 && id && id->channel == ch && id->ps == ps, "rc %d: %s", rc, strerror(errno)))
		return NULL;
	snprintf(name, sizeof(name), "%s_resolve_addr", what);
	rc = rdma_resolve_addr(id, NULL, dst_addr, 2000);
	if (!check(name, rc == 0, "rdma_resolve_addr: rc %d (%s)", rc, strerror(errno)))
		goto err;
	snprintf(name, sizeof(name), "%s_addr_resolved", what);
	ev = expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, id, EVENT_MS, name);
	if (!ev)
		goto err;
	note_device(id->verbs);
	int ok = check(name, ev->status == 0 && softrnic_device(id), "status %d, id->verbs %s, want softrnic_<netdev>",
		       ev->status, verbs_name(id));
	ack(ev);
	if (!ok)
		goto err;
	snprintf(name, sizeof(name), "%s_resolve_route", what);
	rc = rdma_resolve_route(id, 2000);
	if (!check(name, rc == 0, "rdma_resolve_route: rc %d (%s)", rc, strerror(errno)))
		goto err;
	snprintf(name, sizeof(name), "%s_route_resolved", what);
	ev = expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, id, EVENT_MS, name);
	if (!ev)
		goto err;
	ok = check(name, ev->status == 0, "status %d", ev->status);
	ack(ev);
	const struct sockaddr_in *src = (const struct sockaddr_in *)rdma_get_local_addr(id),
				 *dst = (const struct sockaddr_in *)rdma_get_peer_addr(id);
	const struct sockaddr_in *want = (const struct sockaddr_in *)dst_addr;
	char local[INET_ADDRSTRLEN], peer[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &src->sin_addr, local, sizeof(local));
	inet_ntop(AF_INET, &dst->sin_addr, peer, sizeof(peer));
	snprintf(name, sizeof(name), "%s_route_addrs", what);
	check(name, src->sin_family == AF_INET && src->sin_addr.s_addr != htonl(INADDR_ANY) && dst->sin_family == AF_INET &&
			    dst->sin_addr.s_addr == want->sin_addr.s_addr && rdma_get_dst_port(id) == want->sin_port,
	      "local %s (family %d), peer %s:%d (family %d)", local, src->sin_family, peer, ntohs(rdma_get_dst_port(id)),
	      dst->sin_family);
	if (ok)
		return id;
err:
	rdma_destroy_id(id);
	return NULL;
}

/* active_qp gives id an RC QP with the library's PD and CQs (pd NULL, no
 * CQs named), and an MR over buf in the id's PD. */
static int active_qp(struct rdma_cm_id *id, uint8_t *buf, struct ibv_mr **mr, const char *what)
{
	char name[64];
	struct ibv_qp_init_attr qa = rc_attr(NULL, NULL);
	snprintf(name, sizeof(name), "%s_create_qp", what);
	int rc = rdma_create_qp(id, NULL, &qa);
	if (!check(name, rc == 0 && id->qp && id->pd && id->qp->pd == id->pd && id->send_cq && id->recv_cq &&
				 qa.send_cq == id->send_cq && qa.recv_cq == id->recv_cq,
		   "rc %d (%s), qp %p, id->pd %p, qp->pd %p, cqs %p %p", rc, strerror(errno), (void *)id->qp, (void *)id->pd,
		   id->qp ? (void *)id->qp->pd : NULL, (void *)id->send_cq, (void *)id->recv_cq))
		return 0;
	snprintf(name, sizeof(name), "%s_qp_init", what);
	check(name, qp_state(id->qp) == IBV_QPS_INIT, "state %d after rdma_create_qp, want INIT", qp_state(id->qp));
	*mr = ibv_reg_mr(id->pd, buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	snprintf(name, sizeof(name), "%s_reg_mr", what);
	if (!check(name, *mr != NULL, "ibv_reg_mr in the id's PD: %s", strerror(errno))) {
		rdma_destroy_qp(id);
		return 0;
	}
	return 1;
}

static void drop_active(struct rdma_cm_id *id, struct ibv_mr *mr)
{
	rdma_destroy_qp(id);
	if (mr)
		ibv_dereg_mr(mr);
	rdma_destroy_id(id);
}

static struct rdma_conn_param conn_param(const struct pdata *p)
{
	struct rdma_conn_param c;
	memset(&c, 0, sizeof(c));
	c.private_data = p;
	c.private_data_len = sizeof(*p);
	c.responder_resources = 1;
	c.initiator_depth = 1;
	c.retry_count = 7;
	c.rnr_retry_count = 7;
	return c;
}

/* retryable: a connect the server rejected because nothing listens there
 * (yet), or one it did not answer (its CM not started). */
static int retryable(const struct rdma_cm_event *ev, int attempt)
{
	if (attempt + 1 >= RETRIES)
		return 0;
	return (ev->event == RDMA_CM_EVENT_REJECTED && ev->status == REJ_INVALID_SERVICE_ID) ||
	       ev->event == RDMA_CM_EVENT_UNREACHABLE;
}

static struct {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	uint8_t *buf;
	uint64_t peer_addr;
	uint32_t peer_rkey;
} C;

static void rc_client_data(void)
{
	struct ibv_wc wc;
	struct ibv_qp *qp = C.id->qp;
	pattern(C.buf + OFF_SEND, MSG_LEN, SEED_C_SEND);
	int rc = post_send(qp, WR_SEND, IBV_WR_SEND, C.buf + OFF_SEND, MSG_LEN, C.mr->lkey, 0, 0);
	if (check("rc_send_c2s_post", rc == 0, "ibv_post_send: %d (%s)", rc, strerror(rc)))
		expect_wc(C.id->send_cq, &wc, WC_MS, "rc_send_c2s_completion", IBV_WC_SEND, WR_SEND, -1, 1);
	/* The server's SEND, into the receive posted before rdma_connect. */
	if (expect_wc(C.id->recv_cq, &wc, WC_MS, "rc_send_s2c", IBV_WC_RECV, WR_RECV0, MSG_LEN, 0))
		check_pattern("rc_send_s2c", C.buf + OFF_RECV0, MSG_LEN, SEED_S_SEND);
	check("rc_post_recv", post_recv(qp, WR_RECV1, C.buf + OFF_RECV1, 256, C.mr->lkey) == 0, "ibv_post_recv failed");
	/* WRITE to the server's buffer, READ from it: its address and R_Key came in the private data. */
	pattern(C.buf + OFF_WRITE, AREA, SEED_WRITE);
	rc = post_send(qp, WR_WRITE, IBV_WR_RDMA_WRITE, C.buf + OFF_WRITE, AREA, C.mr->lkey, C.peer_addr + OFF_WRITE,
		       C.peer_rkey);
	if (check("rc_write_post", rc == 0, "ibv_post_send: %d (%s)", rc, strerror(rc)))
		expect_wc(C.id->send_cq, &wc, WC_MS, "rc_write", IBV_WC_RDMA_WRITE, WR_WRITE, -1, 1);
	rc = post_send(qp, WR_READ, IBV_WR_RDMA_READ, C.buf + OFF_READ, AREA, C.mr->lkey, C.peer_addr + OFF_EXPO,
		       C.peer_rkey);
	if (check("rc_read_post", rc == 0, "ibv_post_send: %d (%s)", rc, strerror(rc)) &&
	    expect_wc(C.id->send_cq, &wc, WC_MS, "rc_read", IBV_WC_RDMA_READ, WR_READ, -1, 0))
		check_pattern("rc_read", C.buf + OFF_READ, AREA, SEED_S_EXPO);
	pattern(C.buf + OFF_SEND, DONE_LEN, SEED_C_DONE);
	rc = post_send(qp, WR_DONE, IBV_WR_SEND, C.buf + OFF_SEND, DONE_LEN, C.mr->lkey, 0, 0);
	if (check("rc_client_done_post", rc == 0, "ibv_post_send: %d (%s)", rc, strerror(rc)))
		expect_wc(C.id->send_cq, &wc, WC_MS, "rc_client_done", IBV_WC_SEND, WR_DONE, -1, 1);
	/* The server READs this side's area, then says so. */
	if (expect_wc(C.id->recv_cq, &wc, WC_MS, "rc_server_done", IBV_WC_RECV, WR_RECV1, DONE_LEN, 0))
		check_pattern("rc_server_done", C.buf + OFF_RECV1, DONE_LEN, SEED_S_DONE);
}

static void part_rc_client(void)
{
	struct sockaddr_in sa;
	struct rdma_cm_event *ev = NULL;
	int got;

	C.ch = rdma_create_event_channel();
	if (!check("rdma_create_event_channel", C.ch && C.ch->fd >= 0, "%s", strerror(errno)))
		fatal("rc", "no event channel");
	got = poll_idle(C.ch);
	check("channel_poll_idle", got == 0, "poll before anything is pending returned %d", got);
	C.buf = alloc_buf(BUF_LEN);
	pattern(C.buf + OFF_EXPO, AREA, SEED_C_EXPO);
	for (int attempt = 0;; attempt++) {
		quiet = attempt > 0;
		C.id = active_id(C.ch, RDMA_PS_TCP, at_port(&sa, &peer_addr, PORT_RC), "rc");
		if (!C.id)
			fatal("rc", "no resolved id");
		if (!active_qp(C.id, C.buf, &C.mr, "rc"))
			fatal("rc", "no QP");
		check("rc_post_recv_before_connect", post_recv(C.id->qp, WR_RECV0, C.buf + OFF_RECV0, 256, C.mr->lkey) == 0,
		      "ibv_post_recv failed");
		struct pdata cp = make_pdata("hello from client", C.mr, 0);
		struct rdma_conn_param param = conn_param(&cp);
		int rc = rdma_connect(C.id, &param);
		if (!check("rdma_connect", rc == 0, "rc %d: %s", rc, strerror(errno)))
			fatal("rc", "no connect");
		quiet = 0;
		ev = get_event(C.ch, CONNECT_MS, "rc_connect");
		if (!ev)
			fatal("rc", "no answer to the connect");
		if (ev->event == RDMA_CM_EVENT_ESTABLISHED || !retryable(ev, attempt))
			break;
		printf("# rc: attempt %d: %s, status %d: the server is not listening yet\n", attempt + 1,
		       rdma_event_str(ev->event), ev->status);
		ack(ev);
		drop_active(C.id, C.mr);
		sleep_ms(RETRY_SLEEP_MS);
	}
	if (!check("established", ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->id == C.id && ev->status == 0,
		   "%s (status %d) for id %p, want ESTABLISHED for %p", rdma_event_str(ev->event), ev->status, (void *)ev->id,
		   (void *)C.id)) {
		ack(ev);
		fatal("rc", "not established");
	}
	/* The REP's values, as the kernel's CM reports them: the server accepted with 1 and 1. */
	check("established_param", ev->param.conn.responder_resources == 1 && ev->param.conn.initiator_depth == 1 &&
				       ev->param.conn.qp_num != 0,
	      "responder_resources %u initiator_depth %u qp_num %u, want 1, 1 and the server's QP",
	      ev->param.conn.responder_resources, ev->param.conn.initiator_depth, ev->param.conn.qp_num);
	struct pdata sp;
	if (got_pdata("established_private_data", ev->param.conn.private_data, ev->param.conn.private_data_len,
		      "hello from server", &sp)) {
		C.peer_addr = be64toh(sp.addr);
		C.peer_rkey = be32toh(sp.rkey);
		check("established_private_data", C.peer_addr && C.peer_rkey, "no address or R_Key in it");
	}
	ack(ev);
	check("rc_qp_rts", qp_state(C.id->qp) == IBV_QPS_RTS, "state %d, want RTS", qp_state(C.id->qp));

	rc_client_data();

	int rc = rdma_disconnect(C.id);
	check("rdma_disconnect", rc == 0, "rc %d: %s", rc, strerror(errno));
	ev = expect(C.ch, RDMA_CM_EVENT_DISCONNECTED, C.id, EVENT_MS, "disconnected");
	if (ev) {
		check("disconnected", 1, "%s", "");
		ack(ev);
	}
	rdma_destroy_qp(C.id);
	check("rdma_destroy_qp", C.id->qp == NULL && C.id->send_cq == NULL && C.id->recv_cq == NULL,
	      "id->qp %p, cqs %p %p after rdma_destroy_qp", (void *)C.id->qp, (void *)C.id->send_cq, (void *)C.id->recv_cq);
	ibv_dereg_mr(C.mr);
	rc = rdma_destroy_id(C.id);
	check("rdma_destroy_id", rc == 0, "rc %d: %s", rc, strerror(errno));
	C.id = NULL;
}

/* A second connection to the same listener: the server rejects it. */
static void part_reject_client(void)
{
	struct sockaddr_in sa;
	struct ibv_mr *mr = NULL;
	struct rdma_cm_id *id = active_id(C.ch, RDMA_PS_TCP, at_port(&sa, &peer_addr, PORT_RC), "reject");
	if (!id)
		return;
	if (!active_qp(id, C.buf, &mr, "reject")) {
		rdma_destroy_id(id);
		return;
	}
	struct pdata cp = make_pdata("second client", mr, 0);
	struct rdma_conn_param param = conn_param(&cp);
	int rc = rdma_connect(id, &param);
	if (check("reject_connect", rc == 0, "rdma_connect: rc %d (%s)", rc, strerror(errno))) {
		struct rdma_cm_event *ev = get_event(C.ch, CONNECT_MS, "rejected");
		if (ev) {
			struct pdata rp;
			printf("# rejected: private_data_len %u\n", ev->param.conn.private_data_len);
			if (check("rejected", ev->event == RDMA_CM_EVENT_REJECTED && ev->id == id &&
						      ev->status == REJ_CONSUMER_DEFINED,
				  "%s (status %d) for id %p, want REJECTED (status %d, consumer defined) for %p",
				  rdma_event_str(ev->event), ev->status, (void *)ev->id, REJ_CONSUMER_DEFINED, (void *)id) &&
			    got_pdata("rejected_private_data", ev->param.conn.private_data, ev->param.conn.private_data_len,
				      "rejected by server", &rp))
				check("rejected_private_data", 1, "%s", "");
			ack(ev);
		}
	}
	drop_active(id, mr);
}

/* A connect to a port no one listens on fails, at once or in time. */
static void part_no_listener_client(void)
{
	struct sockaddr_in sa;
	struct ibv_mr *mr = NULL;
	struct rdma_cm_id *id = active_id(C.ch, RDMA_PS_TCP, at_port(&sa, &peer_addr, PORT_NONE), "no_listener");
	if (!id)
		return;
	if (!active_qp(id, C.buf, &mr, "no_listener")) {
		rdma_destroy_id(id);
		return;
	}
	struct pdata cp = make_pdata("nobody there", mr, 0);
	struct rdma_conn_param param = conn_param(&cp);
	long long t0 = now_ms();
	int rc = rdma_connect(id, &param);
	if (check("no_listener_connect", rc == 0, "rdma_connect: rc %d (%s)", rc, strerror(errno))) {
		struct rdma_cm_event *ev = get_event(C.ch, CONNECT_MS, "no_listener");
		if (ev) {
			check("no_listener", (ev->event == RDMA_CM_EVENT_REJECTED || ev->event == RDMA_CM_EVENT_UNREACHABLE) &&
						     ev->id == id,
			      "%s (status %d) for id %p, want REJECTED or UNREACHABLE for %p", rdma_event_str(ev->event),
			      ev->status, (void *)ev->id, (void *)id);
			printf("# no_listener: the connect failed after %lld ms\n", now_ms() - t0);
			ack(ev);
		}
	}
	drop_active(id, mr);
	rdma_destroy_event_channel(C.ch);
	check("rdma_destroy_event_channel", 1, "%s", "");
	free(C.buf);
}

/* --- local parts: migrate, set_option, event_str ---------------------- */

static void part_migrate(void)
{
	struct sockaddr_in sa;
	struct rdma_event_channel *a = rdma_create_event_channel(), *b = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *ev;
	int got;
	if (!check("migrate_channels", a && b, "rdma_create_event_channel: %s", strerror(errno)))
		return;
	int rc = rdma_create_id(a, &id, NULL, RDMA_PS_TCP);
	if (!check("migrate_create_id", rc == 0 && id, "rc %d: %s", rc, strerror(errno)))
		goto out;
	/* The peer answers ARP: the id resolves its address on a. */
	rc = rdma_resolve_addr(id, NULL, at_port(&sa, &peer_addr, PORT_NONE), 2000);
	if (!check("migrate_resolve_addr", rc == 0, "rc %d: %s", rc, strerror(errno)))
		goto out_id;
	ev = expect(a, RDMA_CM_EVENT_ADDR_RESOLVED, id, EVENT_MS, "migrate_addr_resolved");
	if (!ev)
		goto out_id;
	ack(ev);
	rc = rdma_migrate_id(id, b);
	if (!check("rdma_migrate_id", rc == 0 && id->channel == b, "rc %d (%s), id->channel %p, want %p", rc,
		   strerror(errno), (void *)id->channel, (void *)b))
		goto out_id;
	/* Its next event comes on b, and none on a. */
	rc = rdma_resolve_route(id, 2000);
	if (!check("migrate_resolve_route", rc == 0, "rc %d: %s", rc, strerror(errno)))
		goto out_id;
	ev = expect(b, RDMA_CM_EVENT_ROUTE_RESOLVED, id, EVENT_MS, "migrate_event_on_new_channel");
	if (ev) {
		check("migrate_event_on_new_channel", 1, "%s", "");
		ack(ev);
	}
	got = poll_idle(a);
	check("migrate_old_channel_idle", got == 0, "poll on the old channel returned %d", got);
out_id:
	rc = rdma_destroy_id(id);
	check("migrate_destroy_id", rc == 0, "rc %d: %s", rc, strerror(errno));
out:
	if (a)
		rdma_destroy_event_channel(a);
	if (b)
		rdma_destroy_event_channel(b);
}

static void part_set_option(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0) {
		check("rdma_set_option", 0, "no channel or id: %s", strerror(errno));
		if (ch)
			rdma_destroy_event_channel(ch);
		return;
	}
	uint8_t tos = 0x20;
	int rc = rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos));
	check("rdma_set_option_tos", rc == 0, "RDMA_OPTION_ID_TOS: rc %d (%s)", rc, strerror(errno));
	int v = 1;
	errno = 0;
	rc = rdma_set_option(id, RDMA_OPTION_ID, 0x7f7f, &v, sizeof(v));
	int e = errno;
	check("rdma_set_option_unknown", rc == -1 && e != 0, "optname 0x7f7f: rc %d, errno %d (%s)", rc, e, strerror(e));
	errno = 0;
	rc = rdma_set_option(id, 0x7f7f, 0, &v, sizeof(v));
	e = errno;
	check("rdma_set_option_unknown_level", rc == -1 && e != 0, "level 0x7f7f: rc %d, errno %d (%s)", rc, e, strerror(e));
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

static void part_event_str(void)
{
	static const struct {
		enum rdma_cm_event_type ev;
		const char *want;
	} cases[] = {
		{RDMA_CM_EVENT_ADDR_RESOLVED, "RDMA_CM_EVENT_ADDR_RESOLVED"},
		{RDMA_CM_EVENT_ROUTE_RESOLVED, "RDMA_CM_EVENT_ROUTE_RESOLVED"},
		{RDMA_CM_EVENT_CONNECT_REQUEST, "RDMA_CM_EVENT_CONNECT_REQUEST"},
		{RDMA_CM_EVENT_REJECTED, "RDMA_CM_EVENT_REJECTED"},
		{RDMA_CM_EVENT_ESTABLISHED, "RDMA_CM_EVENT_ESTABLISHED"},
		{RDMA_CM_EVENT_DISCONNECTED, "RDMA_CM_EVENT_DISCONNECTED"},
		{RDMA_CM_EVENT_TIMEWAIT_EXIT, "RDMA_CM_EVENT_TIMEWAIT_EXIT"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *s = rdma_event_str(cases[i].ev);
		if (!check("rdma_event_str", s && strcmp(s, cases[i].want) == 0, "event %d: \"%s\", want \"%s\"", cases[i].ev,
			   s ? s : "(null)", cases[i].want))
			return;
		quiet = 1; /* one check for them all */
	}
	quiet = 0;
	const char *s = rdma_event_str((enum rdma_cm_event_type)1000);
	check("rdma_event_str_unknown", s && s[0], "event 1000: %p", (const void *)s);
}

/* --- ep: synchronous endpoints ----------------------------------------- */

static struct ibv_qp_init_attr ep_attr(void)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.cap.max_send_wr = 4;
	a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = 16;
	a.sq_sig_all = 1;
	return a;
}

static uint8_t ep_recv[MSG_LEN], ep_send[MSG_LEN];

static void part_ep_server(void)
{
	struct rdma_addrinfo hints, *res = NULL;
	struct rdma_cm_id *listen = NULL, *id = NULL;
	struct ibv_wc wc;
	char port[16];
	snprintf(port, sizeof(port), "%d", PORT_EP);
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	int rc = rdma_getaddrinfo(NULL, port, &hints, &res);
	if (!check("ep_getaddrinfo", rc == 0 && res, "rc %d: %s", rc, strerror(errno)))
		return;
	struct ibv_qp_init_attr attr = ep_attr();
	rc = rdma_create_ep(&listen, res, NULL, &attr);
	rdma_freeaddrinfo(res);
	if (!check("rdma_create_ep_passive", rc == 0 && listen, "rc %d: %s", rc, strerror(errno)))
		return;
	rc = rdma_listen(listen, 0);
	if (!check("ep_listen", rc == 0, "rc %d: %s", rc, strerror(errno)))
		goto out_listen;
	arm("rdma_get_request", REQUEST_MS);
	rc = rdma_get_request(listen, &id);
	disarm();
	if (!check("rdma_get_request", rc == 0 && id, "rc %d: %s", rc, strerror(errno)))
		goto out_listen;
	struct pdata cp;
	check("rdma_get_request_qp", id->qp && softrnic_device(id), "id->qp %p, verbs %s", (void *)id->qp, verbs_name(id));
	if (check("rdma_get_request_event", id->event && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST &&
						     id->event->listen_id == listen,
		  "id->event %p: %s, listen_id %p (want %p)", (void *)id->event,
		  id->event ? rdma_event_str(id->event->event) : "-", id->event ? (void *)id->event->listen_id : NULL,
		  (void *)listen) &&
	    got_pdata("rdma_get_request_private_data", id->event->param.conn.private_data,
		      id->event->param.conn.private_data_len, "hello sync client", &cp))
		check("rdma_get_request_private_data", 1, "%s", "");
	if (!id->qp)
		goto out_id;
	check("ep_qp_init", qp_state(id->qp) == IBV_QPS_INIT, "state %d, want INIT", qp_state(id->qp));
	struct ibv_mr *rmr = rdma_reg_msgs(id, ep_recv, sizeof(ep_recv));
	struct ibv_mr *smr = rdma_reg_msgs(id, ep_send, sizeof(ep_send));
	if (!check("rdma_reg_msgs", rmr && smr, "%s", strerror(errno)))
		goto out_id;
	rc = rdma_post_recv(id, NULL, ep_recv, sizeof(ep_recv), rmr);
	check("rdma_post_recv", rc == 0, "rc %d: %s", rc, strerror(errno));
	arm("ep_accept", CONNECT_MS);
	rc = rdma_accept(id, NULL);
	disarm();
	if (!check("ep_accept", rc == 0, "rdma_accept: rc %d (%s)", rc, strerror(errno)))
		goto out_mr;
	check("ep_qp_rts", qp_state(id->qp) == IBV_QPS_RTS, "state %d after rdma_accept, want RTS", qp_state(id->qp));
	memset(&wc, 0, sizeof(wc));
	arm("rdma_get_recv_comp", WC_MS);
	rc = rdma_get_recv_comp(id, &wc);
	disarm();
	if (check("rdma_get_recv_comp", rc == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
						wc.byte_len == MSG_LEN,
		  "rc %d (%s), status %s, opcode %d, byte_len %u", rc, strerror(errno), ibv_wc_status_str(wc.status),
		  wc.opcode, wc.byte_len))
		check_pattern("ep_recv_data", ep_recv, MSG_LEN, SEED_EP_C);
	pattern(ep_send, MSG_LEN, SEED_EP_S);
	rc = rdma_post_send(id, NULL, ep_send, MSG_LEN, smr, 0);
	if (check("rdma_post_send", rc == 0, "rc %d: %s", rc, strerror(errno))) {
		memset(&wc, 0, sizeof(wc));
		arm("rdma_get_send_comp", WC_MS);
		rc = rdma_get_send_comp(id, &wc);
		disarm();
		check("rdma_get_send_comp", rc == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND,
		      "rc %d (%s), status %s, opcode %d", rc, strerror(errno), ibv_wc_status_str(wc.status), wc.opcode);
	}
	arm("ep_disconnect", EVENT_MS);
	rc = rdma_disconnect(id);
	disarm();
	check("ep_disconnect", rc == 0, "rdma_disconnect: rc %d (%s)", rc, strerror(errno));
out_mr:
	rdma_dereg_mr(rmr);
	rdma_dereg_mr(smr);
out_id:
	rdma_destroy_ep(id);
	check("rdma_destroy_ep", 1, "%s", "");
out_listen:
	rdma_destroy_ep(listen);
	check("rdma_destroy_ep_listener", 1, "%s", "");
}

static void part_ep_client(void)
{
	struct rdma_addrinfo hints, *res = NULL;
	struct rdma_cm_id *id = NULL;
	struct ibv_mr *rmr = NULL, *smr = NULL;
	struct ibv_wc wc;
	char port[16];
	int rc;
	snprintf(port, sizeof(port), "%d", PORT_EP);
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	rc = rdma_getaddrinfo(inet_ntoa(peer_addr.sin_addr), port, &hints, &res);
	if (!check("ep_getaddrinfo", rc == 0 && res && res->ai_dst_addr, "rc %d: %s", rc, strerror(errno)))
		return;
	for (int attempt = 0;; attempt++) {
		quiet = attempt > 0;
		struct ibv_qp_init_attr attr = ep_attr();
		arm("rdma_create_ep", 3 * EVENT_MS);
		rc = rdma_create_ep(&id, res, NULL, &attr);
		disarm();
		if (!check("rdma_create_ep", rc == 0 && id && id->qp && softrnic_device(id), "rc %d (%s), qp %p, verbs %s",
			   rc, strerror(errno), rc == 0 ? (void *)id->qp : NULL, rc == 0 ? verbs_name(id) : "-"))
			goto out;
		note_device(id->verbs);
		check("ep_qp_init", qp_state(id->qp) == IBV_QPS_INIT, "state %d, want INIT", qp_state(id->qp));
		rmr = rdma_reg_msgs(id, ep_recv, sizeof(ep_recv));
		smr = rdma_reg_msgs(id, ep_send, sizeof(ep_send));
		if (!check("rdma_reg_msgs", rmr && smr, "%s", strerror(errno)))
			goto out_id;
		rc = rdma_post_recv(id, NULL, ep_recv, sizeof(ep_recv), rmr);
		check("rdma_post_recv", rc == 0, "rc %d: %s", rc, strerror(errno));
		struct pdata cp = make_pdata("hello sync client", NULL, 0);
		struct rdma_conn_param param = conn_param(&cp);
		quiet = 0;
		arm("ep_connect", CONNECT_MS);
		rc = rdma_connect(id, &param);
		int e = errno;
		disarm();
		if (rc == 0)
			break;
		struct rdma_cm_event *ev = id->event;
		if (e == ECONNREFUSED && ev && retryable(ev, attempt)) {
			printf("# ep: attempt %d: %s, status %d: the server is not listening yet\n", attempt + 1,
			       rdma_event_str(ev->event), ev->status);
			rdma_dereg_mr(rmr);
			rdma_dereg_mr(smr);
			rdma_destroy_ep(id);
			sleep_ms(RETRY_SLEEP_MS);
			continue;
		}
		check("ep_connect", 0, "rdma_connect: rc %d (%s), id->event %s status %d", rc, strerror(e),
		      ev ? rdma_event_str(ev->event) : "-", ev ? ev->status : 0);
		goto out_mr;
	}
	check("ep_connect", 1, "%s", "");
	check("ep_qp_rts", qp_state(id->qp) == IBV_QPS_RTS, "state %d after rdma_connect, want RTS", qp_state(id->qp));
	pattern(ep_send, MSG_LEN, SEED_EP_C);
	rc = rdma_post_send(id, NULL, ep_send, MSG_LEN, smr, 0);
	if (check("rdma_post_send", rc == 0, "rc %d: %s", rc, strerror(errno))) {
		memset(&wc, 0, sizeof(wc));
		arm("rdma_get_send_comp", WC_MS);
		rc = rdma_get_send_comp(id, &wc);
		disarm();
		check("rdma_get_send_comp", rc == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND,
		      "rc %d (%s), status %s, opcode %d", rc, strerror(errno), ibv_wc_status_str(wc.status), wc.opcode);
	}
	memset(&wc, 0, sizeof(wc));
	arm("rdma_get_recv_comp", WC_MS);
	rc = rdma_get_recv_comp(id, &wc);
	disarm();
	if (check("rdma_get_recv_comp", rc == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
						wc.byte_len == MSG_LEN,
		  "rc %d (%s), status %s, opcode %d, byte_len %u", rc, strerror(errno), ibv_wc_status_str(wc.status),
		  wc.opcode, wc.byte_len))
		check_pattern("ep_recv_data", ep_recv, MSG_LEN, SEED_EP_S);
	arm("ep_disconnect", EVENT_MS);
	rc = rdma_disconnect(id);
	disarm();
	check("ep_disconnect", rc == 0, "rdma_disconnect: rc %d (%s)", rc, strerror(errno));
out_mr:
	rdma_dereg_mr(rmr);
	rdma_dereg_mr(smr);
out_id:
	rdma_destroy_ep(id);
	check("rdma_destroy_ep", 1, "%s", "");
out:
	quiet = 0;
	rdma_freeaddrinfo(res);
}

/* --- ud: SIDR --------------------------------------------------------------- */

#define UD_LEN 64
#define GRH_LEN 40

static void part_ud_server(void)
{
	struct sockaddr_in sa;
	struct rdma_cm_id *listen = NULL;
	struct rdma_cm_event *ev;
	struct ibv_wc wc;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!check("ud_channel", ch != NULL, "%s", strerror(errno)))
		return;
	int rc = rdma_create_id(ch, &listen, NULL, RDMA_PS_UDP);
	if (!check("ud_create_id", rc == 0 && listen && listen->ps == RDMA_PS_UDP && listen->qp_type == IBV_QPT_UD,
		   "rc %d (%s), ps 0x%x qp_type %d", rc, strerror(errno), rc == 0 ? listen->ps : 0,
		   rc == 0 ? (int)listen->qp_type : -1))
		goto out_ch;
	rc = rdma_bind_addr(listen, any_port(&sa, PORT_UD));
	check("ud_bind_addr", rc == 0, "rc %d: %s", rc, strerror(errno));
	rc = rdma_listen(listen, 8);
	if (!check("ud_listen", rc == 0, "rc %d: %s", rc, strerror(errno)))
		goto out_listen;
	ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, REQUEST_MS, "ud_connect_request");
	if (!ev)
		goto out_listen;
	struct rdma_cm_id *id = ev->id;
	struct pdata cp;
	uint32_t client_qpn = 0;
	check("ud_connect_request", ev->listen_id == listen && id && id != listen && softrnic_device(id) &&
					    id->ps == RDMA_PS_UDP,
	      "listen_id %p (want %p), id %p, verbs %s, ps 0x%x", (void *)ev->listen_id, (void *)listen, (void *)id,
	      verbs_name(id), id ? id->ps : 0);
	if (got_pdata("ud_connect_request_private_data", ev->param.ud.private_data, ev->param.ud.private_data_len,
		      "hello ud client", &cp)) {
		client_qpn = be32toh(cp.qpn);
		check("ud_connect_request_private_data", client_qpn != 0, "no QP number in it");
	}
	ack(ev);

	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *scq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0), *rcq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	uint8_t *buf = alloc_buf(AREA);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, AREA, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!check("ud_own_pd_cq", pd && scq && rcq && mr, "ibv_alloc_pd, ibv_create_cq or ibv_reg_mr failed: %s",
		   strerror(errno)))
		goto out_res;
	struct ibv_qp_init_attr qa;
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_UD;
	qa.send_cq = scq;
	qa.recv_cq = rcq;
	qa.cap.max_send_wr = 4;
	qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	rc = rdma_create_qp(id, pd, &qa);
	if (!check("ud_create_qp", rc == 0 && id->qp && id->qp->qp_type == IBV_QPT_UD && id->qp->pd == pd,
		   "rc %d (%s), qp %p", rc, strerror(errno), (void *)id->qp))
		goto out_res;
	check("ud_qp_rts", qp_state(id->qp) == IBV_QPS_RTS,
	      "state %d after rdma_create_qp, want RTS (a UD QP is ready at once)",
	      qp_state(id->qp));
	check("ud_post_recv", post_recv(id->qp, WR_RECV0, buf, GRH_LEN + 256, mr->lkey) == 0, "ibv_post_recv failed");
	struct pdata sp = make_pdata("hello ud server", NULL, id->qp->qp_num);
	struct rdma_conn_param param;
	memset(&param, 0, sizeof(param));
	param.private_data = &sp;
	param.private_data_len = sizeof(sp);
	rc = rdma_accept(id, &param);
	if (!check("ud_accept", rc == 0, "rdma_accept: rc %d (%s)", rc, strerror(errno)))
		goto out_qp;
	/* The client's datagram: the GRH, then the payload. */
	if (expect_wc(rcq, &wc, CONNECT_MS, "ud_recv", IBV_WC_RECV, WR_RECV0, GRH_LEN + UD_LEN, 0) &&
	    check("ud_recv_src_qp", wc.src_qp == client_qpn && (wc.wc_flags & IBV_WC_GRH),
		  "src_qp %u (want %u), wc_flags 0x%x",
		  wc.src_qp, client_qpn, wc.wc_flags))
		check_pattern("ud_recv", buf + GRH_LEN, UD_LEN, SEED_UD);
out_qp:
	rdma_destroy_qp(id);
out_res:
	if (mr)
		ibv_dereg_mr(mr);
	if (scq)
		ibv_destroy_cq(scq);
	if (rcq)
		ibv_destroy_cq(rcq);
	if (pd)
		ibv_dealloc_pd(pd);
	free(buf);
	rc = rdma_destroy_id(id);
	check("ud_destroy_id", rc == 0, "rc %d: %s", rc, strerror(errno));
out_listen:
	rdma_destroy_id(listen);
out_ch:
	rdma_destroy_event_channel(ch);
}

static void part_ud_client(void)
{
	struct sockaddr_in sa;
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *id = NULL;
	struct ibv_wc wc;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!check("ud_channel", ch != NULL, "%s", strerror(errno)))
		return;
	uint8_t *buf = alloc_buf(AREA);
	for (int attempt = 0;; attempt++) {
		quiet = attempt > 0;
		id = active_id(ch, RDMA_PS_UDP, at_port(&sa, &peer_addr, PORT_UD), "ud");
		if (!id)
			goto out;
		check("ud_id_qp_type", id->qp_type == IBV_QPT_UD, "qp_type %d for RDMA_PS_UDP", id->qp_type);
		struct ibv_qp_init_attr qa;
		memset(&qa, 0, sizeof(qa));
		qa.qp_type = IBV_QPT_UD;
		qa.cap.max_send_wr = 4;
		qa.cap.max_recv_wr = 4;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = 1;
		int rc = rdma_create_qp(id, NULL, &qa);
		if (!check("ud_create_qp", rc == 0 && id->qp && id->qp->qp_type == IBV_QPT_UD && id->pd && id->send_cq,
			   "rc %d (%s), qp %p", rc, strerror(errno), (void *)id->qp)) {
			rdma_destroy_id(id);
			goto out;
		}
		check("ud_qp_rts", qp_state(id->qp) == IBV_QPS_RTS, "state %d after rdma_create_qp, want RTS",
		      qp_state(id->qp));
		struct pdata cp = make_pdata("hello ud client", NULL, id->qp->qp_num);
		struct rdma_conn_param param;
		memset(&param, 0, sizeof(param));
		param.private_data = &cp;
		param.private_data_len = sizeof(cp);
		rc = rdma_connect(id, &param);
		if (!check("ud_connect", rc == 0, "rdma_connect: rc %d (%s)", rc, strerror(errno))) {
			drop_active(id, NULL);
			goto out;
		}
		quiet = 0;
		ev = get_event(ch, CONNECT_MS, "ud_connect");
		if (!ev) {
			drop_active(id, NULL);
			goto out;
		}
		if (ev->event == RDMA_CM_EVENT_ESTABLISHED || attempt + 1 >= RETRIES ||
		    (ev->event != RDMA_CM_EVENT_REJECTED && ev->event != RDMA_CM_EVENT_UNREACHABLE))
			break;
		/* A SIDR_REP "no such service": the server is not listening yet. */
		printf("# ud: attempt %d: %s, status %d: the server is not listening yet\n", attempt + 1,
		       rdma_event_str(ev->event), ev->status);
		ack(ev);
		drop_active(id, NULL);
		sleep_ms(RETRY_SLEEP_MS);
	}
	if (!check("ud_established", ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->id == id && ev->status == 0,
		   "%s (status %d) for id %p, want ESTABLISHED for %p", rdma_event_str(ev->event), ev->status, (void *)ev->id,
		   (void *)id)) {
		ack(ev);
		drop_active(id, NULL);
		goto out;
	}
	struct pdata sp;
	uint32_t qpn = ev->param.ud.qp_num, qkey = ev->param.ud.qkey;
	struct ibv_ah_attr ah_attr = ev->param.ud.ah_attr;
	if (got_pdata("ud_established_private_data", ev->param.ud.private_data, ev->param.ud.private_data_len,
		      "hello ud server", &sp))
		check("ud_established_private_data", be32toh(sp.qpn) == qpn, "the server's QP %u, the event's %u",
		      be32toh(sp.qpn), qpn);
	check("ud_established_param", qpn != 0 && qkey == RDMA_UDP_QKEY && ah_attr.is_global && ah_attr.port_num == 1,
	      "qp_num %u, qkey 0x%x (want 0x%x), ah_attr is_global %d port %d", qpn, qkey, RDMA_UDP_QKEY, ah_attr.is_global,
	      ah_attr.port_num);
	ack(ev);
	struct ibv_ah *ah = ibv_create_ah(id->pd, &ah_attr);
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, AREA, IBV_ACCESS_LOCAL_WRITE);
	if (check("ud_create_ah", ah && mr, "ibv_create_ah from the event's ah_attr or ibv_reg_mr: %s", strerror(errno))) {
		pattern(buf, UD_LEN, SEED_UD);
		struct ibv_sge sg = {.addr = (uintptr_t)buf, .length = UD_LEN, .lkey = mr->lkey};
		struct ibv_send_wr wr = {.wr_id = WR_SEND, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED},
				   *bad = NULL;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = qpn;
		wr.wr.ud.remote_qkey = qkey;
		int rc = ibv_post_send(id->qp, &wr, &bad);
		if (check("ud_send_post", rc == 0, "ibv_post_send: %d (%s)", rc, strerror(rc)))
			expect_wc(id->send_cq, &wc, WC_MS, "ud_send", IBV_WC_SEND, WR_SEND, -1, 1);
	}
	if (ah)
		check("ud_destroy_ah", ibv_destroy_ah(ah) == 0, "%s", strerror(errno));
	rdma_destroy_qp(id);
	if (mr)
		ibv_dereg_mr(mr);
	int rc = rdma_destroy_id(id);
	check("ud_destroy_id", rc == 0, "rc %d: %s", rc, strerror(errno));
out:
	quiet = 0;
	free(buf);
	rdma_destroy_event_channel(ch);
}

/* --- main ---------------------------------------------------------------- */

static int run(int server, const char *host)
{
	part_getaddrinfo(server, host);
	if (server) {
		part_rc_server();
		part_reject_server();
	} else {
		part_rc_client();
		part_reject_client();
		part_no_listener_client();
	}
	part_migrate();
	part_set_option();
	part_event_str();
	if (server) {
		part_ep_server();
		part_ud_server();
	} else {
		part_ep_client();
		part_ud_client();
	}
	check("rdma_ack_cm_event", n_ack_fails == 0 && n_acks == n_events && n_events > 0,
	      "%d events taken, %d acked, %d acks failed", n_events, n_acks, n_ack_fails);
	return summary();
}

static void usage(void)
{
	fprintf(stderr, "usage: cma_test server\n"
			"       cma_test client HOST\n");
	exit(2);
}

int main(int argc, char **argv)
{
	pthread_t wd;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		usage();
	printf("# uid %d euid %d\n", (int)getuid(), (int)geteuid());
	if (pthread_create(&wd, NULL, watchdog, NULL) != 0)
		fatal("watchdog", "pthread_create failed");
	pthread_detach(wd);
	if (strcmp(argv[1], "server") == 0 && argc == 2)
		return run(1, NULL);
	if (strcmp(argv[1], "client") == 0 && argc == 3) {
		struct in_addr a;
		if (inet_pton(AF_INET, argv[2], &a) != 1)
			usage();
		return run(0, argv[2]);
	}
	usage();
	return 2;
}
