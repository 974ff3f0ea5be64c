// Package reliability keeps Reliable Connection reliable: the replay buffer
// whose capacity gates transmission per QP, ACK/NAK/RNR handling,
// retransmit timers and duplicate detection.
package reliability
