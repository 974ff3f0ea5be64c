// Package host is the host side of the NIC, in packages by layer: at the
// bottom hostmem (host memory and its IOVAs, the context tables, the
// WQE, CQE and context formats the driver and the NIC share, memory
// registration, the DMA engine and its PCIe model); above it verbs (the
// verbs API), cm (connection management), perftest, pingpong and rping
// (the tools' protocols), capi (the C libraries' NIC), metrics and
// observe. This package holds no code of its own.
package host
