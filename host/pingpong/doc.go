// Package pingpong is rdma-core's libibverbs example programs
// (ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong)
// on a softrnic device: the same out-of-band exchange of destinations
// over a TCP socket (LID:QPN:PSN:GID as text, 52 bytes each; the client
// writes first and ends with "done"), the same queue pair settings, the
// same ping-pong of SENDs and the same report, so that either side can be
// the real program.
package pingpong
