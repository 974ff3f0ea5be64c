package capi

import (
	"debug/elf"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/internal/testenv"
)

// exports returns a shared library's defined dynamic symbols as
// "name@version" (the default version of each; a library's older,
// hidden versions are left out).
func exports(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || elf.ST_BIND(s.Info) == elf.STB_LOCAL || s.Version == "" || s.Name == s.Version {
			continue
		}
		if s.VersionIndex&0x8000 != 0 { // hidden: an older ABI's
			continue
		}
		out[s.Name+"@"+s.Version] = true
	}
	return out
}

// softrnic's library for each library a binary may link.
var ours = map[string]string{
	"libibverbs.so.1": "libibverbs.so.1",
	"librdmacm.so.1":  "librdmacm.so.1",
	"libmlx5.so.1":    "libmlx5.so.1",
	"libefa.so.1":     "libefa.so.1",
}

// TestBinariesFindTheirSymbols: every symbol that Debian's perftest,
// ibverbs-utils and rdmacm-utils binaries take from libibverbs,
// librdmacm, libmlx5 or libefa is in softrnic's library of that name,
// with the version the binary asks for (so they load, with lazy binding
// or LD_BIND_NOW alike).
func TestBinariesFindTheirSymbols(t *testing.T) {
	root := requireLibs(t)
	var bins []string
	for _, g := range []string{"ib_*_bw", "ib_*_lat", "ibv_*", "rping", "ucmatose", "udaddy", "rdma_server", "rdma_client", "rdma_xserver", "rdma_xclient", "mckey", "cmtime", "rstream", "riostream", "udpong"} {
		m, _ := filepath.Glob(filepath.Join("/usr/bin", g))
		bins = append(bins, m...)
	}
	if len(bins) < 10 {
		testenv.Unavailable(t, "Debian's perftest, ibverbs-utils and rdmacm-utils are not installed (%d binaries found)", len(bins))
	}
	have := map[string]map[string]bool{}
	for lib, file := range ours {
		p := filepath.Join(root, "lib", file)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is not built (make libs): %v", p, err)
		}
		have[lib] = exports(t, p)
	}
	checked := 0
	for _, bin := range bins {
		f, err := elf.Open(bin)
		if err != nil {
			continue // a script
		}
		syms, _ := f.ImportedSymbols()
		f.Close()
		var missing []string
		for _, s := range syms {
			if _, ok := ours[s.Library]; !ok {
				continue
			}
			checked++
			if !have[s.Library][s.Name+"@"+s.Version] {
				missing = append(missing, s.Name+"@"+s.Version+" ("+s.Library+")")
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s needs what softrnic's libraries do not export: %s", bin, strings.Join(missing, ", "))
		}
	}
	if checked == 0 {
		t.Fatal("no binary took a symbol from libibverbs or librdmacm")
	}
}

// TestPublicSymbols: softrnic's libibverbs and librdmacm export every
// public symbol of Debian's (rdma-core 44), each at its version; only
// the providers' private interface (IBVERBS_PRIVATE_*) is softrnic's own
// choice.
func TestPublicSymbols(t *testing.T) {
	root := requireLibs(t)
	for _, lib := range []string{"libibverbs.so.1", "librdmacm.so.1"} {
		sys := filepath.Join("/lib/x86_64-linux-gnu", lib)
		if _, err := os.Stat(sys); err != nil {
			testenv.Unavailable(t, "Debian's %s is not installed (apt-get install %s): %v", lib, strings.TrimSuffix(strings.TrimSuffix(lib, ".so.1"), "lib")+"-dev", err)
		}
		want, got := exports(t, sys), exports(t, filepath.Join(root, "lib", lib))
		var missing []string
		for s := range want {
			if strings.Contains(s, "@IBVERBS_PRIVATE_") {
				continue
			}
			if !got[s] {
				missing = append(missing, s)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("softrnic's %s lacks %d of Debian's public symbols: %s", lib, len(missing), strings.Join(missing, " "))
		}
	}
}
