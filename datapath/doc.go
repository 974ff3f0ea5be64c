// Package datapath is the NIC's packet engine: ports that move frames, RX
// dispatch, the requester, responder and completer, and TX.
//
// The RoCEv2 wire format itself lives in the wire sub-package.
package datapath
