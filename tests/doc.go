// Package tests holds cross-package integration tests: NICs in network
// namespaces over veth pairs, fault injection and interoperability runs.
// Its sub-package topo builds the namespaces.
package tests
