// Package wiretest holds test helpers for RoCEv2 frames: the captures of real
// rdma_rxe peers under ../shared/testdata/rxe, and sample frames for every
// opcode.
package wiretest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/google/gopacket"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// SharedDir returns the project's shared/ folder: $SOFTRNIC_SHARED if set,
// else the folder "shared" beside the module root.
func SharedDir() (string, error) {
	if d := os.Getenv("SOFTRNIC_SHARED"); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			shared := filepath.Join(dir, "..", "shared")
			if _, err := os.Stat(shared); err != nil {
				return "", fmt.Errorf("wiretest: no shared folder beside the module at %s", dir)
			}
			return shared, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("wiretest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Frame is one frame of a capture.
type Frame struct {
	File  string // base name of the capture
	Index int    // 1-based frame number, as Wireshark counts
	Data  []byte
}

// CaptureFiles returns the rxe capture files. When they are missing it skips
// the test, or fails it under CI (CI=true), where they must be present.
func CaptureFiles(tb testing.TB) []string {
	tb.Helper()
	shared, err := SharedDir()
	if err == nil {
		var files []string
		files, err = filepath.Glob(filepath.Join(shared, "testdata", "rxe", "*.pcapng"))
		if err == nil && len(files) == 0 {
			err = errors.New("no *.pcapng files under shared/testdata/rxe")
		}
		if err == nil {
			sort.Strings(files)
			return files
		}
	}
	if os.Getenv("CI") != "" {
		tb.Fatalf("rxe captures missing: %v", err)
	}
	tb.Skipf("rxe captures missing (%v); set SOFTRNIC_SHARED to the shared/ folder", err)
	return nil
}

// ReadCapture returns every Ethernet frame of a pcapng (or pcap) file.
func ReadCapture(path string) ([]Frame, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if lt := r.LinkType(); lt != layers.LinkTypeEthernet {
		return nil, fmt.Errorf("%s: link type %v, want Ethernet", path, lt)
	}
	var frames []Frame
	for i := 1; ; i++ {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			return frames, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s frame %d: %w", path, i, err)
		}
		frames = append(frames, Frame{File: filepath.Base(path), Index: i, Data: data})
	}
}

// WritePcap writes frames to a classic pcap file with an Ethernet link type.
func WritePcap(path string, frames [][]byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		f.Close()
		return err
	}
	ts := time.Unix(1_700_000_000, 0)
	for i, fr := range frames {
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(fr), Length: len(fr)}
		if err := w.WritePacket(ci, fr); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
