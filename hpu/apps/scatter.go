package apps

import (
	"github.com/softrnic/softrnic/hpu"
)

// Strided is a strided layout in host memory (an MPI vector datatype):
// blocks of Block bytes, one every Stride bytes, the first at Offset. A
// message's byte i lands at Offset + (i/Block)*Stride + i%Block.
type Strided struct {
	Block  int
	Stride int
	Offset int
}

// capacity is how many bytes of a message the layout places in n bytes
// of host memory.
func (s Strided) capacity(n uint64) uint64 {
	off, block, stride := uint64(s.Offset), uint64(s.Block), uint64(s.Stride)
	if n <= off {
		return 0
	}
	avail := n - off
	if avail < block {
		return avail // part of the first block
	}
	whole := (avail-block)/stride + 1 // blocks that fit whole
	if next := whole * stride; next < avail {
		return whole*block + avail - next // and part of the next (less than a block)
	}
	return whole * block
}

// NewScatter installs a strided scatter (after PsPIN's datatype
// benchmark): the payload handlers place each packet's bytes, at its
// offset in the message, into layout in host with t.DMAToHost (a packet
// may start mid-block and span several blocks); the gaps between blocks
// are left as they are. A message longer than the layout's room in host
// stops its handlers with ErrShape: the message fails, before any of it
// lands if its length is known at its first packet (a WRITE's). layout
// needs Stride >= Block > 0, Offset >= 0 and room for a byte in host.
// done, if set, runs after each message.
func NewScatter(e hpu.Installer, host hpu.Region, layout Strided, done func(msg *hpu.Message, err error)) (*hpu.Installed, error) {
	if layout.Block <= 0 || layout.Stride < layout.Block || layout.Offset < 0 || host == nil {
		return nil, ErrShape
	}
	room := layout.capacity(host.Len())
	if room == 0 {
		return nil, ErrShape
	}
	block, stride, base := uint64(layout.Block), uint64(layout.Stride), uint64(layout.Offset)
	return e.Install(hpu.Context{
		Name: "scatter",
		Host: host,
		Done: done,
		Header: func(t *hpu.Task) hpu.Action {
			if uint64(t.Message.Length) > room {
				panic(ErrShape)
			}
			return hpu.Success
		},
		Payload: func(t *hpu.Task) hpu.Action {
			p := t.Packet.Payload
			at := uint64(t.Packet.Offset)
			if at+uint64(len(p)) > room {
				panic(ErrShape)
			}
			if block == stride { // contiguous
				t.DMAToHost(base+at, p)
				return hpu.Success
			}
			for len(p) > 0 {
				in := at % block // the offset in the block
				n := min(uint64(len(p)), block-in)
				t.DMAToHost(base+at/block*stride+in, p[:n])
				p, at = p[n:], at+n
			}
			return hpu.Success
		},
	})
}
