//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// xdp_roce steers RoCEv2 frames (UDP destination port 4791, over IPv4 or
// IPv6, optionally behind one 802.1Q tag) to the AF_XDP socket registered
// for the receive queue in the xsks map, and passes every other frame to the
// kernel unchanged; the first fragment of an IPv4 datagram to 4791 goes to
// the socket too, whose port counts it and drops it. It is frags-aware, so it attaches in native mode on
// interfaces with an MTU above one page; the headers it reads are always in
// the first buffer.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define ROCEV2_PORT 4791
#define MAX_QUEUES 256

// Counters, indexed by enum stat.
enum stat {
	STAT_REDIRECTED, // RoCEv2 frames handed to the XSK map
	STAT_PASSED,     // other frames passed to the kernel
	STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct vlan_hdr {
	__be16 tci;
	__be16 encapsulated_proto;
};

static __always_inline int count(enum stat s, int action)
{
	__u32 key = s;
	__u64 *v = bpf_map_lookup_elem(&stats, &key);
	if (v)
		*v += 1;
	return action;
}

static __always_inline int is_rocev2(void *data, void *end)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return 0;
	__be16 proto = eth->h_proto;
	void *l3 = eth + 1;
	if (proto == bpf_htons(ETH_P_8021Q)) {
		struct vlan_hdr *vlan = l3;
		if ((void *)(vlan + 1) > end)
			return 0;
		proto = vlan->encapsulated_proto;
		l3 = vlan + 1;
	}
	struct udphdr *udp;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_UDP || ip->ihl < 5)
			return 0;
		// RoCEv2 is never fragmented. A first fragment (MF set, offset 0)
		// still has its UDP header: one to 4791 goes to the socket, whose
		// port counts it and drops it. A later fragment has no UDP header
		// to tell it by; the kernel, which never gets the first, drops it
		// when its reassembly times out.
		if (ip->frag_off & bpf_htons(0x1fff))
			return 0;
		udp = (void *)ip + ip->ihl * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
			return 0;
		udp = (void *)(ip6 + 1);
	} else {
		return 0;
	}
	if ((void *)(udp + 1) > end)
		return 0;
	return udp->dest == bpf_htons(ROCEV2_PORT);
}

SEC("xdp.frags")
int xdp_roce(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (!is_rocev2(data, end))
		return count(STAT_PASSED, XDP_PASS);
	// With no socket on this queue the frame goes to the kernel.
	return count(STAT_REDIRECTED, bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS));
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
