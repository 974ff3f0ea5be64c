// Package bpf holds the XDP program that steers RoCEv2 (UDP port 4791)
// frames to the NIC's AF_XDP sockets and passes every other frame to the
// kernel, with its loader.
package bpf
