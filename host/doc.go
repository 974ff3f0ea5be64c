// Package host is the host side of the NIC: the verbs API (PD, MR, CQ, QP,
// SRQ), the context tables in host memory, memory registration and the DMA
// engine through which alone the NIC reaches host memory.
package host
