package main

import (
	"log/slog"
	"os"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/capture"
)

// openRecording starts a pcapng file; stop flushes and closes it (call
// it after the NICs recording into it have closed). flag names the
// option in a report of frames lost to a write error.
func openRecording(name, flag string) (w *capture.Writer, stop func(), err error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, nil, err
	}
	if w, err = capture.NewWriter(f); err != nil {
		f.Close()
		return nil, nil, err
	}
	slog.Debug("recording frames", "file", name)
	return w, func() {
		if err := w.Flush(); err != nil {
			slog.Error("recording frames: "+err.Error(), "file", name, "flag", flag, "not_recorded", w.Dropped.Load())
		} else if n := w.Dropped.Load(); n > 0 {
			slog.Warn("recording frames: some not recorded", "file", name, "flag", flag, "not_recorded", n)
		}
		f.Close()
	}, nil
}

// capturePorts records the frames of ports in a pcapng file, the ports
// replaced in place by recording ones (perf --pcap); tap records the
// frames the kernel's UDP stack takes in for the NIC
// (datapath.NICConfig.DeliverTap), as the interface "DEV kernel rx".
func capturePorts(name, dev string, ports []datapath.Port) (tap func([]byte), stop func(), err error) {
	w, stop, err := openRecording(name, "--pcap")
	if err != nil {
		return nil, nil, err
	}
	if tap, err = w.WrapDevice(dev, ports); err != nil {
		stop()
		return nil, nil, err
	}
	return tap, stop, nil
}

// recorder, when set (demo -pcap), records the ports newDemoEnd opens.
var recorder *capture.Writer

// startRecording opens a pcapng file for the demo's ports.
func startRecording(name string) (stop func(), err error) {
	w, done, err := openRecording(name, "-pcap")
	if err != nil {
		return nil, err
	}
	recorder = w
	return func() {
		recorder = nil
		done()
	}, nil
}
