/*
 * report.h: how the C test programs report: one line a check, "ok NAME"
 * or "FAIL NAME: detail", and a last "N passed, M failed" (the Go tests
 * read them); a run gives up after MAX_TIMEOUTS waits timed out; and
 * the wait for one completion. Each program includes it once.
 */
#ifndef SOFTRNIC_TEST_REPORT_H
#define SOFTRNIC_TEST_REPORT_H

#include <infiniband/verbs.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_TIMEOUTS 3 /* then give up: the rest would only time out too */

static int n_pass, n_fail, n_timeouts;
static int quiet; /* a retried attempt: its passing checks were reported by the first */

static int summary(void)
{
	printf("%d passed, %d failed\n", n_pass, n_fail);
	fflush(stdout);
	return n_fail ? 1 : 0;
}

__attribute__((format(printf, 3, 4))) static int check(const char *name, int ok, const char *fmt, ...)
{
	if (ok && quiet)
		return ok;
	if (ok) {
		printf("ok %s\n", name);
		n_pass++;
	} else {
		va_list ap;
		printf("FAIL %s: ", name);
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf("\n");
		n_fail++;
	}
	fflush(stdout);
	return ok;
}

__attribute__((format(printf, 2, 3), unused)) static void skip(const char *name, const char *fmt, ...)
{
	va_list ap;
	printf("skip %s: ", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

__attribute__((noreturn, unused)) static void fatal(const char *name, const char *what)
{
	check(name, 0, "%s (giving up)", what);
	summary();
	exit(1);
}

__attribute__((unused)) static void timed_out(void)
{
	if (++n_timeouts >= MAX_TIMEOUTS) {
		check("timeouts", 0, "%d waits timed out: giving up", n_timeouts);
		summary();
		exit(1);
	}
}

__attribute__((unused)) static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* wait_wc polls cq for one completion, at most ms: a FAIL (and a
 * timeout) when none comes. */
__attribute__((unused)) static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int ms, const char *name)
{
	long long deadline = now_ms() + ms;
	for (unsigned spin = 0;; spin++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n == 1)
			return 1;
		if (n < 0) {
			check(name, 0, "ibv_poll_cq returned %d", n);
			return 0;
		}
		if ((spin & 63) == 63) {
			if (now_ms() > deadline) {
				check(name, 0, "no completion within %d ms", ms);
				timed_out();
				return 0;
			}
			sched_yield();
		}
	}
}

#endif
