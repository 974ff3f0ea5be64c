// Package hpu runs sPIN-style packet handlers on the NIC: user code installs
// header, payload and completion handlers that run in pools of goroutines
// (handler processing units) as matching packets arrive.
package hpu
