// Package hostmem is the bottom of the host side: host memory and the
// IOVAs the NIC reaches it by, the context tables in it, the formats the
// driver and the NIC share there (work queue entries, completion queue
// entries, QP, CQ, SRQ and memory-region contexts), memory registration
// into the MTT, the clock, and the DMA engine, with its PCIe model,
// through which alone the NIC reaches host memory.
package hostmem
