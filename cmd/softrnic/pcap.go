package main

import (
	"fmt"
	"log"
	"os"

	"github.com/softrnic/softrnic/datapath"
	"github.com/softrnic/softrnic/datapath/capture"
)

// capturePorts records the frames of ports in a pcapng file, the ports
// replaced in place by recording ones; stop flushes and closes the file
// (call it after the device has closed).
func capturePorts(name, dev string, ports []datapath.Port) (stop func(), err error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, err
	}
	w, err := capture.NewWriter(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	for i, p := range ports {
		c, err := capture.Wrap(p, w, fmt.Sprintf("%s queue %d", dev, i))
		if err != nil {
			f.Close()
			return nil, err
		}
		ports[i] = c
	}
	return func() {
		if err := w.Flush(); err != nil {
			log.Printf("softrnic: --pcap %s: %v (%d frames not recorded)", name, err, w.Dropped.Load())
		}
		f.Close()
	}, nil
}

// recorder, when set (demo -pcap), records the ports newDemoEnd opens.
var recorder *capture.Writer

// startRecording opens a pcapng file for the demo's ports; stop flushes
// and closes it.
func startRecording(name string) (stop func(), err error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, err
	}
	w, err := capture.NewWriter(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	recorder = w
	return func() {
		recorder = nil
		if err := w.Flush(); err != nil {
			log.Printf("softrnic: -pcap %s: %v (%d frames not recorded)", name, err, w.Dropped.Load())
		}
		f.Close()
	}, nil
}
