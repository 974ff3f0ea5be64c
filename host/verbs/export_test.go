package verbs

// FirstMTT is the MTT index of a region's first page, for tests that
// evict it from the NIC's cache.
func FirstMTT(mr *MR) uint64 { return mr.firstMTT }
