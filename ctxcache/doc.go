// Package ctxcache is GCCache, the NIC's non-blocking context cache: every
// lookup of a QP, CQ or SRQ context, a memory protection entry or a
// translation entry goes through it, a miss never blocks a later hit, and
// repeated misses on one context cost one host fetch.
package ctxcache
