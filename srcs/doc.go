// Package srcs holds the sources sluice reads and the vocabulary to
// configure them: the small [Source] interface and the capabilities a
// source of one's own may offer ([Reconnector], [ReleaseObserver],
// [Framed] and the rest), the listeners ([ListenTCP], [ListenUnix]), the
// clients ([NewTCPClient], [NewUnixClient]), [ListenUDP], [NewFile] and
// [NewTail], the framers that cut streams into records
// ([Newline], [LengthPrefix], [OctetCounting], [MQTTPackets],
// [ParseFraming]), the chunk [Flags], and the errors a program may match
// ([ErrReset], [ErrTimeout], [ErrRecordTooLong] and the rest).
//
// The concrete sources also offer what the runners need from them (a
// kernel descriptor, datagram receives, accepts on a runner's own loop) as
// methods that name types of sluice's internal packages; a program has no
// need to call them.
//
// Two packages beside it add what not every program needs, so that a
// program links only what it uses: srcs/trust, TLS and the PROXY
// protocol for these listeners and clients, and srcs/mqtt, the MQTT
// source.
package srcs
