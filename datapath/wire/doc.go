// Package wire is the RoCEv2 wire format: zero-copy header views, the opcode
// table, 24-bit PSN arithmetic, the ICRC, a frame parser and a frame encoder.
//
// A RoCEv2 frame as it crosses the wire:
//
//	+----------+----------------+-----+-----+------------+---------+-----+------+
//	| Ethernet | IPv4 or IPv6   | UDP | BTH | extension  | payload | pad | ICRC |
//	| (+VLAN)  | (no options)   |4791 | 12B | headers    |         | 0-3 |  4B  |
//	+----------+----------------+-----+-----+------------+---------+-----+------+
//	                             \___________ covered by the ICRC ______/
//	                              (with the variant fields masked to ones)
//
// Extension headers follow the BTH in a fixed order, each present only when
// the opcode calls for it: DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt,
// IETH.
//
// Every header type is a byte-slice view (type BTH []byte, …) with getters and
// setters, and a Fields struct that Encode writes. [Parse] checks a whole frame
// and fills a caller-owned [Packet] with header offsets; [Encode] writes a
// complete frame, Ethernet to ICRC, into a caller-owned buffer. Neither
// allocates, and neither panics on any input.
package wire
