package bpf

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel roce xdp_roce.c -- -I/usr/include/x86_64-linux-gnu
