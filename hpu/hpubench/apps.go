package hpubench

import (
	"errors"
	"io"
)

// ReportApps prints each application of hpu/apps on a live NIC against
// doing the same on the host.
func ReportApps(w io.Writer) error {
	return errors.New("hpubench: the application benchmarks are not written yet")
}
