// Package mqtt is sluice's MQTT source: a subscriber ([NewMQTT]) whose
// socket every runner reads like any stream, framed into whole MQTT
// packets (3.1.1 and 5) as the broker sent them, with QoS 1 messages
// acknowledged only after their chunk is released; [ForEachMQTTMessage]
// takes the messages out of a chunk.
//
// It is a package of its own, apart from package srcs, so that a program
// that reads no MQTT links neither the MQTT packet code
// (github.com/mochi-mqtt/server/v2/packets) nor crypto/tls, which this
// package links for a broker's TLS (it imports srcs/trust itself).
// Its configuration uses srcs's vocabulary (srcs.Backoff, srcs.TLSConfig,
// srcs.Secret), and its failures match srcs's errors (srcs.ErrTooLarge,
// srcs.ErrMalformed, srcs.ErrTimeout, srcs.ErrReset).
package mqtt
